//! The entry points added after records reject hostile input with typed errors and change nothing:
//! entities, commits, causal writes, consumers, watermarks and reservations.
use idemdb::{ConsumerOptions, Expect, InvalidInput, ManualClock, VersionVector};

use crate::common;

#[test]
fn hostile_arguments_get_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::config(dir.path(), &clock)
        .max_response_bytes(100)
        .open()
        .unwrap();
    let long = "x".repeat(300);
    let big = vec![0u8; 101];
    assert!(matches!(
        common::invalid(store.put_entity("", "e", Expect::Any, "v")),
        InvalidInput::Empty { .. }
    ));
    assert!(matches!(
        common::invalid(store.put_entity("t", &long, Expect::Any, "v")),
        InvalidInput::TooLong { .. }
    ));
    assert!(matches!(
        common::invalid(store.put_entity("t", "e", Expect::Any, big.clone())),
        InvalidInput::TooLarge { .. }
    ));
    assert!(matches!(
        common::invalid(store.get_entity("t", "")),
        InvalidInput::Empty { .. }
    ));
    assert!(matches!(
        common::invalid(store.delete_entity("t", "", Expect::Any)),
        InvalidInput::Empty { .. }
    ));
    assert!(matches!(
        common::invalid(
            store
                .commit()
                .put("t", "a", Expect::Any, "1")
                .put("t", "b", Expect::Any, big.clone())
                .apply()
        ),
        InvalidInput::TooLarge { .. }
    ));
    assert!(matches!(
        common::invalid(store.causal_put("t", "c", "", &VersionVector::new(), "v")),
        InvalidInput::Empty { .. }
    ));
    assert!(matches!(
        common::invalid(store.begin("", "m", ConsumerOptions::default())),
        InvalidInput::Empty { .. }
    ));
    assert!(matches!(
        common::invalid(store.begin("g", &long, ConsumerOptions::default())),
        InvalidInput::TooLong { .. }
    ));
    assert!(matches!(
        common::invalid(store.mark_processed("g", "", 0, 1)),
        InvalidInput::Empty { .. }
    ));
    assert!(matches!(
        common::invalid(store.reserve("", &[b"v"], "o")),
        InvalidInput::Empty { .. }
    ));
    assert!(matches!(
        common::invalid(store.reserve("i", &[long.as_bytes()], "o")),
        InvalidInput::TooLong { .. }
    ));
    assert!(matches!(
        common::invalid(store.reserve("i", &[b"v"], "")),
        InvalidInput::Empty { .. }
    ));
    // Nothing was written by any of them.
    assert_eq!(store.physical_counts().unwrap(), (0, 0));
    assert!(store.get_entity("t", "a").unwrap().is_none());
    assert!(store.reservation_owner("i", &[b"v"]).unwrap().is_none());
    assert!(!store.is_processed("g", "t", 0, 1).unwrap());
}
