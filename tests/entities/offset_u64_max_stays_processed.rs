//! Regression: the last offset, `u64::MAX`, stays processed once marked or covered by a
//! watermark, in whichever order the updates arrive and after RocksDB folded them in compaction.
//! The window's `next` saturates at `u64::MAX`, and normalising used to drop `u64::MAX` from the
//! set of processed offsets without being able to count it in `next`, so a redelivery of that
//! offset looked new. Found while writing the `decode` fuzz target's union check of the merge
//! fold; that check fails on `fuzz/artifacts/decode/crash-offset-window-last-offset`.
use idemdb::ManualClock;

use crate::common;

#[test]
fn last_offset_stays_processed() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::open(dir.path(), &ManualClock::default());
    // The watermark reaches the offset below, then the last offset is marked.
    store.commit_watermark("g", "t", 0, u64::MAX - 1).unwrap();
    store.mark_processed("g", "t", 0, u64::MAX).unwrap();
    // The last offset is marked, then the watermark reaches the offset below.
    store.mark_processed("g", "t", 1, u64::MAX).unwrap();
    store.commit_watermark("g", "t", 1, u64::MAX - 1).unwrap();
    // A watermark at the last offset covers it.
    store.commit_watermark("g", "t", 2, u64::MAX).unwrap();
    for compacted in [false, true] {
        if compacted {
            store.compact().unwrap();
        }
        for p in 0..3 {
            assert!(
                store.is_processed("g", "t", p, u64::MAX).unwrap(),
                "partition {p}, compacted: {compacted}"
            );
            assert!(store.is_processed("g", "t", p, u64::MAX - 1).unwrap());
            assert!(store.is_processed("g", "t", p, 0).unwrap());
        }
    }
}
