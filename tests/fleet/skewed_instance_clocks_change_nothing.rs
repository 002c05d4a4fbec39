//! On PostgreSQL every time comes from the database server: a store on PostgreSQL has no clock
//! of its own to set (`Config<OnPostgres>` has no `clock` setting: it does not compile), and two
//! instances agree on every lease and expiry by the database's clock. One cannot see a lease as
//! over before the database does, the other cannot take a live lease over, and neither replays a
//! record after the database says it expired.

use std::time::Duration;

use idemdb::{Claim, ClaimOptions, Config, Response, SystemClock};

use crate::harness::{drop_schema, fresh_schema, in_schema};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let schema = fresh_schema(module_path!()).await;
    let real = idemdb::Clock::now_millis(&SystemClock);
    let open = || Config::postgres(in_schema(&schema)).open_async();
    let fast = open().await.unwrap();
    let slow = open().await.unwrap();
    let o = ClaimOptions::default()
        .lease(Duration::from_secs(2))
        .retention(Duration::from_secs(3));

    // Both instances read the same time, the database's, not their own clocks.
    let (a, b) = (fast.now().await.unwrap(), slow.now().await.unwrap());
    assert!(a.abs_diff(b) < 1_000, "{a} vs {b}");
    assert!(
        a.abs_diff(real) < 60_000,
        "database time {a}, real time {real}"
    );

    let Claim::Acquired(lease) = slow.claim("t", "k", b"fp", o).await.unwrap() else {
        panic!("acquires");
    };
    // The other instance sees the lease as live.
    match fast.claim("t", "k", b"fp", o).await.unwrap() {
        Claim::InProgress { retry_after } => assert!(retry_after <= Duration::from_secs(2)),
        other => panic!("a live lease was not respected: {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    // Once the database says the lease is over, either instance takes over.
    let Claim::Acquired(next) = fast.claim("t", "k", b"fp", o).await.unwrap() else {
        panic!("a lease over by the database's clock is taken over");
    };
    assert!(next.is_takeover() && next.fence() > lease.fence());
    fast.complete(&next, Response::new(b"done".to_vec()))
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        slow.claim("t", "k", b"fp", o).await.unwrap(),
        Claim::Completed(_)
    ));
    // The takeover extended the record to the lease's end; wait past it by the database's clock.
    let expires = slow.get("t", "k").await.unwrap().unwrap().expires_at;
    while slow.now().await.unwrap() <= expires {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Expired for both: neither replays it.
    assert_eq!(slow.get("t", "k").await.unwrap(), None);
    assert!(matches!(
        slow.claim("t", "k", b"fp", o).await.unwrap(),
        Claim::Acquired(l) if l.attempt() == 1
    ));
    drop((fast, slow));
    drop_schema(&schema).await;
}
