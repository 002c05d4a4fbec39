//! Conflicts: two writers with the same expected version, one succeeds, the other gets the current
//! version and value; its retried write reflects the committed state. Create-if-absent and
//! unconditional writes behave as documented.
use idemdb::{Conflict, Expect, ManualClock, Versioned};

use crate::common;

#[test]
fn second_writer_gets_the_current_state() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    assert_eq!(
        store
            .put_entity("t", "acct", Expect::Absent, "100")
            .unwrap(),
        Ok(1)
    );
    assert_eq!(
        store
            .put_entity("t", "acct", Expect::Absent, "999")
            .unwrap(),
        Err(Conflict {
            current: Some(Versioned {
                value: b"100".to_vec(),
                version: 1
            })
        })
    );
    // Two writers read version 1.
    let a = store
        .put_entity("t", "acct", Expect::Version(1), "150")
        .unwrap();
    let b = store
        .put_entity("t", "acct", Expect::Version(1), "70")
        .unwrap();
    assert_eq!(a, Ok(2));
    let Err(Conflict { current: Some(cur) }) = b else {
        panic!("{b:?}")
    };
    assert_eq!(
        cur,
        Versioned {
            value: b"150".to_vec(),
            version: 2
        }
    );
    // The loser retries from what it was given, without another read.
    let retried = format!(
        "{}",
        std::str::from_utf8(&cur.value)
            .unwrap()
            .parse::<u32>()
            .unwrap()
            - 30
    );
    assert_eq!(
        store
            .put_entity("t", "acct", Expect::Version(cur.version), retried)
            .unwrap(),
        Ok(3)
    );
    assert_eq!(
        store.get_entity("t", "acct").unwrap(),
        Some(Versioned {
            value: b"120".to_vec(),
            version: 3
        })
    );
    assert_eq!(
        store.put_entity("t", "acct", Expect::Any, "0").unwrap(),
        Ok(4)
    );
    assert_eq!(
        store
            .put_entity("t", "nothing", Expect::Version(1), "x")
            .unwrap(),
        Err(Conflict { current: None })
    );
    assert_eq!(idemdb::parse_etag(&idemdb::etag(4)), Some(4));
}
