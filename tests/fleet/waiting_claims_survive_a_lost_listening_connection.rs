//! On PostgreSQL a waiting claim is woken through the store's one listening connection. When the
//! server ends that connection (here `pg_terminate_backend`, as a restart or an idle-session
//! timeout would), a notification sent while it is away is lost; the store then wakes every
//! waiter, which claims again, and listens again: a duplicate waiting across the loss still gets
//! the holder's response, long before the lease or its bound would have ended its wait, and a
//! wait after the loss is woken by notifications again.

use std::time::{Duration, Instant};

use idemdb::{Claim, ClaimOptions, Response};

use crate::harness::{admin_in_schema, Harness};

/// The listening connections for `schema`: counted, or (`end`) ended; how many.
async fn listeners(schema: &str, end: bool) -> i64 {
    let (client, conn) = tokio_postgres::connect(&admin_in_schema(schema), tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE NOT $1 OR pg_terminate_backend(pid)) \
             FROM pg_stat_activity WHERE query = 'LISTEN ' || idemdb_wait_channel()",
            &[&end],
        )
        .await
        .unwrap();
    drop(client);
    let _ = task.await;
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let h = Harness::postgres(module_path!(), |c| c).await;
    let schema = h.schema().unwrap();
    let a = &h.store;
    let b = h.another_instance().await;
    let held = ClaimOptions::default().lease(Duration::from_secs(120));
    let waiting = held.wait(Duration::from_secs(60));

    for round in 0..2 {
        let key = format!("k{round}");
        let Claim::Acquired(lease) = a.claim("t", &key, b"fp", held).await.unwrap() else {
            panic!("acquires");
        };
        let waiter = tokio::spawn({
            let (b, key) = (b.clone(), key.clone());
            async move { b.claim("t", &key, b"fp", waiting).await.unwrap() }
        });
        // Until the waiter's store listens (its first wait opens the connection; after the
        // loss, it opens another a second later).
        let since = Instant::now();
        while listeners(&schema, false).await == 0 {
            assert!(
                since.elapsed() < Duration::from_secs(30),
                "waited 30 s for the waiting store's listening connection"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if round == 0 {
            // The completion's notification may be sent while no one listens.
            let ended = listeners(&schema, true).await;
            println!("ended {ended} listening connection(s)");
        }
        let done = Instant::now();
        a.complete(&lease, Response::new(key.clone().into_bytes()))
            .await
            .unwrap()
            .unwrap();
        match waiter.await.unwrap() {
            Claim::Completed(r) => assert_eq!(r.response.body, key.as_bytes()),
            other => panic!("round {round}: the waiter got {other:?}"),
        }
        println!(
            "round {round}: the waiter answered {:?} after the completion",
            done.elapsed()
        );
    }
    h.cleanup().await;
}
