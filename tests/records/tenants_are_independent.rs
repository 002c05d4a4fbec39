//! The same key in two tenants gives two independent records, and tenant/key boundaries cannot be
//! confused by concatenation.
use idemdb::{Claim, ClaimOptions, ManualClock, Response};

use crate::common;

#[test]
fn same_key_in_two_tenants_is_two_records() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let a = common::acquire(&store, "alice", "key-1", b"fa");
    let b = common::acquire(&store, "bob", "key-1", b"fb");
    store
        .complete(&a, Response::new("alice's"))
        .unwrap()
        .unwrap();
    match store
        .claim("bob", "key-1", b"fb", ClaimOptions::default())
        .unwrap()
    {
        Claim::InProgress { .. } => {}
        other => panic!("bob's own record is still pending: {other:?}"),
    }
    store.complete(&b, Response::new("bob's")).unwrap().unwrap();
    let replay = |t: &str, fp: &[u8]| match store.claim(t, "key-1", fp, ClaimOptions::default()) {
        Ok(Claim::Completed(r)) => r.response.body,
        other => panic!("{other:?}"),
    };
    assert_eq!(replay("alice", b"fa"), b"alice's");
    assert_eq!(replay("bob", b"fb"), b"bob's");
    store.forget("alice", "key-1").unwrap();
    assert!(store.get("alice", "key-1").unwrap().is_none());
    assert!(store.get("bob", "key-1").unwrap().is_some());

    // ("ab", "c") and ("a", "bc") are different records.
    common::acquire(&store, "ab", "c", b"");
    common::acquire(&store, "a", "bc", b"");
}
