//! Multi-key commit: a commit whose second condition fails writes nothing; a commit that completes
//! an idempotency lease together with entity writes applies all of them; a stale lease fails the
//! whole commit.
use std::time::Duration;

use idemdb::{
    Claim, ClaimOptions, CommitConflict, Expect, LeaseLost, ManualClock, RecordState, Response,
    Versioned,
};

use crate::common;

#[test]
fn failed_condition_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    store
        .put_entity("t", "a", Expect::Absent, "1")
        .unwrap()
        .unwrap();
    store
        .put_entity("t", "b", Expect::Absent, "1")
        .unwrap()
        .unwrap();
    let lease = common::acquire(&store, "t", "req", b"");
    let out = store
        .commit()
        .put("t", "a", Expect::Version(1), "2")
        .put("t", "b", Expect::Version(7), "2")
        .put("t", "c", Expect::Absent, "new")
        .complete(&lease, Response::new("done"))
        .apply()
        .unwrap();
    assert_eq!(
        out,
        Err(CommitConflict::Condition {
            op: 1,
            current: Some(Versioned {
                value: b"1".to_vec(),
                version: 1
            })
        })
    );
    assert_eq!(store.get_entity("t", "a").unwrap().unwrap().version, 1);
    assert_eq!(store.get_entity("t", "c").unwrap(), None);
    assert!(matches!(
        store.get("t", "req").unwrap().unwrap().state,
        RecordState::Pending { .. }
    ));
}

#[test]
fn lease_completion_and_state_change_commit_together() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    store
        .put_entity("t", "from", Expect::Absent, "100")
        .unwrap()
        .unwrap();
    store
        .put_entity("t", "to", Expect::Absent, "0")
        .unwrap()
        .unwrap();
    let lease = common::acquire(&store, "t", "transfer-1", b"fp");
    let done = store
        .commit()
        .put("t", "from", Expect::Version(1), "60")
        .put("t", "to", Expect::Version(1), "40")
        .put("t", "audit", Expect::Absent, "transfer-1")
        .check("t", "frozen", Expect::Absent)
        .complete(&lease, Response::new("moved 40"))
        .apply()
        .unwrap()
        .unwrap();
    assert_eq!(done.versions, vec![Some(2), Some(2), Some(1), None, None]);
    match store
        .claim("t", "transfer-1", b"fp", ClaimOptions::default())
        .unwrap()
    {
        Claim::Completed(r) => assert_eq!(r.response.body, b"moved 40"),
        other => panic!("{other:?}"),
    }

    // A lease that was taken over cannot commit, and nothing of its commit is written.
    let stale = common::acquire(&store, "t", "transfer-2", b"fp");
    clock.advance(Duration::from_secs(11));
    let fresh = common::acquire(&store, "t", "transfer-2", b"fp");
    let out = store
        .commit()
        .put("t", "from", Expect::Version(2), "0")
        .complete(&stale, Response::new("moved 60"))
        .apply()
        .unwrap();
    assert_eq!(
        out,
        Err(CommitConflict::Lease {
            op: 1,
            lost: LeaseLost::TakenOver {
                current_fence: fresh.fence()
            }
        })
    );
    assert_eq!(store.get_entity("t", "from").unwrap().unwrap().value, b"60");
    // Naming one entity twice is refused before anything happens.
    assert!(store
        .commit()
        .put("t", "x", Expect::Any, "1")
        .delete("t", "x", Expect::Any)
        .apply()
        .is_err());
}
