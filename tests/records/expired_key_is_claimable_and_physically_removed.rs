//! Expiry: an expired key is claimable again at once; after a forced compaction and a sweep it is
//! physically gone (the key estimate and an iterator over the column family show it).
use std::time::Duration;

use idemdb::{Claim, ClaimOptions, ManualClock, Response};

use crate::common;

#[test]
fn expired_records_vanish_from_reads_at_once_and_from_disk_after_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let short = ClaimOptions::default()
        .retention(Duration::from_secs(60))
        .lease(Duration::from_secs(5));
    for i in 0..200 {
        let key = format!("k{i}");
        let Claim::Acquired(l) = store.claim("t", &key, b"fp", short).unwrap() else {
            panic!()
        };
        store.complete(&l, Response::new("done")).unwrap().unwrap();
    }
    // One record with long retention that must survive everything below.
    let keep = common::acquire(&store, "t", "keep", b"fp");
    store
        .complete(&keep, Response::new("kept"))
        .unwrap()
        .unwrap();
    store.compact().unwrap();
    assert_eq!(store.physical_counts().unwrap(), (201, 201));

    clock.advance(Duration::from_secs(59));
    assert!(store.get("t", "k0").unwrap().is_some());
    clock.advance(Duration::from_secs(1));
    assert!(store.get("t", "k0").unwrap().is_none(), "expiry is exact");
    // Claimable again at once, as a fresh record.
    let again = common::acquire_durable(&store, "t", "k0", b"other fingerprint is fine now");
    assert_eq!(again.attempt(), 1);

    // The compaction filter alone drops the expired records (no sweep yet).
    store.compact().unwrap();
    let (records, _) = store.physical_counts().unwrap();
    assert_eq!(records, 2, "k0 (re-claimed) and keep remain");
    assert!(store.stats().unwrap().counters.compaction_dropped >= 199);
    // The sweep removes what the filter left in the index (and would delete records too).
    store.sweep(usize::MAX).unwrap();
    store.compact().unwrap();
    assert_eq!(store.physical_counts().unwrap(), (2, 2));
    let stats = store.stats().unwrap();
    assert!(stats.estimated_records <= 2, "{stats:?}");
    assert!(store.get("t", "keep").unwrap().is_some());
}

#[test]
fn sweep_deletes_expired_records_without_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    for i in 0..50 {
        common::acquire_durable(&store, "t", &format!("k{i}"), b"");
    }
    clock.advance(Duration::from_secs(3600));
    assert_eq!(store.sweep(20).unwrap(), 20);
    assert_eq!(store.sweep(usize::MAX).unwrap(), 30);
    assert_eq!(store.physical_counts().unwrap(), (0, 0));
    assert_eq!(store.stats().unwrap().counters.swept, 50);
}
