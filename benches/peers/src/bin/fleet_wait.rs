//! Duplicates that wait for the first request anywhere in the fleet (`ClaimOptions::wait`): how
//! soon a waiter on one instance answers after the holder on another completes, and what many
//! waiting duplicates cost the database, against the way a duplicate learns the outcome without
//! it: claiming again every `--poll-ms` (what the HTTP layer did before, and what a client told
//! `409` + `Retry-After` does, at a far shorter interval than `Retry-After`'s whole seconds).
//!
//! ```text
//! cargo run --release -p idemdb-peers --bin fleet_wait -- [--trials 300] [--waiters 1000] [--poll-ms 20] [--smoke]
//! ```
//!
//! Two stores on one PostgreSQL schema (`idemdb_bench_wait`, dropped at the end) play two
//! instances: A holds the leases, B's tasks are the duplicates.
//! - **Wake-up latency**, `--trials` times one after the other: A claims a new key, one task on B
//!   claims it too and waits (the timing starts once its mark is in the row, or, polling, after
//!   its first claim), A completes; the time from A's `complete` returning to B's claim
//!   answering (0 when it answered first: the notification is sent at the commit), and from
//!   A's call to B's answer. p50 and p99.
//! - **Load of waiting duplicates**: A claims `--waiters` keys, one waiter on B for each; once
//!   all wait (every row marked), the PostgreSQL server's CPU time (user + system of every
//!   `postgres` process, from `/proc`) over 5 s, and the statements the duplicates sent in that
//!   time (counted by the polling ones; the waiting ones send none by design, and the server's
//!   CPU shows whether that holds). Then A completes every key, and the time until every waiter
//!   answered with the stored response.
//!
//! Every answer is checked: a waiter that gets anything but the holder's response fails the run.
//! PostgreSQL at 127.0.0.1:5432 (database `test`, user `postgres`): a server that cannot be
//! reached fails the run, naming it. `--smoke` is `--trials 20 --waiters 50` with a 1 s window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemdb::{AsyncStore, Claim, ClaimOptions, Config, Response};

#[path = "../fleet_common.rs"]
mod fleet_common;
use fleet_common::{pg_client, pg_err, quantile, run_main, PG_URL, R};
#[path = "../server_cpu.rs"]
mod server_cpu;
use server_cpu::{postgres_cpu_ticks, TICK_US};

const SCHEMA: &str = "idemdb_bench_wait";
const FP: [u8; 32] = [7; 32];
const BOUND: Duration = Duration::from_secs(60);

struct Settings {
    trials: usize,
    waiters: usize,
    poll: Duration,
    window: Duration,
}

