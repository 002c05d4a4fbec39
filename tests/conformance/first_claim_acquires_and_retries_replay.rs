//! A new key is acquired once; completing it stores the response, which every retry replays byte
//! for byte (status and metadata included); the same key with another fingerprint is a
//! mismatch, and the record is unchanged by both.

use idemdb::{Claim, ClaimOptions, RecordState, Response};

use crate::harness::Harness;

async fn check(h: &Harness) {
    let s = &h.store;
    let Claim::Acquired(lease) = s
        .claim("acme", "k1", b"fp", ClaimOptions::default())
        .await
        .unwrap()
    else {
        panic!("a new key is acquired");
    };
    assert_eq!(lease.attempt(), 1);
    assert!(!lease.is_takeover());
    let receipt = Response::new(vec![0u8, 1, 2, 255])
        .with_status(201)
        .with_meta("x-id", "p-1");
    s.complete(&lease, receipt.clone()).await.unwrap().unwrap();
    for _ in 0..3 {
        match s
            .claim("acme", "k1", b"fp", ClaimOptions::default())
            .await
            .unwrap()
        {
            Claim::Completed(r) => assert_eq!(r.response, receipt),
            other => panic!("expected a replay, got {other:?}"),
        }
    }
    assert_eq!(
        s.claim("acme", "k1", b"other", ClaimOptions::default())
            .await
            .unwrap(),
        Claim::Mismatch
    );
    // Another tenant's key of the same name is another record.
    assert!(matches!(
        s.claim("other-tenant", "k1", b"other", ClaimOptions::default())
            .await
            .unwrap(),
        Claim::Acquired(_)
    ));
    let info = s.get("acme", "k1").await.unwrap().unwrap();
    assert_eq!(info.fingerprint, b"fp");
    assert_eq!(info.attempts, 1);
    assert_eq!(info.fence, lease.fence());
    match info.state {
        RecordState::Completed(r) => assert_eq!(r.response, receipt),
        other => panic!("expected completed, got {other:?}"),
    }
    assert_eq!(s.get("acme", "never").await.unwrap(), None);
}

on_both_backends!(check);
