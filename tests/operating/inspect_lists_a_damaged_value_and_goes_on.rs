//! `Store::scan` lists a value that does not decode as `Detail::Damaged` with the reason, and
//! lists every other item as usual: one damaged record never hides the rest of a listing, and
//! reading it changes nothing.

use idemdb::{DataKind, Detail, Durability, Expect, ManualClock, Response};

use crate::common;

#[test]
fn damaged_record_beside_good_ones() {
    let _serial = crate::serial();
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    {
        let store = common::config(dir.path(), &clock)
            .durability(Durability::Synced)
            .open()
            .unwrap();
        for key in ["k1", "k2", "k3"] {
            let lease = common::acquire(&store, "t", key, b"fp");
            store
                .complete(&lease, Response::new(format!("body-{key}").into_bytes()))
                .unwrap()
                .unwrap();
        }
        store
            .put_entity("t", "e", Expect::Any, b"v".to_vec())
            .unwrap()
            .unwrap();
        store.close().unwrap();
    }
    // Flip one byte in the middle of k2's record value, with the store closed.
    {
        let db = common::raw_open(dir.path());
        let cf = db.cf_handle("records").unwrap();
        let (key, mut value) = db
            .iterator_cf(cf, rocksdb::IteratorMode::Start)
            .map(|kv| kv.unwrap())
            .find(|(k, _)| k.ends_with(b"k2"))
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .expect("k2's record");
        let mid = value.len() / 2;
        value[mid] ^= 0x40;
        db.put_cf(cf, &key, &value).unwrap();
        db.flush_cf(cf).unwrap();
    }
    let store = common::open(dir.path(), &clock);
    let items = store.scan(DataKind::Records, Some(b"t"), b"", 100).unwrap();
    let keys: Vec<&[u8]> = items.iter().map(|i| i.key.as_slice()).collect();
    assert_eq!(keys, [&b"k1"[..], b"k2", b"k3"]);
    for item in &items {
        match (&item.key[..], &item.detail) {
            (b"k2", Detail::Damaged { reason }) => {
                assert!(!reason.is_empty());
            }
            (b"k2", other) => panic!("k2 is damaged, listed as {other:?}"),
            (_, Detail::Record { expired, .. }) => assert!(!expired),
            (_, other) => panic!("expected a record, got {other:?}"),
        }
    }
    // The other kinds are listed as usual, and the damaged record is still reported, not replaced.
    let entities = store.scan(DataKind::Entities, None, b"", 100).unwrap();
    assert!(matches!(
        entities[0].detail,
        Detail::Entity { version: 1, .. }
    ));
    assert!(store.get("t", "k2").is_err());
    assert!(store.get("t", "k1").unwrap().is_some());
}
