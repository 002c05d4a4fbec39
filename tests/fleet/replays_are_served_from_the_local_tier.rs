//! The local replay tier of a store on PostgreSQL (`Config::replay_tier`): a finished record's
//! second replay on an instance is answered from its memory (counted as a hit), with the same
//! answer the database gives (the replay, or `Mismatch` for another fingerprint); a pending
//! record is never kept; an entry is not served once its record expired; a record forgotten
//! through another instance is still replayed here (the documented bound, `replay_tier_max_age`),
//! one forgotten through this store is gone at once.

use std::time::Duration;

use idemdb::{Claim, ClaimOptions, Config, ManualClock, Response};

use crate::harness::{drop_schema, fresh_schema, in_schema};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let schema = fresh_schema(module_path!()).await;
    let clock = ManualClock::default();
    let open = |tier: usize| {
        Config::postgres(in_schema(&schema))
            .postgres_test_clock(clock.clone())
            .replay_tier(tier)
            .open_async()
    };
    let (a, b) = (open(1 << 20).await.unwrap(), open(0).await.unwrap());
    assert!(b.replay_tier_stats().is_none());
    let o = ClaimOptions::default()
        .lease(Duration::from_secs(5))
        .retention(Duration::from_secs(10));
    for k in ["k1", "k2"] {
        let Claim::Acquired(l) = a.claim("t", k, b"fp", o).await.unwrap() else {
            panic!("acquires {k}");
        };
        // Pending: answered by the database, never kept.
        assert!(matches!(
            a.claim("t", k, b"fp", o).await.unwrap(),
            Claim::InProgress { .. }
        ));
        a.complete(&l, Response::new(k.as_bytes().to_vec()))
            .await
            .unwrap()
            .unwrap();
    }
    let stats = a.replay_tier_stats().unwrap();
    assert_eq!((stats.hits, stats.entries), (0, 0), "{stats:?}");

    let from_db = a.claim("t", "k1", b"fp", o).await.unwrap();
    assert!(matches!(&from_db, Claim::Completed(r) if r.response.body == b"k1"));
    assert_eq!(a.replay_tier_stats().unwrap().entries, 1);
    assert_eq!(a.claim("t", "k1", b"fp", o).await.unwrap(), from_db);
    assert_eq!(
        a.claim("t", "k1", b"other", o).await.unwrap(),
        Claim::Mismatch
    );
    assert_eq!(a.replay_tier_stats().unwrap().hits, 2);

    // Forgotten through the other instance: still replayed here, within the tier's bound.
    assert!(b.forget("t", "k1").await.unwrap());
    assert_eq!(a.claim("t", "k1", b"fp", o).await.unwrap(), from_db);
    // Forgotten through this store: gone here at once.
    assert!(!a.forget("t", "k1").await.unwrap());
    assert!(matches!(
        a.claim("t", "k1", b"fp", o).await.unwrap(),
        Claim::Acquired(_)
    ));

    // Expired: not served from the tier, and the key is new again.
    assert!(matches!(
        a.claim("t", "k2", b"fp", o).await.unwrap(),
        Claim::Completed(_)
    ));
    clock.advance(Duration::from_secs(11));
    let hits = a.replay_tier_stats().unwrap().hits;
    assert!(matches!(
        a.claim("t", "k2", b"fp", o).await.unwrap(),
        Claim::Acquired(_)
    ));
    assert_eq!(a.replay_tier_stats().unwrap().hits, hits);
    drop((a, b));
    drop_schema(&schema).await;
}
