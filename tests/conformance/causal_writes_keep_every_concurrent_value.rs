//! Causal writes alike on both backends: concurrent blind writes become siblings (none is lost,
//! also when eight writers race), a write with the merged context replaces what it has seen, a
//! causal delete removes only what its context has seen, the stored entity is bounded (the write
//! that would pass the bound is refused and changes nothing), and replica version vectors merge
//! as a pointwise maximum.

use idemdb::{Error, InvalidInput, VersionVector};

use crate::harness::Harness;

fn vv(entries: &[(&str, u64)]) -> VersionVector {
    let mut v = VersionVector::new();
    for (actor, n) in entries {
        v.observe(actor, *n);
    }
    v
}

fn dots(s: &idemdb::Siblings) -> Vec<(String, u64, Vec<u8>)> {
    let mut d: Vec<_> = s
        .values
        .iter()
        .map(|x| (x.actor.clone(), x.counter, x.value.clone()))
        .collect();
    d.sort();
    d
}

async fn check(h: &Harness) {
    let s = &h.store;
    let empty = VersionVector::new();
    let got = s.causal_get("t", "cart").await.unwrap();
    assert!(got.values.is_empty() && got.context == empty);

    let after_a = s.causal_put("t", "cart", "a", &empty, "x").await.unwrap();
    assert_eq!(dots(&after_a), vec![("a".into(), 1, b"x".to_vec())]);
    let after_b = s.causal_put("t", "cart", "b", &empty, "y").await.unwrap();
    assert_eq!(
        after_b.values.len(),
        2,
        "a blind write keeps the concurrent value"
    );
    assert_eq!(after_b.context, vv(&[("a", 1), ("b", 1)]));
    assert_eq!(s.causal_get("t", "cart").await.unwrap(), after_b);

    let merged = s
        .causal_put("t", "cart", "a", &after_b.context, "xy")
        .await
        .unwrap();
    assert_eq!(dots(&merged), vec![("a".into(), 2, b"xy".to_vec())]);

    // A causal delete removes only what its context has seen.
    let left = s
        .causal_delete("t", "cart", &vv(&[("a", 1), ("b", 1)]))
        .await
        .unwrap();
    assert_eq!(dots(&left), vec![("a".into(), 2, b"xy".to_vec())]);
    let left = s.causal_delete("t", "cart", &merged.context).await.unwrap();
    assert!(left.values.is_empty());
    assert!(s.causal_get("t", "cart").await.unwrap().values.is_empty());

    // The bound (max_response_bytes 256 here): blind writes pile up siblings until refused.
    let mut refused = None;
    for i in 0..64 {
        let before = s.causal_get("t", "big").await.unwrap();
        match s
            .causal_put("t", "big", &format!("w{i}"), &empty, vec![b'v'; 40])
            .await
        {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(s.causal_get("t", "big").await.unwrap(), before);
                refused = Some(e);
                break;
            }
        }
    }
    assert!(
        matches!(
            refused,
            Some(Error::InvalidInput(InvalidInput::LimitReached { .. }))
        ),
        "{refused:?}"
    );
    assert!(matches!(
        s.causal_put("t", "big", "a", &empty, vec![0u8; 257]).await,
        Err(Error::InvalidInput(InvalidInput::TooLarge { .. }))
    ));
    assert!(matches!(
        s.causal_put("", "big", "a", &empty, "v").await,
        Err(Error::InvalidInput(InvalidInput::Empty { .. }))
    ));

    // Replica vectors: a pointwise maximum, idempotent.
    s.merge_replica_vector("t", "r", &vv(&[("a", 3)]))
        .await
        .unwrap();
    s.merge_replica_vector("t", "r", &vv(&[("a", 1), ("b", 2)]))
        .await
        .unwrap();
    s.merge_replica_vector("t", "r", &vv(&[("a", 1), ("b", 2)]))
        .await
        .unwrap();
    assert_eq!(
        s.replica_vector("t", "r").await.unwrap(),
        vv(&[("a", 3), ("b", 2)])
    );
    assert_eq!(s.replica_vector("t", "none").await.unwrap(), empty);

    // Eight writers at once, each blind: every value is kept.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.causal_put(
                "t",
                "race",
                &format!("w{i}"),
                &VersionVector::new(),
                vec![b'0' + i],
            )
            .await
            .unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(s.causal_get("t", "race").await.unwrap().values.len(), 8);
}

on_both_backends!(check, |c| c.max_response_bytes(256));
