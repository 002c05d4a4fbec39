//! `forget` deletes a record whatever its state and says whether one was there; its holder then
//! gets `Gone`, and the key is acquired anew (attempt 1).

use idemdb::{Claim, ClaimOptions, LeaseLost, Response};

use crate::harness::Harness;

async fn check(h: &Harness) {
    let s = &h.store;
    let Claim::Acquired(lease) = s
        .claim("t", "k", b"fp", ClaimOptions::default())
        .await
        .unwrap()
    else {
        panic!("acquires");
    };
    assert!(s.forget("t", "k").await.unwrap());
    assert!(!s.forget("t", "k").await.unwrap());
    assert_eq!(s.get("t", "k").await.unwrap(), None);
    assert_eq!(
        s.complete(&lease, Response::new(b"late".to_vec()))
            .await
            .unwrap(),
        Err(LeaseLost::Gone)
    );
    match s
        .claim("t", "k", b"other", ClaimOptions::default())
        .await
        .unwrap()
    {
        Claim::Acquired(l) => {
            assert_eq!(l.attempt(), 1);
            assert!(l.fence() > lease.fence());
        }
        other => panic!("expected a new acquisition, got {other:?}"),
    }
}

on_both_backends!(check);
