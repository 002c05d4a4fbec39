//! `execute`: a duplicate that arrives while the first runs in this process waits (up to the
//! configured bound) and replays; without a wait bound it answers in-progress; a panicking
//! operation releases the key.
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use idemdb::{Execution, FailKind, ManualClock, Response};

use crate::common;

#[test]
fn duplicate_waits_then_replays() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::config(dir.path(), &clock)
        .duplicate_wait(Duration::from_secs(5))
        .open()
        .unwrap();
    let runs = AtomicU32::new(0);
    let started = Barrier::new(2);
    let results = std::thread::scope(|s| {
        let first = s.spawn(|| {
            store
                .execute("t", "k", b"fp", |_| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    started.wait();
                    std::thread::sleep(Duration::from_millis(200));
                    Ok(Response::new("slow result"))
                })
                .unwrap()
        });
        started.wait();
        let second = store
            .execute("t", "k", b"fp", |_| {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(Response::new("must not run"))
            })
            .unwrap();
        (first.join().unwrap(), second)
    });
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(matches!(results.0, Execution::Ran(Ok(_))));
    match results.1 {
        Execution::Completed(r) => assert_eq!(r.response.body, b"slow result"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn without_wait_a_running_duplicate_is_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let _held = common::acquire(&store, "t", "k", b"fp");
    let r = store
        .execute("t", "k", b"fp", |_| Ok(Response::new("x")))
        .unwrap();
    assert_eq!(
        r,
        Execution::InProgress {
            retry_after: Duration::from_secs(10)
        }
    );
}

#[test]
fn a_panicking_operation_releases_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.execute("t", "k", b"fp", |_| -> Result<Response, FailKind> {
            panic!("handler bug")
        })
    }));
    assert!(caught.is_err());
    let r = store
        .execute("t", "k", b"fp", |l| {
            assert_eq!(l.attempt(), 2);
            Ok(Response::new("second try"))
        })
        .unwrap();
    assert!(matches!(r, Execution::Ran(Ok(_))));
}
