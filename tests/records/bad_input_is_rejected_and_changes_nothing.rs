//! Every bad input gets its typed error and changes nothing stored.
use std::time::Duration;

use idemdb::{ClaimOptions, Config, Error, InvalidInput, ManualClock, Response};

use crate::common;

#[test]
fn hostile_arguments_get_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::config(dir.path(), &clock)
        .max_response_bytes(1000)
        .open()
        .unwrap();
    let l = common::acquire_durable(&store, "t", "k", b"fp");
    let before = store.get("t", "k").unwrap();
    let d = ClaimOptions::default();
    let long_key = "k".repeat(256);
    let long_tenant = "t".repeat(65);

    assert!(matches!(
        common::invalid(store.claim("", "k", b"", d)),
        InvalidInput::Empty { field: "tenant" }
    ));
    assert!(matches!(
        common::invalid(store.claim("t", "", b"", d)),
        InvalidInput::Empty { field: "key" }
    ));
    assert!(matches!(
        common::invalid(store.claim("t", &long_key, b"", d)),
        InvalidInput::TooLong {
            field: "key",
            len: 256,
            max: 255
        }
    ));
    assert!(matches!(
        common::invalid(store.claim(&long_tenant, "k", b"", d)),
        InvalidInput::TooLong {
            field: "tenant",
            ..
        }
    ));
    assert!(matches!(
        common::invalid(store.claim("t", "k2", vec![0u8; 2000], d)),
        InvalidInput::TooLarge {
            what: "fingerprint",
            ..
        }
    ));
    for opts in [
        d.lease(Duration::ZERO),
        d.retention(Duration::ZERO),
        d.lease(Duration::from_secs(25 * 3600)),
        d.retention(Duration::MAX),
        d.lease(Duration::MAX),
        d.lease(Duration::from_secs(7200))
            .retention(Duration::from_secs(3600)),
    ] {
        assert!(matches!(
            common::invalid(store.claim("t", "k2", b"", opts)),
            InvalidInput::Duration { .. }
        ));
    }
    assert!(matches!(
        common::invalid(store.complete(&l, Response::new(vec![0u8; 1001]))),
        // Counted as stored: 1,001 body bytes, their 3-byte length prefix, the empty map's count.
        InvalidInput::TooLarge {
            what: "response",
            len: 1005,
            max: 1000
        }
    ));
    assert!(matches!(
        common::invalid(store.complete(
            &l,
            Response::new(vec![0u8; 990]).with_meta("content-type", "x")
        )),
        InvalidInput::TooLarge { .. }
    ));
    assert!(matches!(
        common::invalid(store.checkpoint(&l, "p", vec![0u8; 1000])),
        InvalidInput::TooLarge {
            what: "checkpoint",
            ..
        }
    ));
    assert!(matches!(
        common::invalid(store.fail(
            &l,
            idemdb::FailKind::Terminal(Response::new(vec![0u8; 5000]))
        )),
        InvalidInput::TooLarge {
            what: "failure",
            ..
        }
    ));
    let mut l2 = l.clone();
    assert!(matches!(
        common::invalid(store.renew(&mut l2, Duration::ZERO)),
        InvalidInput::Duration { .. }
    ));
    assert!(matches!(
        common::invalid(store.renew(&mut l2, Duration::MAX)),
        InvalidInput::Duration { .. }
    ));
    assert!(matches!(
        common::invalid(store.get("", "k")),
        InvalidInput::Empty { .. }
    ));
    assert!(matches!(
        common::invalid(store.forget("t", &long_key)),
        InvalidInput::TooLong { .. }
    ));

    // Nothing changed: the pending record is as it was, and no other key was created.
    assert_eq!(store.get("t", "k").unwrap(), before);
    assert!(store.get("t", "k2").unwrap().is_none());
    assert_eq!(store.physical_counts().unwrap(), (1, 1));
    store.complete(&l, Response::new("fine")).unwrap().unwrap();

    // Non-UTF-8 tenants and keys are opaque bytes: accepted, kept apart, replayed exactly.
    let (t, k) = (&[0xffu8, 0xfe][..], &[0xc3u8, 0x28, 0x00][..]);
    let idemdb::Claim::Acquired(raw) = store.claim(t, k, b"", d).unwrap() else {
        panic!("non-UTF-8 key not acquired")
    };
    assert_eq!((raw.tenant(), raw.key()), (t, k));
    store
        .complete(&raw, Response::new("bytes"))
        .unwrap()
        .unwrap();
    assert!(matches!(
        store.claim(t, k, b"", d),
        Ok(idemdb::Claim::Completed(_))
    ));
}

#[test]
fn bad_configuration_is_refused_before_touching_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    for cfg in [
        Config::new(&path).max_key_len(0),
        Config::new(&path).max_tenant_len(100_000),
        Config::new(&path).lock_stripes(1000),
        Config::new(&path).lease(Duration::ZERO),
        Config::new(&path)
            .lease(Duration::from_secs(7200))
            .retention(Duration::from_secs(3600)),
        Config::new(&path).max_response_bytes(0),
    ] {
        assert!(matches!(cfg.open(), Err(Error::InvalidInput(_))));
    }
    assert!(!path.exists());
}
