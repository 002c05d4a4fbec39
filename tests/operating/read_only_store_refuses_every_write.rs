//! A store opened with `Config::read_only` refuses every call that would write with
//! `Error::ReadOnly` and changes nothing, reads what the writer wrote (and more after
//! `catch_up`), and a directory with no store is refused, not created.

use std::time::Duration;

use idemdb::{ClaimOptions, Config, Durability, Error, Expect, Response};

use crate::common::acquire;

#[test]
fn refusals_and_catch_up() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let writer = Config::new(dir.path())
        .durability(Durability::Synced)
        .sweep_interval(None)
        .open()
        .unwrap();
    let l = acquire(&writer, "t", "k1", b"fp");
    writer
        .complete(&l, Response::new(b"one".to_vec()))
        .unwrap()
        .unwrap();

    let reader = Config::new(dir.path()).read_only(true).open().unwrap();
    assert!(reader.get("t", "k1").unwrap().is_some());
    let o = ClaimOptions::default();
    assert!(matches!(
        reader.claim("t", "k2", b"fp", o),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(
        reader.claim("t", "k1", b"fp", o),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(reader.forget("t", "k1"), Err(Error::ReadOnly)));
    assert!(matches!(
        reader.put_entity("t", "e", Expect::Any, b"v".to_vec()),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(
        reader.reserve("i", &[b"v"], "o"),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(
        reader.mark_processed("g", "t", 0, 1),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(reader.sweep(10), Err(Error::ReadOnly)));
    assert!(matches!(reader.compact(), Err(Error::ReadOnly)));
    let e = reader.claim("t", "k2", b"fp", o).unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    assert_eq!(e.class(), "read_only");

    // What the writer writes later is read after catching up.
    let l2 = acquire(&writer, "t", "k2", b"fp");
    writer
        .complete(&l2, Response::new(b"two".to_vec()))
        .unwrap()
        .unwrap();
    reader.catch_up().unwrap();
    assert!(reader.get("t", "k2").unwrap().is_some());
    // Nothing the reader refused reached the store.
    assert!(writer.get_entity("t", "e").unwrap().is_none());
    assert!(writer.reservation_owner("i", &[b"v"]).unwrap().is_none());
    drop(reader);
    drop(writer);

    let empty = tempfile::tempdir().unwrap();
    let nowhere = empty.path().join("nothing-here");
    let e = Config::new(&nowhere)
        .read_only(true)
        .lease(Duration::from_secs(1))
        .open()
        .unwrap_err();
    assert!(e.to_string().contains("holds no idemdb store"), "{e}");
    assert!(
        !nowhere.exists(),
        "a read-only open created {}",
        nowhere.display()
    );
}
