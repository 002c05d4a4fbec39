//! Under synchronous replication a failover (the primary killed mid-run, the standby promoted)
//! loses no acknowledged payment, in both claim modes (`Config::buffered_claims`), and with
//! flushed claims runs none twice. With buffered claims (the default) a payment runs twice only
//! where the failover lost its claim: the key is acquired afresh after the failover while every
//! earlier lease of it was answered by the old primary and none was acknowledged complete (its
//! holder's completion is refused); the count of such payments is printed. Four instances (four stores on the
//! multi-host URL, pool 4, connect and statement timeouts 2 s, lease 2 s) run
//! `IDEMDB_FAILOVER_PAYMENTS` payments (default 300, at most 100 a second) from 16 client tasks,
//! every fifth one sent by two clients at once; a client retries its payment (same key) on any
//! transient error. Checked afterwards:
//! - every payment was charged exactly once (a ledger kept outside the store; with buffered
//!   claims, once plus once per claim the failover lost), and every client of a payment was
//!   answered the same receipt;
//! - a fresh store on the new primary replays every acknowledged receipt byte for byte, and no
//!   key is still in progress once a lease has passed;
//! - every fencing token drawn after the promotion is greater than every token drawn before the
//!   kill (claims in flight meanwhile are ambiguous and left out), and every instance that drew
//!   tokens on both sides counted the failover (`postgres_stats().failovers_seen`);
//! - a lease taken before the kill (its claim replicated synchronously) is still the holder
//!   afterwards: its completion is accepted, not refused (refusing it would run its effect again);
//! - a takeover never happens while an earlier holder's lease was live, and no key is acquired
//!   afresh (not as a takeover) after it was acquired once: the record was not lost (with
//!   buffered claims: unless the record was a claim the failover lost, as above);
//! - a key is taken over only after some client was answered `Acquired` for it: a claim that
//!   committed while its answer was lost in the failover (the client saw an error and ran
//!   nothing) is released by its store, not taken over as if its client might have acted
//!   (regression, issue 42 item 2). Strict for payments with one client, which retry on their
//!   own instance; a duplicate on another instance may still take over a lost claim whose lease
//!   ran out before its store could release it (counted and printed).
//!
//! The handler is a correct client of the library: it charges only right after an `Acquired`
//! claim while the lease is surely live, and asks `complete` again until it is decided. The lease
//! (2 s) may be shorter than the outage (on a loaded machine), so a client whose completion could
//! not reach the database before its lease ran out may see a duplicate take the key over: that
//! takeover is the library's documented way of running an operation whose holder went quiet
//! (design.md, "Failures are closed"), and `Lease::is_takeover` says so, so the handler then
//! looks the payment up in the ledger first (a payment provider's lookup by idempotency key) and
//! charges only if no earlier holder did. How often that lookup found a charge is printed: those
//! are the payments a handler that ignored `is_takeover` would have charged twice. A record lost
//! in the failover would come back as a fresh acquisition, not a takeover, and be charged again:
//! the ledger check sees it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use idemdb::{AsyncStore, Claim, ClaimOptions, Lease, LeaseLost, Response};
use parking_lot::Mutex;

use crate::lab::{self, bounded, split_fence, Lab};

const TENANT: &str = "shop";
const LEASE: Duration = Duration::from_secs(2);
/// The outer bound of one store call (the store bounds its own at 3 s): past it, a hang.
const CALL: Duration = Duration::from_secs(30);
/// How long all payments together may take, outage included.
const DEADLINE: Duration = Duration::from_secs(120);
const INSTANCES: usize = 4;
const TASKS_PER_INSTANCE: usize = 4;
/// Payment `i` starts no earlier than `i` times this after the run's start (100 a second), so
/// that payments are still flowing when the kill lands.
const PACE: Duration = Duration::from_millis(10);
const RETRY: Duration = Duration::from_millis(100);

fn key(i: usize) -> String {
    format!("pay-{i}")
}

fn amount(i: usize) -> u64 {
    (i as u64 * 7919) % 100_000 + 1
}

fn fingerprint(i: usize) -> String {
    format!("amount={}", amount(i))
}

