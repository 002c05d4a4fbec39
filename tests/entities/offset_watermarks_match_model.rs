//! Watermarks: random out-of-order completions (and watermark commits) checked against a model set;
//! `is_processed` is exact; after the gaps close the stored window is empty, so storage stays
//! bounded by the out-of-order window.
use std::collections::BTreeSet;

use idemdb::ManualClock;
use proptest::prelude::*;

use crate::common;

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn window_is_exact(ops in proptest::collection::vec((0..60u64, 0..10u8), 1..120), compact in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let store = common::open(dir.path(), &clock);
        let mut model = BTreeSet::new();
        for (offset, kind) in ops {
            if kind == 0 {
                store.commit_watermark("g", "orders", 3, offset).unwrap();
                model.extend(0..=offset);
            } else {
                store.mark_processed("g", "orders", 3, offset).unwrap();
                model.insert(offset);
            }
        }
        if compact {
            store.compact().unwrap();
        }
        let w = store.offset_window("g", "orders", 3).unwrap();
        for o in 0..70 {
            prop_assert_eq!(w.contains(o), model.contains(&o), "offset {}", o);
            prop_assert_eq!(store.is_processed("g", "orders", 3, o).unwrap(), model.contains(&o));
        }
        let expected_mark = (0..).take_while(|o| model.contains(o)).last();
        prop_assert_eq!(w.watermark(), expected_mark);
        prop_assert_eq!(w.out_of_order_len(), model.iter().filter(|&&o| expected_mark.is_none_or(|m| o > m)).count());
        // Other partitions are untouched.
        prop_assert!(!store.is_processed("g", "orders", 4, 0).unwrap());
    }
}

#[test]
fn closed_window_stores_nothing_but_the_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    for o in (0..10_000u64).rev() {
        store.mark_processed("g", "t", 0, o).unwrap();
    }
    let w = store.offset_window("g", "t", 0).unwrap();
    assert_eq!((w.watermark(), w.out_of_order_len()), (Some(9_999), 0));
}
