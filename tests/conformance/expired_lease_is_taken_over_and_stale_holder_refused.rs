//! While a lease is live a claim is told to retry after the rest of it; once it ran out, the next
//! claim takes the key over with a greater token, and the stale holder's completion, failure,
//! renewal and checkpoint are refused with `TakenOver` and change nothing.

use std::time::Duration;

use idemdb::{Claim, ClaimOptions, FailKind, LeaseLost, RecordState, Response};

use crate::harness::Harness;

async fn check(h: &Harness) {
    let s = &h.store;
    let opts = ClaimOptions::default().lease(Duration::from_secs(10));
    let Claim::Acquired(mut old) = s.claim("t", "k", b"fp", opts).await.unwrap() else {
        panic!("acquires");
    };
    h.advance(Duration::from_secs(4));
    assert_eq!(
        s.claim("t", "k", b"fp", opts).await.unwrap(),
        Claim::InProgress {
            retry_after: Duration::from_secs(6)
        }
    );
    h.advance(Duration::from_secs(6));
    let Claim::Acquired(new) = s.claim("t", "k", b"fp", opts).await.unwrap() else {
        panic!("a lease that ran out is taken over");
    };
    assert!(new.is_takeover());
    assert_eq!(new.attempt(), 2);
    assert!(new.fence() > old.fence());
    let lost = LeaseLost::TakenOver {
        current_fence: new.fence(),
    };
    assert_eq!(
        s.complete(&old, Response::new(b"stale".to_vec()))
            .await
            .unwrap(),
        Err(lost.clone())
    );
    assert_eq!(
        s.fail(&old, FailKind::Retryable).await.unwrap(),
        Err(lost.clone())
    );
    assert_eq!(
        s.renew(&mut old, Duration::from_secs(5)).await.unwrap(),
        Err(lost.clone())
    );
    assert_eq!(
        s.checkpoint(&old, "p", b"x".to_vec()).await.unwrap(),
        Err(lost)
    );
    let info = s.get("t", "k").await.unwrap().unwrap();
    assert_eq!(info.takeovers, 1);
    assert_eq!(info.attempts, 2);
    assert_eq!(info.checkpoint, None);
    assert_eq!(
        info.state,
        RecordState::Pending {
            lease_until: new.lease_until()
        }
    );
    s.complete(&new, Response::new(b"fresh".to_vec()))
        .await
        .unwrap()
        .unwrap();
    // Completing twice is refused as finished.
    assert_eq!(
        s.complete(&new, Response::new(b"again".to_vec()))
            .await
            .unwrap(),
        Err(LeaseLost::Finished)
    );
}

on_both_backends!(check);
