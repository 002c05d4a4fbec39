//! A mismatched fingerprint is reported, and the stored record is untouched, in every state.
use std::time::Duration;

use idemdb::{Claim, ClaimOptions, ManualClock, Response};

use crate::common;

#[test]
fn mismatch_is_reported_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let l = common::acquire(&store, "t", "k", b"fp-a");
    let pending = store.get("t", "k").unwrap();
    let c = store
        .claim("t", "k", b"fp-b", ClaimOptions::default())
        .unwrap();
    assert_eq!(c, Claim::Mismatch);
    assert_eq!(store.get("t", "k").unwrap(), pending);

    // Even after the lease expired, a different request cannot take the key over.
    clock.advance(Duration::from_secs(30));
    let c = store
        .claim("t", "k", b"fp-b", ClaimOptions::default())
        .unwrap();
    assert_eq!(c, Claim::Mismatch);
    assert_eq!(store.get("t", "k").unwrap(), pending);

    let l2 = common::acquire(&store, "t", "k", b"fp-a");
    assert!(l2.fence() > l.fence());
    store.complete(&l2, Response::new("a")).unwrap().unwrap();
    let done = store.get("t", "k").unwrap();
    assert_eq!(
        store.claim("t", "k", b"", ClaimOptions::default()).unwrap(),
        Claim::Mismatch
    );
    assert_eq!(store.get("t", "k").unwrap(), done);
    assert_eq!(store.stats().unwrap().counters.mismatch, 3);
}
