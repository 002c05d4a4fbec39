//! A buffered claim (`Config::buffered_claims`: it commits without waiting for its WAL flush, and
//! the completion's flushed commit makes it durable; docs/design.md, "One WAL flush per request")
//! may be lost when the database server crashes; a completion never is, and a fencing token is
//! never handed out twice. The primary of a pair is made to write buffered commits' WAL only every
//! 10 s (`wal_writer_delay`), so that what the crash loses is not left to chance. On it, `DONE`
//! payments are claimed and completed, then `HELD` new keys are claimed and held, and the server
//! is SIGKILLed (every process) and started again on the same data directory (crash recovery, the
//! same timeline). Then:
//! - every completion acknowledged before the crash replays;
//! - each held key is either gone (its claim was lost) or still pending under its holder's token:
//!   the holder's completion is accepted exactly when its row survived, and refused as
//!   `LeaseLost::Gone` when it did not, after which a new claim acquires the key;
//! - every token handed out after the crash, by the old store object (its pool reconnects) and by
//!   a store opened after it, is greater than every token handed out before the crash.
//!
//! How we know it can fail: `HELD` (40) is more than the 32 values the sequence logs ahead, so a
//! buffered claim that drew its token from the sequence in its own unflushed transaction would
//! WAL-log the sequence there; the crash loses that record, and after recovery the sequence hands
//! those tokens out again (docs/verification.md: the mutation, and the round it fails in).

use std::time::Duration;

use idemdb::{AsyncStore, Claim, ClaimOptions, Lease, LeaseLost, RecordState, Response};

use crate::lab::{self, until_answered, Lab, Role};

const TENANT: &str = "crash";
const LONG: Duration = Duration::from_secs(120);
const DONE: usize = 5;
const HELD: usize = 40;
const AFTER: usize = 10;

fn fp(key: &str) -> Vec<u8> {
    format!("fp of {key}").into_bytes()
}

async fn acquire(store: &AsyncStore, key: &str) -> Lease {
    let opts = ClaimOptions::default().lease(LONG);
    match until_answered("a claim", || store.claim(TENANT, key, fp(key), opts)).await {
        Claim::Acquired(l) => l,
        other => panic!("the claim of {key} answered {other:?}, not Acquired"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_killed_and_restarted_primary() {
    let lab = tokio::task::spawn_blocking(|| Lab::pair(false))
        .await
        .unwrap();
    lab.blocking(|l| {
        l.psql(Role::Primary, "ALTER SYSTEM SET wal_writer_delay = '10s'");
        l.psql(Role::Primary, "SELECT pg_reload_conf()");
    })
    .await;
    let url = lab.primary_url().to_string();
    let old = lab::open_buffered(&url, 4, LONG).await;

    let mut before: Vec<u64> = Vec::new();
    let mut done = Vec::new();
    for j in 0..DONE {
        let key = format!("done-{j}");
        let lease = acquire(&old, &key).await;
        before.push(lease.fence());
        let body = Response::new(format!("{key} charged under {}", lease.fence()));
        let r = until_answered("a completion", || old.complete(&lease, body.clone())).await;
        assert_eq!(r, Ok(()), "{key}");
        done.push((key, body));
    }
    let mut held = Vec::new();
    for j in 0..HELD {
        let key = format!("held-{j}");
        let lease = acquire(&old, &key).await;
        before.push(lease.fence());
        held.push((key, lease));
    }
    let highest_before = before.iter().copied().max().unwrap_or(0);

    // The crash, then crash recovery on the same data directory.
    lab.blocking(|l| {
        l.kill_primary();
        l.start_primary();
    })
    .await;
    let rival = lab::open_buffered(&url, 4, LONG).await;

    for (key, body) in &done {
        match until_answered("a replay", || {
            rival.claim(TENANT, key, fp(key), ClaimOptions::default())
        })
        .await
        {
            Claim::Completed(r) => assert_eq!(&r.response, body, "{key}"),
            other => panic!("{key} was completed before the crash, and now answers {other:?}"),
        }
    }

    let mut after: Vec<u64> = Vec::new();
    let mut lost = 0;
    for (key, lease) in &held {
        let stored = until_answered("a record read", || old.get(TENANT, key)).await;
        let body = Response::new(format!("{key} charged under {}", lease.fence()));
        let outcome = until_answered("the holder's completion", || {
            old.complete(lease, body.clone())
        })
        .await;
        match stored.map(|r| (r.state, r.fence)) {
            Some((RecordState::Pending { .. }, fence)) => {
                assert_eq!(
                    fence,
                    lease.fence(),
                    "{key}: a surviving claim keeps its token"
                );
                assert_eq!(outcome, Ok(()), "{key}: its row survived the crash");
            }
            None => {
                lost += 1;
                assert_eq!(
                    outcome,
                    Err(LeaseLost::Gone),
                    "{key}: its claim was lost in the crash, so its holder's completion is refused"
                );
                let again = acquire(&rival, key).await;
                after.push(again.fence());
                let r = until_answered("a completion", || {
                    rival.complete(&again, Response::new(b"charged again".to_vec()))
                })
                .await;
                assert_eq!(r, Ok(()), "{key}");
            }
            Some(other) => panic!("{key} after the crash: {other:?}, neither pending nor gone"),
        }
    }
    for j in 0..AFTER {
        for (who, store) in [("old", &old), ("new", &rival)] {
            let key = format!("after-{who}-{j}");
            after.push(acquire(store, &key).await.fence());
        }
    }
    println!(
        "server crash: {lost} of {HELD} held claims lost; tokens before the crash up to \
         {highest_before}, after it from {}",
        after.iter().min().copied().unwrap_or(0)
    );
    assert!(
        lost > 0,
        "the crash lost no buffered claim although the server was to write their WAL only every \
         10 s: the test proved nothing about lost claims"
    );
    for t in &after {
        assert!(
            *t > highest_before,
            "a token handed out after the crash ({t}) is not above every token handed out before \
             it ({highest_before}): the sequence handed a token out again"
        );
    }
}
