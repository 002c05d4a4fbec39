//! Neither the sweep nor the compaction filter deletes a record whose expiry was extended (by a
//! renewal past its retention) after its first index entry was written.
use std::time::Duration;

use idemdb::{ClaimOptions, ManualClock, Response};

use crate::common;

#[test]
fn renewal_past_retention_moves_the_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::config(dir.path(), &clock)
        .max_lease(Duration::from_secs(7200))
        .open()
        .unwrap();
    let opts = ClaimOptions::default()
        .durable_pending(true)
        .retention(Duration::from_secs(60))
        .lease(Duration::from_secs(30));
    let idemdb::Claim::Acquired(mut lease) = store.claim("t", "k", b"", opts).unwrap() else {
        panic!()
    };
    let first_expiry = store.get("t", "k").unwrap().unwrap().expires_at;
    clock.advance(Duration::from_secs(20));
    store
        .renew(&mut lease, Duration::from_secs(600))
        .unwrap()
        .unwrap();
    let info = store.get("t", "k").unwrap().unwrap();
    assert!(info.expires_at > first_expiry);
    assert_eq!(lease.lease_until(), info.expires_at);

    clock.advance(Duration::from_secs(120)); // past the original retention
    assert_eq!(store.sweep(usize::MAX).unwrap(), 0);
    store.compact().unwrap();
    assert_eq!(store.physical_counts().unwrap(), (1, 1));
    store
        .complete(&lease, Response::new("late but fine"))
        .unwrap()
        .unwrap();

    clock.advance(Duration::from_secs(600));
    assert!(store.get("t", "k").unwrap().is_none());
    assert_eq!(store.sweep(usize::MAX).unwrap(), 1);
    assert_eq!(store.physical_counts().unwrap(), (0, 0));
}
