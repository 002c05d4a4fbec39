//! The pool heals after its primary is demoted. A store on the multi-host URL (pool 4, connect
//! and statement timeouts 2 s) has 4 connections open to the primary when the primary starts
//! refusing writes like a demoted primary (`default_transaction_read_only`: each open session
//! gets SQLSTATE 25006 at its next write) and the standby is promoted. Calls made one at a time
//! afterwards each fail with `Error::Unavailable` or succeed, and at most pool size + 1 fail
//! before the first success (a connection that failed a call is closed, and after an
//! `Unavailable` every idle one too, so the next call connects afresh and the multi-host URL's
//! read-write check finds the promoted standby); the count is printed. Then
//! `IDEMDB_FAILOVER_CALLS` claims and completions (default 50) all succeed at the first try, and
//! their records are on the promoted standby, none on the demoted primary.

use std::time::{Duration, Instant};

use crate::lab::{self, Lab, Role};

const POOL: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_async_pair() {
    let calls = lab::size("IDEMDB_FAILOVER_CALLS", 50);
    let lab = tokio::task::spawn_blocking(|| Lab::pair(false))
        .await
        .unwrap();
    let store = lab::open(lab.url(), POOL, Duration::from_secs(10)).await;
    lab::warm(&store, POOL).await;
    let open = lab
        .blocking(|l| l.psql(Role::Primary, lab::STORE_CONNECTIONS))
        .await;
    assert_eq!(
        open,
        POOL.to_string(),
        "precondition: the warm-up left {POOL} connections open on the primary"
    );
    lab::standby_caught_up(&lab).await;

    let demoting = Instant::now();
    lab.blocking(|l| l.readonly_primary()).await;
    lab.blocking(|l| l.promote()).await;
    let promoted = Instant::now();

    let mut failed = Vec::new();
    let first = loop {
        let key = format!("first-{}", failed.len());
        match lab::claim_and_complete(&store, &key).await {
            Ok(()) => break Instant::now(),
            Err(e @ idemdb::Error::Unavailable { .. }) => failed.push(e.to_string()),
            Err(e) => panic!("a call after the demotion failed with {e:?}, not Unavailable"),
        }
        assert!(
            promoted.elapsed() < Duration::from_secs(120),
            "waited 120 s for a call to succeed after the promotion: {} failed: {:#?}",
            failed.len(),
            lab::tally(&failed)
        );
    };
    println!(
        "demoted primary: {} calls failed (Unavailable) before the first success, which came {} \
         ms after the promotion finished ({} ms after the demotion started); failures: \
         {:#?}",
        failed.len(),
        (first - promoted).as_millis(),
        (first - demoting).as_millis(),
        lab::tally(&failed)
    );
    assert!(
        failed.len() <= POOL + 1,
        "{} calls failed before the first success; the pool should drop a bad connection after \
         one call and every idle one after an Unavailable (at most {}): {:#?}",
        failed.len(),
        POOL + 1,
        lab::tally(&failed)
    );

    for i in 0..calls {
        let key = format!("heal-{i}");
        lab::claim_and_complete(&store, &key)
            .await
            .unwrap_or_else(|e| panic!("{key}, after the pool healed: {e}"));
    }
    let (on_standby, on_old) = lab
        .blocking(|l| {
            (
                lab::completed_with_prefix(l, Role::Standby, "heal-"),
                lab::completed_with_prefix(l, Role::Primary, "heal-"),
            )
        })
        .await;
    assert_eq!(
        on_standby, calls,
        "the work after the promotion is on the promoted standby"
    );
    assert_eq!(on_old, 0, "nothing was written on the demoted primary");

    drop(store);
    tokio::task::spawn_blocking(move || drop(lab))
        .await
        .unwrap();
}