fn parse_args() -> R<Settings> {
    let mut s = Settings {
        trials: 300,
        waiters: 1000,
        poll: Duration::from_millis(20),
        window: Duration::from_secs(5),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> R<u64> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{what} takes a whole number"))
        };
        match a.as_str() {
            "--trials" => s.trials = num("--trials")?.max(1) as usize,
            "--waiters" => s.waiters = num("--waiters")?.max(1) as usize,
            "--poll-ms" => s.poll = Duration::from_millis(num("--poll-ms")?.max(1)),
            "--smoke" => {
                s.trials = 20;
                s.waiters = 50;
                s.window = Duration::from_secs(1);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(s)
}

#[derive(Clone, Copy, PartialEq)]
enum How {
    Wait,
    Poll(Duration),
}

impl How {
    fn name(self) -> String {
        match self {
            How::Wait => "idemdb, waiting (LISTEN/NOTIFY)".into(),
            How::Poll(d) => format!("idemdb, claiming again every {} ms", d.as_millis()),
        }
    }
}

/// One duplicate: claims until it gets an answer other than `InProgress`; the statements it
/// sent (polling only; a waiting claim's are the store's own) and when it answered.
async fn duplicate(b: AsyncStore, key: String, how: How, sent: Arc<AtomicU64>) -> R<Instant> {
    let opts = ClaimOptions::default().lease(BOUND);
    let deadline = Instant::now() + BOUND;
    loop {
        let claim = match how {
            How::Wait => b.claim("bench", &key, FP, opts.wait(BOUND)).await,
            How::Poll(_) => {
                sent.fetch_add(1, Ordering::Relaxed);
                b.claim("bench", &key, FP, opts).await
            }
        }
        .map_err(|e| format!("a duplicate's claim: {e}"))?;
        match (claim, how) {
            (Claim::Completed(r), _) if r.response.body == key.as_bytes() => {
                return Ok(Instant::now())
            }
            (Claim::InProgress { .. }, How::Poll(every)) if Instant::now() < deadline => {
                tokio::time::sleep(every).await;
            }
            (other, _) => {
                return Err(format!(
                    "a duplicate of {key} got {other:?}, not the holder's response"
                ))
            }
        }
    }
}

/// Until `n` rows are marked waiting (at most 60 s).
async fn until_marked(admin: &tokio_postgres::Client, n: i64) -> R<()> {
    let since = Instant::now();
    loop {
        let row = admin
            .query_one(
                &format!("SELECT count(*) FROM {SCHEMA}.idemdb_requests WHERE waiting"),
                &[],
            )
            .await
            .map_err(pg_err)?;
        if row.get::<_, i64>(0) >= n {
            return Ok(());
        }
        if since.elapsed() > Duration::from_secs(60) {
            return Err(format!("waited 60 s for {n} waiters to mark their rows"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn held(a: &AsyncStore, key: &str) -> R<idemdb::Lease> {
    match a
        .claim("bench", key, FP, ClaimOptions::default().lease(BOUND))
        .await
        .map_err(|e| format!("the holder's claim: {e}"))?
    {
        Claim::Acquired(l) => Ok(l),
        other => Err(format!("the holder's claim of {key} got {other:?}")),
    }
}

async fn complete(a: &AsyncStore, lease: &idemdb::Lease, key: &str) -> R<()> {
    a.complete(lease, Response::new(key.as_bytes().to_vec()))
        .await
        .map_err(|e| format!("the holder's completion: {e}"))?
        .map_err(|e| format!("the holder lost its lease: {e:?}"))
}

/// Wake-up latency, one waiter at a time: (after the completion returned, after it was called)
/// in microseconds.
async fn latency(
    a: &AsyncStore,
    b: &AsyncStore,
    admin: &tokio_postgres::Client,
    how: How,
    trials: usize,
    tag: &str,
) -> R<(Vec<u64>, Vec<u64>)> {
    let (mut after_return, mut after_call) = (Vec::new(), Vec::new());
    for i in 0..trials {
        let key = format!("{tag}-lat-{i}");
        let lease = held(a, &key).await?;
        let sent = Arc::new(AtomicU64::new(0));
        let waiter = tokio::spawn(duplicate(b.clone(), key.clone(), how, sent.clone()));
        match how {
            How::Wait => until_marked(admin, 1).await?,
            How::Poll(_) => {
                while sent.load(Ordering::Relaxed) == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
        let called = Instant::now();
        complete(a, &lease, &key).await?;
        let returned = Instant::now();
        let answered = waiter.await.map_err(|e| e.to_string())??;
        after_return.push(answered.saturating_duration_since(returned).as_micros() as u64);
        after_call.push(answered.saturating_duration_since(called).as_micros() as u64);
    }
    after_return.sort_unstable();
    after_call.sort_unstable();
    Ok((after_return, after_call))
}

struct Load {
    server_cpu_ms_per_s: f64,
    statements_per_s: f64,
    all_answered: Duration,
}

/// `n` waiting duplicates: the server's CPU and the duplicates' statements while they wait,
/// then the time for all to answer once every key completes.
async fn load(
    a: &AsyncStore,
    b: &AsyncStore,
    admin: &tokio_postgres::Client,
    how: How,
    n: usize,
    window: Duration,
    tag: &str,
) -> R<Load> {
    let mut leases = Vec::new();
    for i in 0..n {
        let key = format!("{tag}-load-{i}");
        leases.push((held(a, &key).await?, key));
    }
    let sent = Arc::new(AtomicU64::new(0));
    let waiters: Vec<_> = leases
        .iter()
        .map(|(_, key)| tokio::spawn(duplicate(b.clone(), key.clone(), how, sent.clone())))
        .collect();
    match how {
        How::Wait => until_marked(admin, n as i64).await?,
        How::Poll(_) => tokio::time::sleep(Duration::from_secs(1)).await,
    }
    let (ticks0, sent0, t0) = (
        postgres_cpu_ticks(),
        sent.load(Ordering::Relaxed),
        Instant::now(),
    );
    tokio::time::sleep(window).await;
    let (ticks1, sent1, secs) = (
        postgres_cpu_ticks(),
        sent.load(Ordering::Relaxed),
        t0.elapsed().as_secs_f64(),
    );
    let started = Instant::now();
    for (lease, key) in &leases {
        complete(a, lease, key).await?;
    }
    for w in waiters {
        w.await.map_err(|e| e.to_string())??;
    }
    Ok(Load {
        server_cpu_ms_per_s: (ticks1.saturating_sub(ticks0) as f64 * TICK_US / 1000.0) / secs,
        statements_per_s: (sent1 - sent0) as f64 / secs,
        all_answered: started.elapsed(),
    })
}

async fn measure(s: &Settings) -> R<()> {
    let url = format!("{PG_URL}?options=-c%20search_path%3D{SCHEMA}");
    let open = || async {
        Config::postgres(url.clone())
            .pool_size(16)
            .sweep_interval(None)
            .open_async()
            .await
            .map_err(|e| format!("idemdb on PostgreSQL at {PG_URL}: {e}"))
    };
    let (a, b) = (open().await?, open().await?);
    let admin = pg_client(None).await?;
    let hows = [How::Wait, How::Poll(s.poll)];
    println!("| duplicates | wake-up p50 µs | p99 µs | from the call p50 µs | p99 µs |");
    println!("|---|---|---|---|---|");
    for (i, how) in hows.iter().enumerate() {
        let (r, c) = latency(&a, &b, &admin, *how, s.trials, &format!("h{i}")).await?;
        println!(
            "| {} | {} | {} | {} | {} |",
            how.name(),
            quantile(&r, 0.5),
            quantile(&r, 0.99),
            quantile(&c, 0.5),
            quantile(&c, 0.99)
        );
    }
    println!();
    println!(
        "| {} duplicates waiting | server CPU ms/s while they wait | their statements/s | all answered after the completions |",
        s.waiters
    );
    println!("|---|---|---|---|");
    for (i, how) in hows.iter().enumerate() {
        let l = load(&a, &b, &admin, *how, s.waiters, s.window, &format!("h{i}")).await?;
        println!(
            "| {} | {:.1} | {:.0} | {:.0} ms |",
            how.name(),
            l.server_cpu_ms_per_s,
            l.statements_per_s,
            l.all_answered.as_secs_f64() * 1000.0
        );
    }
    Ok(())
}

async fn main_async(s: Settings) -> R<()> {
    let admin = pg_client(None).await?;
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}"
        ))
        .await
        .map_err(pg_err)?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "fleet waits: {} wake-up trials, {} waiting duplicates, polling every {} ms; \
         {cores} cores; PostgreSQL at {PG_URL}",
        s.trials,
        s.waiters,
        s.poll.as_millis()
    );
    println!();
    let measured = measure(&s).await;
    let dropped = admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        .await
        .map_err(pg_err);
    measured?;
    dropped
}

fn main() -> std::process::ExitCode {
    run_main("fleet_wait", parse_args, main_async)
}
