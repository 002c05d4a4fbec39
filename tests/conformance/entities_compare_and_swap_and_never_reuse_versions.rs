//! Versioned entities alike on both backends: create-if-absent, compare-and-swap, conflicts that
//! carry what is there now, deletes that leave a tombstone whose version a re-created entity
//! continues from (a version is never reused), unconditional puts, and tenants kept apart.

use idemdb::{Conflict, Expect, Versioned};

use crate::harness::Harness;

fn v(value: &[u8], version: u64) -> Versioned {
    Versioned {
        value: value.to_vec(),
        version,
    }
}

async fn check(h: &Harness) {
    let s = &h.store;
    assert_eq!(s.get_entity("t", "e").await.unwrap(), None);
    // A compare-and-swap on an absent entity conflicts with nothing.
    assert_eq!(
        s.put_entity("t", "e", Expect::Version(1), "x")
            .await
            .unwrap(),
        Err(Conflict { current: None })
    );
    assert_eq!(
        s.put_entity("t", "e", Expect::Absent, "a").await.unwrap(),
        Ok(1)
    );
    assert_eq!(
        s.put_entity("t", "e", Expect::Absent, "b").await.unwrap(),
        Err(Conflict {
            current: Some(v(b"a", 1))
        })
    );
    assert_eq!(
        s.put_entity("t", "e", Expect::Version(1), "b")
            .await
            .unwrap(),
        Ok(2)
    );
    assert_eq!(
        s.put_entity("t", "e", Expect::Version(1), "c")
            .await
            .unwrap(),
        Err(Conflict {
            current: Some(v(b"b", 2))
        })
    );
    assert_eq!(s.get_entity("t", "e").await.unwrap(), Some(v(b"b", 2)));
    // A version past any the database can hold conflicts; it never errs.
    assert!(s
        .put_entity("t", "e", Expect::Version(u64::MAX), "c")
        .await
        .unwrap()
        .is_err());
    // Delete: a stale condition conflicts, the right one leaves a tombstone at the next version.
    assert!(s
        .delete_entity("t", "e", Expect::Version(1))
        .await
        .unwrap()
        .is_err());
    assert_eq!(
        s.delete_entity("t", "e", Expect::Version(2)).await.unwrap(),
        Ok(Some(3))
    );
    assert_eq!(s.get_entity("t", "e").await.unwrap(), None);
    // Deleting what is gone writes nothing.
    assert_eq!(
        s.delete_entity("t", "e", Expect::Any).await.unwrap(),
        Ok(None)
    );
    // A tombstone is absent to a condition, and a re-created entity continues its versions.
    assert_eq!(
        s.put_entity("t", "e", Expect::Version(3), "x")
            .await
            .unwrap(),
        Err(Conflict { current: None })
    );
    assert_eq!(
        s.put_entity("t", "e", Expect::Absent, "again")
            .await
            .unwrap(),
        Ok(4)
    );
    assert_eq!(
        s.put_entity("t", "e", Expect::Any, "any").await.unwrap(),
        Ok(5)
    );
    assert_eq!(s.get_entity("t", "e").await.unwrap(), Some(v(b"any", 5)));
    // An unconditional put creates too; an empty value is a value, not a tombstone.
    assert_eq!(
        s.put_entity("t", "f", Expect::Any, "").await.unwrap(),
        Ok(1)
    );
    assert_eq!(s.get_entity("t", "f").await.unwrap(), Some(v(b"", 1)));
    // Another tenant's entity of the same id is another entity.
    assert_eq!(s.get_entity("u", "e").await.unwrap(), None);
    assert_eq!(
        s.put_entity("u", "e", Expect::Absent, "u").await.unwrap(),
        Ok(1)
    );
    assert_eq!(s.get_entity("t", "e").await.unwrap(), Some(v(b"any", 5)));
    // update_entity: creates, transforms, deletes (a tombstone at the next version).
    let r = s
        .update_entity("t", "n", Default::default(), |cur| {
            assert_eq!(cur, None);
            Some(b"1".to_vec())
        })
        .await
        .unwrap();
    assert_eq!(r, Some(v(b"1", 1)));
    let r = s
        .update_entity("t", "n", Default::default(), |cur| {
            let n: u64 = std::str::from_utf8(cur.unwrap()).unwrap().parse().unwrap();
            Some((n + 1).to_string().into_bytes())
        })
        .await
        .unwrap();
    assert_eq!(r, Some(v(b"2", 2)));
    assert_eq!(
        s.update_entity("t", "n", Default::default(), |_| None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(s.get_entity("t", "n").await.unwrap(), None);
    assert_eq!(
        s.put_entity("t", "n", Expect::Absent, "x").await.unwrap(),
        Ok(4)
    );
}

on_both_backends!(check);
