//! On PostgreSQL the store's sweeper task (`Config::sweep_interval`) deletes expired rows by
//! itself, in batches, and leaves live ones; it stops when the store is dropped.

use std::time::{Duration, Instant};

use idemdb::{Claim, ClaimOptions, Config, ManualClock, Response};

use crate::harness::{admin_in_schema, drop_schema, fresh_schema, in_schema};

async fn rows(url: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .query_one("SELECT count(*) FROM idemdb_requests", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let schema = fresh_schema(module_path!()).await;
    let url = in_schema(&schema);
    let clock = ManualClock::default();
    let store = Config::postgres(&url)
        .postgres_test_clock(clock.clone())
        .sweep_interval(Some(Duration::from_millis(50)))
        .open_async()
        .await
        .unwrap();
    let short = ClaimOptions::default()
        .lease(Duration::from_secs(1))
        .retention(Duration::from_secs(10));
    for i in 0..1_200 {
        let o = if i < 1_100 {
            short
        } else {
            short.retention(Duration::from_secs(1000))
        };
        let Claim::Acquired(l) = store.claim("t", format!("k{i}"), b"fp", o).await.unwrap() else {
            panic!("acquires");
        };
        store
            .complete(&l, Response::new(b"r".to_vec()))
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(rows(&admin_in_schema(&schema)).await, 1_200);
    clock.advance(Duration::from_secs(11));
    // More than one batch (1,000) expired: the sweeper goes on until a batch comes back short.
    let start = Instant::now();
    while rows(&admin_in_schema(&schema)).await > 100 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the sweeper did not run"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rows(&admin_in_schema(&schema)).await, 100, "live rows stay");
    drop(store);
    drop_schema(&schema).await;
}
