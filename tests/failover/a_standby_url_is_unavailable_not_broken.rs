//! A store whose URL names a standby (a stale writer endpoint after a failover, or a URL without
//! `target_session_attrs`) answers its claims `Error::Unavailable`, a transient error, never
//! `Error::Engine` (regression, issue 43 item 3: a buffered claim's token block reads
//! `pg_current_wal_lsn()`, which a server in recovery refuses with SQLSTATE 55000 "recovery is in
//! progress", and that was classified as a permanent engine error: HTTP 500, the pool not
//! flushed). Both kinds of claim are checked: buffered (the token block) and flushed (the insert
//! refused with 25006).

use std::time::Duration;

use idemdb::{ClaimOptions, Error};

use crate::lab::{self, until_answered, Lab, Role};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_url_is_unavailable_not_broken() {
    let lab = tokio::task::spawn_blocking(|| Lab::pair(true))
        .await
        .unwrap();
    // Migrated on the primary, replayed on the standby.
    let primary = lab::open(lab.primary_url(), 2, Duration::from_secs(5)).await;
    let first = until_answered("a claim on the primary", || {
        primary.claim("shop", "first", "fp", ClaimOptions::default())
    })
    .await;
    assert!(matches!(first, idemdb::Claim::Acquired(_)), "{first:?}");
    lab.blocking(|l| {
        l.wait_for_psql(
            Role::Standby,
            "SELECT count(*) FROM idemdb_requests WHERE key = 'first'",
            "1",
            Duration::from_secs(30),
            "the schema and a first row replayed on the standby",
        )
    })
    .await;
    let buffered = lab::open_buffered(lab.standby_url(), 2, Duration::from_secs(5)).await;
    let flushed = lab::open(lab.standby_url(), 2, Duration::from_secs(5)).await;
    for (what, store) in [("buffered", &buffered), ("flushed", &flushed)] {
        for i in 0..3 {
            let key = format!("{what}-{i}");
            match store
                .claim("shop", &key, "fp", ClaimOptions::default())
                .await
            {
                Err(e @ Error::Unavailable { .. }) => assert!(e.is_transient(), "{e}"),
                other => panic!("a {what} claim against a standby answered {other:?}"),
            }
        }
    }
}
