//! The replica-vector merge operator gives the same result whether its operands are folded at read
//! time, during recovery, or by a compaction, and keeps a malformed operand (the key then reads as
//! corrupted, at read time and after compaction) instead of failing or dropping it.
use idemdb::{Error, ManualClock, VersionVector};

use crate::common;

fn vv(pairs: &[(&str, u64)]) -> VersionVector {
    let mut v = VersionVector::new();
    for (a, n) in pairs {
        v.observe(a, *n);
    }
    v
}

/// Writes a malformed merge operand for ("t", "bad") with a raw RocksDB handle. Done before any real
/// operand exists, so the raw handle's own (stand-in) merge operator never folds real data.
fn write_garbage_operand(dir: &std::path::Path) {
    let o = rocksdb::Options::default();
    let cfs = rocksdb::DB::list_cf(&o, dir).unwrap();
    let descriptors = cfs.iter().map(|name| {
        let mut co = rocksdb::Options::default();
        co.set_merge_operator_associative("stand-in", |_, e, _| {
            Some(e.unwrap_or_default().to_vec())
        });
        rocksdb::ColumnFamilyDescriptor::new(name, co)
    });
    let db = rocksdb::DB::open_cf_descriptors(&o, dir, descriptors).unwrap();
    let cf = db.cf_handle("versions").unwrap();
    let mut key = vec![3u8];
    key.extend_from_slice(&idemdb::__internal::record_key(b"t", b"bad"));
    db.merge_cf(cf, &key, b"garbage").unwrap();
}

#[test]
fn read_time_and_compaction_folds_agree() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    common::open(dir.path(), &clock).close().unwrap();
    write_garbage_operand(dir.path());

    let inputs = [
        vv(&[("a", 3)]),
        vv(&[("b", 1), ("a", 1)]),
        vv(&[("c", 9)]),
        vv(&[("a", 2), ("b", 4)]),
    ];
    let expected = inputs
        .iter()
        .fold(VersionVector::new(), |acc, v| acc.merged(v));
    {
        let store = common::open(dir.path(), &clock);
        for v in &inputs {
            store.merge_replica_vector("t", "x", v).unwrap();
        }
        // Duplicates change nothing (idempotent).
        store.merge_replica_vector("t", "x", &inputs[0]).unwrap();
        assert!(matches!(
            store.replica_vector("t", "bad"),
            Err(Error::Corrupted { .. })
        ));
        assert!(matches!(
            store.merge_replica_vector("t", "bad", &inputs[0]),
            Err(Error::Corrupted { .. })
        ));
        assert_eq!(
            store.replica_vector("t", "x").unwrap(),
            expected,
            "folded at read"
        );
        store.close().unwrap();
    }
    let store = common::open(dir.path(), &clock);
    assert_eq!(
        store.replica_vector("t", "x").unwrap(),
        expected,
        "after reopen"
    );
    store.compact().unwrap();
    assert_eq!(
        store.replica_vector("t", "x").unwrap(),
        expected,
        "folded by compaction"
    );
    assert!(
        matches!(
            store.replica_vector("t", "bad"),
            Err(Error::Corrupted { .. })
        ),
        "compaction dropped what it could not read"
    );
    store
        .merge_replica_vector("t", "x", &vv(&[("d", 1)]))
        .unwrap();
    assert_eq!(
        store.replica_vector("t", "x").unwrap(),
        expected.merged(&vv(&[("d", 1)]))
    );
}