/// When the failover happened, as the controller saw it.
#[derive(Default)]
struct Moments {
    kill_started: OnceLock<Instant>,
    kill_done: OnceLock<Instant>,
    promote_done: OnceLock<Instant>,
}

/// How the stores under test commit a new key's claim (`Config::buffered_claims`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
enum Claims {
    /// Flushed and replicated before the claim answers.
    #[default]
    Flushed,
    /// Made durable by the next flushed commit (the default).
    Buffered,
}

/// A lease as the ledger keeps it: `(fence, lease_until, answered at)`.
type Held = (u64, u64, Instant);

/// One acquired lease, as its client saw it.
#[derive(Clone)]
struct Acquired {
    instance: usize,
    fence: u64,
    returned: Instant,
}

#[derive(Default)]
struct Shared {
    claims_mode: Claims,
    /// The charges, per payment key: the effect the store must keep from running twice.
    ledger: Mutex<HashMap<String, u32>>,
    /// What each client of a payment was answered.
    answers: Mutex<HashMap<String, Vec<Vec<u8>>>>,
    /// Every lease acquired, for the fencing check.
    acquired: Mutex<Vec<Acquired>>,
    /// Per key, each lease acquired for it.
    leases: Mutex<HashMap<String, Vec<Held>>>,
    /// The `(key, fence)` of every completion acknowledged.
    completed: Mutex<HashSet<(String, u64)>>,
    /// Buffered claims only: keys acquired afresh after the failover lost their claim, with the
    /// fences of the earlier leases (checked at the end: none was acknowledged complete).
    refreshed: Mutex<Vec<(String, Vec<u64>)>>,
    /// When each answered claim was sent and answered.
    claims: Mutex<Vec<(Instant, Instant)>>,
    /// Violations found while running (checked at the end).
    violations: Mutex<Vec<String>>,
    acked: AtomicUsize,
    transient: AtomicUsize,
    takeovers: AtomicUsize,
    found_charged: AtomicUsize,
    /// Keys some client was answered `Acquired` for.
    answered: Mutex<std::collections::HashSet<String>>,
    /// Takeovers of keys no client had been answered `Acquired` for (a lost claim's lease).
    unsent_takeovers: Mutex<Vec<String>>,
    lost_leases: Mutex<Vec<(String, LeaseLost)>>,
    moments: Moments,
}

