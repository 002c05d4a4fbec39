//! Delete and re-create never reuses a version, across close and reopen.
use idemdb::{Conflict, Expect, ManualClock};

use crate::common;

#[test]
fn recreate_continues_after_the_tombstone() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    {
        let store = common::open(dir.path(), &clock);
        assert_eq!(
            store.put_entity("t", "e", Expect::Absent, "a").unwrap(),
            Ok(1)
        );
        assert_eq!(
            store.put_entity("t", "e", Expect::Version(1), "b").unwrap(),
            Ok(2)
        );
        assert_eq!(
            store.delete_entity("t", "e", Expect::Version(1)).unwrap(),
            Err(Conflict {
                current: store.get_entity("t", "e").unwrap()
            })
        );
        assert_eq!(
            store.delete_entity("t", "e", Expect::Version(2)).unwrap(),
            Ok(Some(3))
        );
        assert_eq!(store.get_entity("t", "e").unwrap(), None);
        assert_eq!(
            store.delete_entity("t", "e", Expect::Any).unwrap(),
            Ok(None)
        );
        store.close().unwrap();
    }
    let store = common::open(dir.path(), &clock);
    assert_eq!(store.get_entity("t", "e").unwrap(), None);
    assert_eq!(
        store.put_entity("t", "e", Expect::Version(3), "x").unwrap(),
        Err(Conflict { current: None }),
        "a tombstone is absent, not a version to match"
    );
    assert_eq!(
        store.put_entity("t", "e", Expect::Absent, "c").unwrap(),
        Ok(4)
    );
    store.compact().unwrap();
    assert_eq!(
        store.delete_entity("t", "e", Expect::Any).unwrap(),
        Ok(Some(5))
    );
    store.close().unwrap();
    let store = common::open(dir.path(), &clock);
    assert_eq!(store.put_entity("t", "e", Expect::Any, "d").unwrap(), Ok(6));
}
