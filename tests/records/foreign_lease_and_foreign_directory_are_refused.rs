//! A lease from another store is refused with `ForeignLease`; a directory that is not an idemdb
//! store (or has a foreign format marker) is refused with `IncompatibleFormat`, untouched.
use idemdb::{Error, ManualClock, Response};

use crate::common;

#[test]
fn lease_from_another_store_is_refused() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let clock = ManualClock::default();
    let (s1, s2) = (
        common::open(d1.path(), &clock),
        common::open(d2.path(), &clock),
    );
    let l1 = common::acquire(&s1, "t", "k", b"");
    let _l2 = common::acquire(&s2, "t", "k", b"");
    assert_eq!(
        s2.complete(&l1, Response::new("x")),
        Err(Error::ForeignLease)
    );
    s1.complete(&l1, Response::new("x")).unwrap().unwrap();
}

#[test]
fn foreign_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        let db = rocksdb::DB::open_cf(&o, dir.path(), ["default", "users"]).unwrap();
        db.put(b"a", b"b").unwrap();
    }
    let clock = ManualClock::default();
    let r = common::config(dir.path(), &clock).open();
    assert!(matches!(r, Err(Error::IncompatibleFormat { .. })), "{r:?}");
}

#[test]
fn foreign_or_missing_format_marker_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    {
        let s = common::open(dir.path(), &clock);
        common::acquire_durable(&s, "t", "k", b"");
        s.close().unwrap();
    }
    let edit = |v: Option<&[u8]>| {
        let db = common::raw_open(dir.path());
        let meta = db.cf_handle("meta").unwrap();
        match v {
            Some(v) => db.put_cf(meta, b"format", v).unwrap(),
            None => db.delete_cf(meta, b"format").unwrap(),
        }
    };
    edit(Some(&[2]));
    let r = common::config(dir.path(), &clock).open();
    assert!(matches!(r, Err(Error::IncompatibleFormat { .. })), "{r:?}");
    edit(None);
    let r = common::config(dir.path(), &clock).open();
    assert!(matches!(r, Err(Error::IncompatibleFormat { .. })), "{r:?}");
    edit(Some(&[1]));
    let s = common::open(dir.path(), &clock);
    assert!(s.get("t", "k").unwrap().is_some());
}
