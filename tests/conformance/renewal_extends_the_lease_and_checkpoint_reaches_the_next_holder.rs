//! `renew` moves the lease's end to `extra` from now (and the record's expiry with it if that is
//! later), so no takeover happens meanwhile; a checkpoint stored by a holder reaches whoever
//! acquires the key after it failed retryably or crashed, and completion clears it.

use std::time::Duration;

use idemdb::{Checkpoint, Claim, ClaimOptions, FailKind, RecordState, Response};

use crate::harness::Harness;

async fn check(h: &Harness) {
    let s = &h.store;
    let opts = ClaimOptions::default()
        .lease(Duration::from_secs(10))
        .retention(Duration::from_secs(30));
    let Claim::Acquired(mut lease) = s.claim("t", "k", b"fp", opts).await.unwrap() else {
        panic!("acquires");
    };
    h.advance(Duration::from_secs(8));
    let now = s.now().await.unwrap();
    s.renew(&mut lease, Duration::from_secs(40))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.lease_until(), now + 40_000);
    let info = s.get("t", "k").await.unwrap().unwrap();
    assert_eq!(
        info.state,
        RecordState::Pending {
            lease_until: now + 40_000
        }
    );
    assert_eq!(
        info.expires_at,
        now + 40_000,
        "the record lives as long as its lease"
    );
    h.advance(Duration::from_secs(30));
    assert!(matches!(
        s.claim("t", "k", b"fp", opts).await.unwrap(),
        Claim::InProgress { .. }
    ));

    s.checkpoint(&lease, "charged", b"txn-42".to_vec())
        .await
        .unwrap()
        .unwrap();
    s.fail(&lease, FailKind::Retryable).await.unwrap().unwrap();
    let Claim::Acquired(next) = s.claim("t", "k", b"fp", opts).await.unwrap() else {
        panic!("a released key is acquired");
    };
    let cp = Checkpoint {
        phase: "charged".into(),
        state: b"txn-42".to_vec(),
    };
    assert_eq!(next.checkpoint(), Some(&cp));
    assert!(!next.is_takeover());
    assert_eq!(next.attempt(), 2);
    s.complete(&next, Response::new(b"ok".to_vec()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.get("t", "k").await.unwrap().unwrap().checkpoint, None);
}

on_both_backends!(check);
