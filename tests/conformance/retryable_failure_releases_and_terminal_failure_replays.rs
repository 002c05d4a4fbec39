//! A retryable failure releases the key (the next claim acquires it, attempt 2); a terminal
//! failure is stored and replayed as `Failed` to every retry; a released key is not "in
//! progress"; the holder of a released key gets `Released`.

use idemdb::{Claim, ClaimOptions, FailKind, LeaseLost, RecordState, Response};

use crate::harness::Harness;

async fn check(h: &Harness) {
    let s = &h.store;
    let o = ClaimOptions::default();
    let Claim::Acquired(first) = s.claim("t", "k", b"fp", o).await.unwrap() else {
        panic!("acquires");
    };
    s.fail(&first, FailKind::Retryable).await.unwrap().unwrap();
    assert_eq!(
        s.get("t", "k").await.unwrap().unwrap().state,
        RecordState::Released
    );
    assert_eq!(
        s.complete(&first, Response::new(b"x".to_vec()))
            .await
            .unwrap(),
        Err(LeaseLost::Released)
    );
    let Claim::Acquired(second) = s.claim("t", "k", b"fp", o).await.unwrap() else {
        panic!("a released key is acquired");
    };
    assert_eq!(second.attempt(), 2);
    let refusal = Response::new(b"card declined".to_vec()).with_status(402);
    s.fail(&second, FailKind::Terminal(refusal.clone()))
        .await
        .unwrap()
        .unwrap();
    for _ in 0..2 {
        match s.claim("t", "k", b"fp", o).await.unwrap() {
            Claim::Failed(r) => assert_eq!(r.response, refusal),
            other => panic!("expected the stored failure, got {other:?}"),
        }
    }
    assert_eq!(
        s.fail(&second, FailKind::Retryable).await.unwrap(),
        Err(LeaseLost::Finished)
    );
}

on_both_backends!(check);
