//! Completed records survive close and reopen, in both durability modes.
use idemdb::{Claim, ClaimOptions, Durability, ManualClock, Response};

use crate::common;

#[test]
fn completions_are_replayed_after_reopen() {
    for durability in [Durability::Synced, Durability::Buffered] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        {
            let store = common::config(dir.path(), &clock)
                .durability(durability)
                .open()
                .unwrap();
            for i in 0..100 {
                let l = common::acquire(&store, "t", &format!("k{i}"), b"fp");
                store
                    .complete(&l, Response::new(format!("resp {i}")).with_status(200))
                    .unwrap()
                    .unwrap();
            }
            store.close().unwrap();
        }
        let store = common::open(dir.path(), &clock);
        for i in 0..100 {
            match store
                .claim("t", format!("k{i}"), b"fp", ClaimOptions::default())
                .unwrap()
            {
                Claim::Completed(r) => {
                    assert_eq!(r.response.body, format!("resp {i}").into_bytes());
                    assert_eq!(r.response.status(), Some(200));
                }
                other => panic!("{durability:?} k{i}: {other:?}"),
            }
        }
    }
}
