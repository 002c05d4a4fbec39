//! A lease ended by any path (forget, a commit, a takeover after forget) cannot be completed again
//! through another path. The store remembers the pending records it wrote so that `complete` needs
//! no read; every one of these paths must replace or drop what it remembers.
use idemdb::{LeaseLost, RecordState, Response};

use crate::common;

#[test]
fn forgotten_key_refuses_its_old_lease() {
    let dir = tempfile::tempdir().unwrap();
    let clock = idemdb::ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let lease = common::acquire(&store, "t", "k", b"fp");
    assert!(store.forget("t", "k").unwrap());
    assert_eq!(
        store.complete(&lease, Response::new("late")).unwrap(),
        Err(LeaseLost::Gone)
    );
    assert_eq!(
        store.get("t", "k").unwrap(),
        None,
        "nothing was resurrected"
    );
}

#[test]
fn reclaimed_key_refuses_the_lease_from_before_forget() {
    let dir = tempfile::tempdir().unwrap();
    let clock = idemdb::ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let old = common::acquire(&store, "t", "k", b"fp");
    assert!(store.forget("t", "k").unwrap());
    let new = common::acquire(&store, "t", "k", b"fp");
    assert_eq!(
        store.complete(&old, Response::new("old")).unwrap(),
        Err(LeaseLost::TakenOver {
            current_fence: new.fence()
        })
    );
    store.complete(&new, Response::new("new")).unwrap().unwrap();
    let RecordState::Completed(replay) = store.get("t", "k").unwrap().unwrap().state else {
        panic!("not completed");
    };
    assert_eq!(replay.response.body, b"new");
}

#[test]
fn lease_completed_by_a_commit_refuses_a_second_completion() {
    let dir = tempfile::tempdir().unwrap();
    let clock = idemdb::ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let lease = common::acquire(&store, "t", "k", b"fp");
    store
        .commit()
        .complete(&lease, Response::new("by commit"))
        .apply()
        .unwrap()
        .unwrap();
    assert_eq!(
        store.complete(&lease, Response::new("again")).unwrap(),
        Err(LeaseLost::Finished)
    );
    assert_eq!(
        store.fail(&lease, idemdb::FailKind::Retryable).unwrap(),
        Err(LeaseLost::Finished)
    );
    let RecordState::Completed(replay) = store.get("t", "k").unwrap().unwrap().state else {
        panic!("not completed");
    };
    assert_eq!(replay.response.body, b"by commit");
}
