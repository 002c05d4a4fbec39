//! Fencing tokens keep increasing across close and reopen, for the same key and across keys, even
//! after the key's record was forgotten.
use idemdb::{FailKind, ManualClock};

use crate::common;

#[test]
fn tokens_never_repeat_or_decrease_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let mut last = 0;
    for round in 0..5 {
        let store = common::open(dir.path(), &clock);
        for i in 0..50 {
            let l = common::acquire(&store, "t", &format!("k{round}-{i}"), b"");
            assert!(l.fence() > last, "token {} after {last}", l.fence());
            last = l.fence();
            store.fail(&l, FailKind::Retryable).unwrap().unwrap();
        }
        let l = common::acquire(&store, "t", "same", b"");
        assert!(l.fence() > last);
        last = l.fence();
        store.forget("t", "same").unwrap();
        store.close().unwrap();
    }
}
