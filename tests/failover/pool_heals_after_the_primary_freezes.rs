//! The pool heals after its primary freezes. A store on the multi-host URL (pool 4) runs claims
//! and completions from four tasks when every process of the primary is stopped (SIGSTOP: the
//! kernel still accepts TCP connections, nothing answers); the standby is then promoted. The
//! calls in flight and those sent to the frozen primary fail closed with `Error::Unavailable`
//! (each call is bounded by a 30 s outer timeout that fails the test as a hang; the store bounds
//! its own at the statement timeout plus 1 s), and nothing runs without an `Acquired` claim.
//! Calls made one at a time afterwards fail with `Unavailable` or succeed, and work resumes on
//! the promoted standby by itself (within 120 s; the time from the freeze and from the promotion
//! to the first success, and the failures before it, are printed): a new connection spends at
//! most one connect timeout on the frozen host before it tries the next. Then
//! `IDEMDB_FAILOVER_CALLS` claims and completions (default 50) all succeed at the first try,
//! their records on the promoted standby, and a new store opens on the multi-host URL while the
//! old primary is still frozen. The primary is thawed at the end, before the pair is
//! stopped. Two settings: connect and statement timeouts of 2 s each, and the library's default
//! connect timeout (5 s) with a statement timeout of 2 s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::lab::{self, Lab, Role};

const POOL: usize = 4;
const LOAD_TASKS: usize = 4;

/// A call of the background load: when it was sent, when it ended, and how.
struct Call {
    asked: Instant,
    ended: Instant,
    outcome: Result<(), String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_async_pair() {
    let two = Duration::from_secs(2);
    heals(two, two, "connect timeout 2 s, statement timeout 2 s").await;
}

/// The library's default connect timeout (5 s) with a shorter statement timeout (2 s): a new
/// connection may spend one connect timeout on the frozen host before it tries the next, so
/// the call's own bound (the statement timeout plus 1 s) must not cut it off first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_connect_timeout_longer_than_the_statement_timeout() {
    heals(
        Duration::from_secs(5),
        Duration::from_secs(2),
        "connect timeout 5 s, statement timeout 2 s",
    )
    .await;
}

async fn heals(connect_timeout: Duration, statement_timeout: Duration, label: &str) {
    let calls = lab::size("IDEMDB_FAILOVER_CALLS", 50);
    let lab = tokio::task::spawn_blocking(|| Lab::pair(false))
        .await
        .unwrap();
    let lease = Duration::from_secs(10);
    let store = lab::open_with(lab.url(), POOL, lease, connect_timeout, statement_timeout).await;
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

    // Background load, until just after the freeze.
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::<Call>::new()));
    let mut load = Vec::new();
    for t in 0..LOAD_TASKS {
        let (store, stop, log) = (store.clone(), stop.clone(), log.clone());
        load.push(tokio::spawn(async move {
            let mut j = 0;
            while !stop.load(Ordering::SeqCst) {
                let asked = Instant::now();
                let outcome = match lab::claim_and_complete(&store, &format!("load-{t}-{j}")).await
                {
                    Ok(()) => Ok(()),
                    Err(e @ idemdb::Error::Unavailable { .. }) => Err(e.to_string()),
                    Err(e) => {
                        panic!("a call to the frozen primary failed with {e:?}, not Unavailable")
                    }
                };
                log.lock().push(Call {
                    asked,
                    ended: Instant::now(),
                    outcome,
                });
                j += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let freezing = Instant::now();
    lab.blocking(|l| l.freeze_primary()).await;
    let frozen = Instant::now();
    stop.store(true, Ordering::SeqCst);
    lab.blocking(|l| l.promote()).await;
    let promoted = Instant::now();

    // Calls one at a time, until one succeeds.
    let mut failed = Vec::new();
    let first = loop {
        let key = format!("first-{}", failed.len());
        match lab::claim_and_complete(&store, &key).await {
            Ok(()) => break Instant::now(),
            Err(e @ idemdb::Error::Unavailable { .. }) => failed.push(e.to_string()),
            Err(e) => panic!("a call after the freeze failed with {e:?}, not Unavailable"),
        }
        assert!(
            promoted.elapsed() < Duration::from_secs(120),
            "{label}: waited 120 s after the promotion for work to resume on the promoted \
             standby: {} calls failed: {:#?}",
            failed.len(),
            lab::tally(&failed)
        );
    };
    for t in load {
        lab::bounded(
            Duration::from_secs(60),
            "the background load's last call",
            t,
        )
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    }
    let log = std::mem::take(&mut *log.lock());
    let ok_before = log.iter().filter(|c| c.outcome.is_ok()).count();
    let cut: Vec<&Call> = log.iter().filter(|c| c.ended > freezing).collect();
    let unavailable = cut.iter().filter(|c| c.outcome.is_err()).count();
    let slowest = cut
        .iter()
        .map(|c| c.ended - c.asked)
        .max()
        .unwrap_or_default();
    println!(
        "frozen primary ({label}): background load {} calls ({ok_before} succeeded); {} ended \
         after the freeze started, {unavailable} of them Unavailable, the slowest after {} ms; \
         freezing took {} ms, promotion {} ms",
        log.len(),
        cut.len(),
        slowest.as_millis(),
        (frozen - freezing).as_millis(),
        (promoted - frozen).as_millis()
    );
    println!(
        "frozen primary ({label}): first success {} ms after the freeze finished, {} ms after \
         the promotion finished; {} calls failed (Unavailable) before it: {:#?}",
        (first - frozen).as_millis(),
        (first - promoted).as_millis(),
        failed.len(),
        lab::tally(&failed)
    );
    assert!(
        unavailable >= 1,
        "no call of the load failed while the primary was frozen: nothing was cut (the load ran \
         {} calls after the freeze started)",
        cut.len()
    );

    for i in 0..calls {
        let key = format!("heal-{i}");
        lab::claim_and_complete(&store, &key)
            .await
            .unwrap_or_else(|e| panic!("{key}, after the pool healed: {e}"));
    }
    let on_standby = lab
        .blocking(|l| lab::completed_with_prefix(l, Role::Standby, "heal-"))
        .await;
    assert_eq!(
        on_standby, calls,
        "the work after the promotion is on the promoted standby"
    );

    // A new instance opens while the old primary is still frozen (its first host): it spends at
    // most one connect timeout there and opens on the promoted standby.
    let opening = Instant::now();
    let fresh = lab::bounded(
        Duration::from_secs(60),
        "a new store opening while the old primary is frozen",
        idemdb::Config::postgres(lab.url())
            .pool_size(1)
            .connect_timeout(connect_timeout)
            .statement_timeout(statement_timeout)
            .sweep_interval(None)
            .open_async(),
    )
    .await
    .unwrap_or_else(|e| {
        panic!("a new store on the multi-host URL while the primary is frozen: {e}")
    });
    lab::claim_and_complete(&fresh, "fresh-store")
        .await
        .unwrap_or_else(|e| panic!("the new store's first call: {e}"));
    println!(
        "frozen primary: a new store opened and completed a claim in {} ms",
        opening.elapsed().as_millis()
    );
    drop(fresh);

    drop(store);
    lab.blocking(|l| l.thaw_primary()).await;
    tokio::task::spawn_blocking(move || drop(lab))
        .await
        .unwrap();
}