impl Shared {
    /// Runs the payment's effect for the holder of `lease` (right after its claim, answered at
    /// `answered`).
    fn charge(&self, key: &str, lease: &Lease, answered: Instant) {
        let now = lab::now_ms();
        let mut leases = self.leases.lock();
        let earlier = leases.entry(key.to_string()).or_default();
        let mut ledger = self.ledger.lock();
        let charged = ledger.entry(key.to_string()).or_insert(0);
        if lease.is_takeover() {
            self.takeovers.fetch_add(1, Ordering::Relaxed);
            // The database decided the takeover at or after every earlier lease's end (its clock
            // is this machine's; 5 ms for rounding).
            if let Some(&(fence, until, _)) = earlier.iter().max_by_key(|(_, until, _)| *until) {
                if now + 5 < until {
                    self.violations.lock().push(format!(
                        "{key}: taken over (fence {}) at {now} while the lease of fence {fence} \
                         ran until {until}",
                        lease.fence()
                    ));
                }
            }
        } else if !earlier.is_empty() {
            // With buffered claims, a claim the failover lost: every earlier lease was answered
            // by the old primary (before its kill finished).
            let lost_in_failover = self.claims_mode == Claims::Buffered
                && self
                    .moments
                    .kill_done
                    .get()
                    .is_some_and(|done| earlier.iter().all(|(_, _, at)| at < done));
            if lost_in_failover {
                let fences = earlier.iter().map(|(f, _, _)| *f).collect();
                self.refreshed.lock().push((key.to_string(), fences));
            } else {
                self.violations.lock().push(format!(
                    "{key}: acquired afresh (fence {}, not a takeover) after leases {:?}: \
                     the record was lost",
                    lease.fence(),
                    earlier
                        .iter()
                        .map(|(f, u, _)| (split_fence(*f), *u))
                        .collect::<Vec<_>>()
                ));
            }
        }
        earlier.push((lease.fence(), lease.lease_until(), answered));
        if lease.is_takeover() && *charged > 0 {
            // An earlier holder charged and its completion never arrived: look it up, do not
            // charge again.
            self.found_charged.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *charged += 1;
    }
}

/// One client's payment `i` through `store` (instance `instance`): the receipt it was answered,
/// or the key if it did not finish before the deadline.
async fn pay(
    store: &AsyncStore,
    instance: usize,
    i: usize,
    sh: &Shared,
    started: Instant,
) -> Result<Vec<u8>, String> {
    let (key, fp) = (key(i), fingerprint(i));
    loop {
        if started.elapsed() > DEADLINE {
            return Err(key);
        }
        let asked = Instant::now();
        let claim = bounded(
            CALL,
            "a claim",
            store.claim(TENANT, &key, &fp, ClaimOptions::default()),
        )
        .await;
        let claim = match claim {
            Ok(c) => c,
            Err(e) if e.is_transient() => {
                sh.transient.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(RETRY).await;
                continue;
            }
            Err(e) => panic!("the claim of {key} failed, not transiently: {e}"),
        };
        let returned = Instant::now();
        sh.claims.lock().push((asked, returned));
        match claim {
            Claim::Completed(replay) => return Ok(replay.response.body),
            Claim::InProgress { retry_after } => {
                tokio::time::sleep(retry_after.min(Duration::from_millis(250))).await;
            }
            Claim::Acquired(lease) => {
                let first_answer = sh.answered.lock().insert(key.clone());
                if lease.is_takeover() && first_answer {
                    sh.unsent_takeovers.lock().push(key.clone());
                }
                sh.acquired.lock().push(Acquired {
                    instance,
                    fence: lease.fence(),
                    returned,
                });
                if asked.elapsed() >= LEASE {
                    // Not surely ours any more: run nothing; the key is taken over after the
                    // lease (by this client or a duplicate).
                    continue;
                }
                sh.charge(&key, &lease, returned);
                let receipt = Response::new(format!(
                    "receipt {key}: {} cents charged under fence {}",
                    amount(i),
                    lease.fence()
                ));
                if complete(store, &key, &lease, &receipt, sh, started).await? {
                    return Ok(receipt.body);
                }
                // Lost (taken over, or an earlier try stored it and its answer was lost): the
                // next claim replays what was stored.
            }
            other => panic!("the claim of {key} with its own fingerprint answered {other:?}"),
        }
    }
}

/// Asks `complete` until it is decided: `true` stored, `false` the lease was lost.
async fn complete(
    store: &AsyncStore,
    key: &str,
    lease: &Lease,
    receipt: &Response,
    sh: &Shared,
    started: Instant,
) -> Result<bool, String> {
    loop {
        if started.elapsed() > DEADLINE {
            return Err(key.to_string());
        }
        match bounded(CALL, "a completion", store.complete(lease, receipt.clone())).await {
            Ok(Ok(())) => {
                sh.completed.lock().insert((key.to_string(), lease.fence()));
                return Ok(true);
            }
            Ok(Err(lost)) => {
                sh.lost_leases.lock().push((key.to_string(), lost));
                return Ok(false);
            }
            Err(e) if e.is_transient() => {
                sh.transient.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(RETRY).await;
            }
            Err(e) => panic!("the completion of {key} failed, not transiently: {e}"),
        }
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Signed milliseconds from `a` to `b`.
fn signed_ms(a: Instant, b: Instant) -> i128 {
    if b >= a {
        (b - a).as_millis() as i128
    } else {
        -((a - b).as_millis() as i128)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_flushed_claims_on_a_sync_pair() {
    on_a_sync_pair(Claims::Flushed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_buffered_claims_the_default_on_a_sync_pair() {
    on_a_sync_pair(Claims::Buffered).await;
}

async fn open(url: &str, mode: Claims) -> AsyncStore {
    match mode {
        Claims::Flushed => lab::open(url, 4, LEASE).await,
        Claims::Buffered => lab::open_buffered(url, 4, LEASE).await,
    }
}

async fn on_a_sync_pair(mode: Claims) {
    let n = lab::size("IDEMDB_FAILOVER_PAYMENTS", 300);
    let lab = tokio::task::spawn_blocking(|| Lab::pair(true))
        .await
        .unwrap();
    let url = lab.url().to_string();
    let mut stores = vec![open(&url, mode).await];
    for _ in 1..INSTANCES {
        stores.push(open(&url, mode).await);
    }
    let stores = Arc::new(stores);
    let sh = Arc::new(Shared {
        claims_mode: mode,
        ..Shared::default()
    });

    // The probe: a lease taken before the failover, kept across it.
    let probe = match stores[0]
        .claim(
            TENANT,
            "probe",
            "probe",
            ClaimOptions::default().lease(Duration::from_secs(60)),
        )
        .await
        .unwrap()
    {
        Claim::Acquired(l) => l,
        other => panic!("the probe's first claim answered {other:?}"),
    };
    sh.acquired.lock().push(Acquired {
        instance: 0,
        fence: probe.fence(),
        returned: Instant::now(),
    });

    // The controller: kills the primary once a third of the payments were acknowledged, then
    // promotes the standby.
    let controller = {
        let (sh, lab) = (sh.clone(), lab.clone());
        tokio::spawn(async move {
            let third = n / 3;
            let waiting = Instant::now();
            while sh.acked.load(Ordering::SeqCst) < third {
                assert!(
                    waiting.elapsed() < DEADLINE,
                    "waited {DEADLINE:?} for a third of the payments ({third}) to be acknowledged \
                     before the kill; {} were",
                    sh.acked.load(Ordering::SeqCst)
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let kill_wall = SystemTime::now();
            sh.moments.kill_started.set(Instant::now()).unwrap();
            lab.blocking(|l| l.kill_primary()).await;
            sh.moments.kill_done.set(Instant::now()).unwrap();
            let promoted_at = lab.blocking(|l| l.promote()).await;
            sh.moments.promote_done.set(Instant::now()).unwrap();
            (kill_wall, promoted_at, sh.acked.load(Ordering::SeqCst))
        })
    };

    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for instance in 0..INSTANCES {
        for _ in 0..TASKS_PER_INSTANCE {
            let (stores, sh, next) = (stores.clone(), sh.clone(), next.clone());
            workers.push(tokio::spawn(async move {
                let mut unfinished = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n {
                        return unfinished;
                    }
                    tokio::time::sleep_until((started + PACE * i as u32).into()).await;
                    let answers = if i % 5 == 0 {
                        // A duplicate: the same payment from two clients at once, on two instances.
                        let other = (instance + 1) % INSTANCES;
                        let (a, b) = tokio::join!(
                            pay(&stores[instance], instance, i, &sh, started),
                            pay(&stores[other], other, i, &sh, started)
                        );
                        vec![a, b]
                    } else {
                        vec![pay(&stores[instance], instance, i, &sh, started).await]
                    };
                    let mut all = true;
                    for a in answers {
                        match a {
                            Ok(body) => sh.answers.lock().entry(key(i)).or_default().push(body),
                            Err(k) => {
                                all = false;
                                unfinished.push(k);
                            }
                        }
                    }
                    if all {
                        sh.acked.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }));
        }
    }
    let mut unfinished = Vec::new();
    for w in workers {
        unfinished.extend(
            w.await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())),
        );
    }
    let run_took = started.elapsed();
    unfinished.sort();
    unfinished.dedup();
    assert!(
        unfinished.is_empty(),
        "{} payments never finished within {DEADLINE:?} (client retries included): {unfinished:?}",
        unfinished.len()
    );
    let (kill_wall, promoted_at, acked_at_kill) = bounded(
        Duration::from_secs(300),
        "the kill and promotion",
        controller,
    )
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    let m = &sh.moments;
    let (kill_started, kill_done, promote_done) = (
        *m.kill_started.get().unwrap(),
        *m.kill_done.get().unwrap(),
        *m.promote_done.get().unwrap(),
    );
    assert!(
        acked_at_kill < n,
        "every payment was acknowledged before the kill finished: nothing was in flight"
    );

    // Recovery: the first claim sent after the old primary was gone that got an answer.
    let first = sh
        .claims
        .lock()
        .iter()
        .filter(|(asked, _)| *asked >= kill_done)
        .map(|(_, returned)| *returned)
        .min()
        .expect("a claim answered after the kill");
    let promoted_wall = SystemTime::UNIX_EPOCH + Duration::from_millis(promoted_at);
    println!(
        "synchronous failover: {n} payments in {run_took:?}; {acked_at_kill} acknowledged when \
         the kill finished; kill took {} ms, promotion {} ms (pg-lab saw it {} ms after the kill \
         started); first claim on the new primary {} ms after the kill started, {} ms after the \
         promotion finished",
        ms(kill_done - kill_started),
        ms(promote_done - kill_done),
        promoted_wall
            .duration_since(kill_wall)
            .map_or(0, |d| d.as_millis()),
        ms(first - kill_started),
        signed_ms(promote_done, first),
    );
    let lost_leases = sh.lost_leases.lock().clone();
    println!(
        "synchronous failover: {} transient errors retried by clients, {} takeovers ({} found \
         the payment already charged by a holder whose completion never arrived), {} leases \
         lost at completion: {lost_leases:?}",
        sh.transient.load(Ordering::Relaxed),
        sh.takeovers.load(Ordering::Relaxed),
        sh.found_charged.load(Ordering::Relaxed),
        lost_leases.len(),
    );

    let violations = sh.violations.lock().clone();
    assert!(violations.is_empty(), "lease violations: {violations:#?}");

    // A lost claim is released, not taken over (one client per payment: strictly).
    let mut released = 0;
    for store in stores.iter() {
        if let Ok(stats) = store.postgres_stats().await {
            released += stats.lost_claims_released;
        }
    }
    let unsent = sh.unsent_takeovers.lock().clone();
    let (twins, single): (Vec<&String>, Vec<&String>) = unsent.iter().partition(|k| {
        k.strip_prefix("pay-")
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|i| i % 5 == 0)
    });
    println!(
        "synchronous failover: {released} claims whose answer was lost released by their store; \
         takeovers of keys no client was answered Acquired for: {} of payments with one \
         client, {} of duplicated payments",
        single.len(),
        twins.len()
    );
    assert!(
        single.is_empty(),
        "keys taken over although no client had been answered Acquired (a lost claim's lease \
         was not released): {single:?}"
    );

    // Every payment charged exactly once; with buffered claims, once more for each claim the
    // failover lost, none of whose earlier holders was acknowledged.
    let refreshed = sh.refreshed.lock().clone();
    let completed = sh.completed.lock().clone();
    let mut again: HashMap<String, u32> = HashMap::new();
    for (k, fences) in &refreshed {
        *again.entry(k.clone()).or_insert(0) += 1;
        let acked: Vec<u64> = fences
            .iter()
            .copied()
            .filter(|f| completed.contains(&(k.clone(), *f)))
            .collect();
        assert!(
            acked.is_empty(),
            "{k}: acquired afresh after the failover although the completion of fence {acked:?} \
             was acknowledged: an acknowledged record was lost"
        );
    }
    println!(
        "synchronous failover ({mode:?} claims): {} payments ran again because the failover \
         lost their claim: {:?}",
        again.len(),
        refreshed.iter().map(|(k, _)| k).collect::<Vec<_>>()
    );
    let ledger = sh.ledger.lock().clone();
    let wrong: Vec<String> = (0..n)
        .filter(|&i| ledger.get(&key(i)) != Some(&(1 + again.get(&key(i)).unwrap_or(&0))))
        .map(|i| format!("{}: charged {:?} times", key(i), ledger.get(&key(i))))
        .collect();
    assert!(
        wrong.is_empty(),
        "payments not charged exactly once (plus once per claim the failover lost): {wrong:?}"
    );

    // Every client of a payment was answered the same receipt.
    let answers = sh.answers.lock().clone();
    for i in 0..n {
        let got = &answers[&key(i)];
        assert!(
            got.iter().all(|b| b == &got[0]),
            "{}: clients were answered different receipts: {:?}",
            key(i),
            got.iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect::<Vec<_>>()
        );
    }

    // The lease from before the failover is still the holder: its completion is accepted.
    let probe_receipt = Response::new(b"probe done".to_vec());
    let waiting = Instant::now();
    let probe_done = loop {
        match bounded(
            CALL,
            "the probe's completion",
            stores[0].complete(&probe, probe_receipt.clone()),
        )
        .await
        {
            Err(e) if e.is_transient() && waiting.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(RETRY).await;
            }
            other => break other,
        }
    };
    assert_eq!(
        probe_done.unwrap_or_else(|e| panic!("the probe's completion failed: {e}")),
        Ok(()),
        "a lease taken before the failover, whose claim was replicated synchronously, must still \
         complete after it (fence {:?})",
        split_fence(probe.fence())
    );

    // Fencing tokens: every one drawn after the promotion above every one drawn before the kill.
    let acquired = sh.acquired.lock().clone();
    let before: Vec<&Acquired> = acquired
        .iter()
        .filter(|a| a.returned < kill_started)
        .collect();
    let after: Vec<&Acquired> = acquired
        .iter()
        .filter(|a| a.returned > promote_done)
        .collect();
    assert!(
        !before.is_empty() && !after.is_empty(),
        "tokens on both sides of the failover: {} before, {} after",
        before.len(),
        after.len()
    );
    let max_before = before.iter().map(|a| a.fence).max().unwrap();
    let min_after = after.iter().map(|a| a.fence).min().unwrap();
    println!(
        "synchronous failover: {} tokens before the kill, highest {:?}; {} after the promotion, \
         lowest {:?} (timeline, sequence); {} in between left out",
        before.len(),
        split_fence(max_before),
        after.len(),
        split_fence(min_after),
        acquired.len() - before.len() - after.len()
    );
    assert!(
        min_after > max_before,
        "a token drawn after the failover ({min_after} = {:?}) is not above every token drawn \
         before it ({max_before} = {:?})",
        split_fence(min_after),
        split_fence(max_before)
    );
    let mut counted = 0;
    for (i, store) in stores.iter().enumerate() {
        let drew_before = before.iter().any(|a| a.instance == i);
        let drew_after = after.iter().any(|a| a.instance == i);
        let stats = bounded(CALL, "postgres_stats", store.postgres_stats())
            .await
            .unwrap();
        println!(
            "synchronous failover: instance {i}: drew tokens before {drew_before}, after \
             {drew_after}; failovers_seen {}, fencing_epoch {}",
            stats.failovers_seen, stats.fencing_epoch
        );
        if drew_before && drew_after {
            assert!(
                stats.failovers_seen >= 1,
                "instance {i} drew tokens on both sides of the failover but saw none: {stats:?}"
            );
            assert_eq!(stats.fencing_epoch, split_fence(min_after).0);
            counted += 1;
        }
    }
    assert!(
        counted >= 1,
        "no instance drew tokens on both sides of the failover"
    );
    drop(acquired);

    // A fresh store on the new primary, a lease after the last claim: every acknowledged
    // receipt is replayed as answered, and no key is still in progress.
    tokio::time::sleep(LEASE).await;
    let fresh = open(&url, mode).await;
    for i in 0..n {
        let got = bounded(
            CALL,
            "a replay",
            fresh.claim(TENANT, key(i), fingerprint(i), ClaimOptions::default()),
        )
        .await
        .unwrap_or_else(|e| panic!("the replay of {} failed: {e}", key(i)));
        match got {
            Claim::Completed(replay) => assert_eq!(
                replay.response.body,
                answers[&key(i)][0],
                "{}: the replay differs from what its client was answered",
                key(i)
            ),
            Claim::InProgress { retry_after } => panic!(
                "{} is still in progress (for {retry_after:?}) a lease after every payment \
                 finished: blocked past its lease",
                key(i)
            ),
            other => panic!(
                "{}: an acknowledged payment is not replayed after the failover: {other:?}",
                key(i)
            ),
        }
    }
    match fresh
        .claim(TENANT, "probe", "probe", ClaimOptions::default())
        .await
        .unwrap()
    {
        Claim::Completed(replay) => assert_eq!(replay.response, probe_receipt),
        other => panic!("the probe's completion is not replayed: {other:?}"),
    }
    drop((fresh, stores));
    tokio::task::spawn_blocking(move || drop(lab))
        .await
        .unwrap();
}
