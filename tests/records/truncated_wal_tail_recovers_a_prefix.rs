//! Faults on disk: a write-ahead log whose tail was torn off (a crash in the middle of a write)
//! reopens without a panic, and what survives is a prefix of what was written: every surviving
//! record decodes and is intact, later keys are absent, and new fencing tokens stay above every
//! surviving one.
use std::fs::OpenOptions;

use idemdb::{ManualClock, RecordState, Response};

use crate::common;

fn wal_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

#[test]
fn torn_wal_tail_loses_only_a_suffix() {
    for cut in [1u64, 100, 1000, 5000] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        {
            let store = common::open(dir.path(), &clock);
            for i in 0..200 {
                let l = common::acquire(&store, "t", &format!("k{i:03}"), b"fp");
                store
                    .complete(&l, Response::new(format!("body {i}")))
                    .unwrap()
                    .unwrap();
            }
            store.close().unwrap();
        }
        let wal = wal_files(dir.path()).pop().expect("a WAL file");
        let len = std::fs::metadata(&wal).unwrap().len();
        assert!(len > cut, "WAL of {len} bytes");
        OpenOptions::new()
            .write(true)
            .open(&wal)
            .unwrap()
            .set_len(len - cut)
            .unwrap();

        let store = common::open(dir.path(), &clock);
        let mut present = Vec::new();
        let mut max_fence = 0;
        for i in 0..200 {
            if let Some(info) = store.get("t", format!("k{i:03}")).unwrap() {
                present.push(i);
                max_fence = max_fence.max(info.fence);
                match info.state {
                    // The last surviving key may have lost its completion but not its claim.
                    RecordState::Pending { .. } => {}
                    RecordState::Completed(r) => {
                        assert_eq!(r.response.body, format!("body {i}").into_bytes())
                    }
                    other => panic!("k{i}: {other:?}"),
                }
            }
        }
        // A prefix survived: no gaps.
        assert_eq!(present, (0..present.len()).collect::<Vec<_>>(), "cut {cut}");
        assert!(
            present.len() >= 150,
            "cut {cut} lost too much: {}",
            present.len()
        );
        let l = common::acquire(&store, "t", "new", b"");
        assert!(l.fence() > max_fence);
    }
}
