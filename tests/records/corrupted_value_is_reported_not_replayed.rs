//! A corrupted value on disk gives `Corrupted`, not a panic and not a replay; `forget` clears it.
use idemdb::{ClaimOptions, Error, ManualClock, Response};

use crate::common;

fn rewrite_record(dir: &std::path::Path, f: impl Fn(&mut Vec<u8>)) {
    let db = common::raw_open(dir);
    let cf = db.cf_handle("records").unwrap();
    let key = idemdb::__internal::record_key(b"t", b"k");
    let mut v = db.get_cf(cf, &key).unwrap().expect("record on disk");
    f(&mut v);
    db.put_cf(cf, &key, v).unwrap();
}

#[test]
fn flipped_bits_and_truncation_are_detected() {
    type Damage = fn(&mut Vec<u8>);
    let cases: [(&str, Damage); 3] = [
        ("flipped bit in the body", |v| v[12] ^= 0x10),
        ("truncated", |v| v.truncate(v.len() / 2)),
        ("unknown format byte", |v| v[0] = 99),
    ];
    for (name, damage) in cases {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        {
            let store = common::open(dir.path(), &clock);
            let l = common::acquire(&store, "t", "k", b"fp");
            store
                .complete(&l, Response::new(vec![7u8; 64]))
                .unwrap()
                .unwrap();
            store.close().unwrap();
        }
        rewrite_record(dir.path(), damage);
        let store = common::open(dir.path(), &clock);
        let claim = store.claim("t", "k", b"fp", ClaimOptions::default());
        assert!(
            matches!(claim, Err(Error::Corrupted { .. })),
            "{name}: {claim:?}"
        );
        assert!(matches!(store.get("t", "k"), Err(Error::Corrupted { .. })));
        // The compaction filter keeps what it cannot read, so the damage stays visible.
        store.compact().unwrap();
        assert!(matches!(store.get("t", "k"), Err(Error::Corrupted { .. })));
        // An operator can remove it; then the key works again.
        assert!(store.forget("t", "k").unwrap());
        common::acquire(&store, "t", "k", b"fp");
    }
}
