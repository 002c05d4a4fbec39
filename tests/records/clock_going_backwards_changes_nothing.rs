//! A clock that steps backwards cannot resurrect an expired record or extend a lease: the store's
//! time never goes back.
use std::time::Duration;

use idemdb::{Claim, ClaimOptions, ManualClock};

use crate::common;

#[test]
fn store_time_is_monotonic() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let t0 = store.now();
    let first = common::acquire(&store, "t", "k", b"fp");
    clock.advance(Duration::from_secs(11));
    let second = common::acquire(&store, "t", "k", b"fp");
    assert!(second.is_takeover());
    clock.set(t0 - 1_000_000);
    assert!(store.now() >= t0 + 11_000);
    // The first lease stays lost and the second stays live.
    assert!(store
        .complete(&first, idemdb::Response::new("x"))
        .unwrap()
        .is_err());
    assert!(matches!(
        store
            .claim("t", "k", b"fp", ClaimOptions::default())
            .unwrap(),
        Claim::InProgress { .. }
    ));
    clock.advance(Duration::from_secs(3600 * 3));
    assert!(store.get("t", "k").unwrap().is_none());
    clock.set(t0);
    assert!(
        store.get("t", "k").unwrap().is_none(),
        "expired stays expired"
    );
}
