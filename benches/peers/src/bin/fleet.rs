//! Fleet-mode comparison: idemdb on PostgreSQL (the async `AsyncStore`) against a hand-written
//! single-statement PostgreSQL recipe, the Redis `SET NX` recipe and the embedded store behind the
//! same async API, at 1, 4 and 16 concurrent tasks, printed as one Markdown table.
//!
//! ```text
//! cargo run --release -p idemdb-peers --bin fleet -- [--keys 3000] [--tasks 1,4,16] [--rounds 6]
//!     [--only pg,pg-flushed,pg-coalesce,pg-tier,recipe,recipe-select,redis,embedded,dbos]
//!     [--idemdb-options sslmode=disable]
//!     [--coalesce-in-flight N] [--pin SERVER_CORES:HARNESS_CORES] [--prefill N] [--expiring R]
//!     [--sweep-every S] [--smoke]
//! ```
//!
//! Workload per system and task count: N fresh keys split over the tasks, each a *claim* then a
//! *complete* (a 32-byte fingerprint, a 256-byte response), timed per key; then a *replay* of
//! every key as a duplicate would send it. The keys are measured in rounds (N / rounds keys per
//! system per round), and the systems take turns within each round in an order that rotates from
//! round to round, so that no system always runs first (on a cold table) or last, and a drift of
//! the machine (the disk's flush time, a checkpoint) falls on all of them alike. The speed-up
//! lines give the ratio of the pooled medians and the median of the per-round ratios. Round trips per operation: idemdb on PostgreSQL, claim
//! 1 + complete 1, replay 1; the hand-written recipe the same (one `INSERT ... ON CONFLICT DO
//! NOTHING` statement that also returns the existing row, one `UPDATE`); Redis `SET NX PX` + `SET
//! XX PX`, replay `SET NX` then `GET` (2); the embedded store none.
//!
//! PostgreSQL at 127.0.0.1:5432 (database `test`, user `postgres`, trust; `IDEMDB_BENCH_PG_URL`
//! names another, a `scripts/pg-lab pair` primary say), Redis at
//! 127.0.0.1:6379: a server that cannot be reached fails the run, naming it. idemdb, idemdb with a
//! replay tier and the recipe each use their own schema (created and dropped here), with
//! `synchronous_commit` as the server has it (stated in the output); one pooled connection per
//! task for each, up to 24. idemdb runs twice: one statement per call (the default, as the
//! recipe) and coalescing concurrent calls into one statement (`pg-coalesce`). `dbos` (only when
//! named in `--only`) is a DBOS workflow of one step per payment, run by `benches/dbos-peer` in a
//! process of its own (see [`Dbos`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemdb::{AsyncStore, Claim, ClaimOptions, Config, Durability, OnPostgres, Response};

#[path = "../fleet_common.rs"]
mod fleet_common;
use fleet_common::{pg_client, pg_err, quantile as pct, run_main, PG_URL, R};
#[path = "../pin.rs"]
mod pin;
#[path = "../server_cpu.rs"]
mod server_cpu;
use server_cpu::{postgres_cpu_ticks, TICK_US};
const REDIS_ADDR: &str = "127.0.0.1:6379";
const FP: [u8; 32] = [7; 32];
const RESP_LEN: usize = 256;

struct Settings {
    keys: usize,
    tasks: Vec<usize>,
    rounds: usize,
    /// Only these systems (all when empty): `pg` (the defaults: buffered claims), `pg-flushed`
    /// (`buffered_claims(false)`), `pg-coalesce` (the defaults and coalescing), `pg-tier` (the
    /// defaults and a replay tier), `recipe`, `recipe-select` (replays as a plain `SELECT`),
    /// `redis`, `embedded`, `dbos`.
    only: Vec<String>,
    /// URL options of idemdb's stores (`--idemdb-options`): plain TCP by default, as the
    /// recipe's client connects; `sslmode=require` measures TLS, `statement_mode=unnamed` the
    /// pooler mode.
    idem_opts: String,
    /// `--coalesce-in-flight N`: `Config::coalesce_in_flight` of `pg-coalesce` (the library's
    /// default when not given).
    in_flight: Option<usize>,
    /// `--prefill N`: each PostgreSQL system's table holds N live, completed rows before the
    /// measured rounds (the scale run), filled by one `INSERT ... SELECT` per table.
    prefill: u64,
    /// `--expiring R`: besides, rows that expire at R a second from the fill on, for 10
    /// minutes, and idemdb's stores run their sweeper (the sweeper's load during the run).
    expiring: u64,
    /// `--sweep-every S`: the sweeper's interval in seconds with `--expiring` (default 1; the
    /// library's default is 60).
    sweep_every: u64,
    /// `--pin SERVER:HARNESS`: PostgreSQL on the first cores, this process on the second
    /// (`pin.rs`); `None`: wherever the scheduler puts them.
    pin: Option<String>,
}

fn parse_args() -> R<Settings> {
    let mut s = Settings {
        keys: 3000,
        tasks: vec![1, 4, 16],
        rounds: 6,
        only: Vec::new(),
        idem_opts: "sslmode=disable".into(),
        in_flight: None,
        prefill: 0,
        expiring: 0,
        sweep_every: 1,
        pin: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--keys" => s.keys = value()?.parse().map_err(|e| format!("--keys: {e}"))?,
            "--tasks" => {
                s.tasks = value()?
                    .split(',')
                    .map(|t| t.parse().map_err(|e| format!("--tasks: {e}")))
                    .collect::<R<_>>()?
            }
            "--rounds" => {
                s.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?;
                if s.rounds == 0 {
                    return Err("--rounds must be at least 1".into());
                }
            }
            "--only" => {
                s.only = value()?.split(',').map(str::to_owned).collect();
                const KNOWN: [&str; 9] = [
                    "pg",
                    "pg-flushed",
                    "pg-coalesce",
                    "pg-tier",
                    "recipe",
                    "recipe-select",
                    "redis",
                    "embedded",
                    "dbos",
                ];
                if let Some(o) = s.only.iter().find(|o| !KNOWN.contains(&o.as_str())) {
                    return Err(format!(
                        "--only: no system {o} (one of {}; since issue 45 `pg` has buffered \
                         claims, the default, and `pg-buffered`/`pg-fast` are `pg`/`pg-coalesce`)",
                        KNOWN.join(",")
                    ));
                }
            }
            "--idemdb-options" => s.idem_opts = value()?,
            "--coalesce-in-flight" => {
                s.in_flight = Some(
                    value()?
                        .parse()
                        .map_err(|e| format!("--coalesce-in-flight: {e}"))?,
                )
            }
            "--prefill" => s.prefill = value()?.parse().map_err(|e| format!("--prefill: {e}"))?,
            "--expiring" => {
                s.expiring = value()?.parse().map_err(|e| format!("--expiring: {e}"))?
            }
            "--sweep-every" => {
                s.sweep_every = value()?
                    .parse()
                    .map_err(|e| format!("--sweep-every: {e}"))?
            }
            "--pin" => s.pin = Some(value()?),
            "--smoke" => {
                s.keys = 64;
                s.tasks = vec![1, 4];
                s.rounds = 2;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(s)
}

/// One system under test: claim+complete of a fresh key, and a replay of a completed one.
trait System: Send + Sync {
    fn claim_complete<'a>(&'a self, key: &'a str) -> BoxFut<'a>;
    fn replay<'a>(&'a self, key: &'a str) -> BoxFut<'a>;
    /// A system measured by a process of its own runs a whole phase there: its per-key
    /// latencies (µs) and wall time. `None`: the phase runs here, key by key.
    fn phase(&self, _keys: &[String], _tasks: usize, _replay: bool) -> Option<R<Measured>> {
        None
    }
}

/// A phase's per-key latencies (µs) and its wall time.
type Measured = (Vec<u64>, Duration);

type BoxFut<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = R<()>> + Send + 'a>>;

fn body() -> Vec<u8> {
    vec![42u8; RESP_LEN]
}

/// idemdb behind `AsyncStore` (on PostgreSQL, or embedded).
struct Idem(AsyncStore);

impl System for Idem {
    fn claim_complete<'a>(&'a self, key: &'a str) -> BoxFut<'a> {
        Box::pin(async move {
            let e = |e: idemdb::Error| e.to_string();
            match self
                .0
                .claim("t", key, FP, ClaimOptions::default())
                .await
                .map_err(e)?
            {
                Claim::Acquired(l) => self
                    .0
                    .complete(&l, Response::new(body()))
                    .await
                    .map_err(e)?
                    .map_err(|lost| format!("lost the lease: {lost:?}")),
                other => Err(format!("expected to acquire {key}, got {other:?}")),
            }
        })
    }

    fn replay<'a>(&'a self, key: &'a str) -> BoxFut<'a> {
        Box::pin(async move {
            match self.0.claim("t", key, FP, ClaimOptions::default()).await {
                Ok(Claim::Completed(r)) if r.response.body.len() == RESP_LEN => Ok(()),
                other => Err(format!("expected a replay of {key}, got {other:?}")),
            }
        })
    }
}

/// The hand-written recipe: one table, a claim that inserts a pending row or returns the
/// existing one in one statement, a completion that updates the pending row. No leases taken
/// over, no fencing, no expiry handling: the floor a careful team writes first.
struct HandPg {
    /// One connection per task, with its own prepared statements (claim, complete).
    clients: Vec<tokio::sync::Mutex<HandConn>>,
    next: std::sync::atomic::AtomicUsize,
}

struct HandConn {
    c: tokio_postgres::Client,
    claim: tokio_postgres::Statement,
    complete: tokio_postgres::Statement,
    /// A replay as a plain `SELECT` of the row (`recipe-select`): the floor a replay can reach.
    read: Option<tokio_postgres::Statement>,
}

/// The recipe's replay as a plain read of the key's row, for `recipe-select`.
const HAND_READ: &str = "SELECT false, state, fp, response FROM hand_requests WHERE key = $1";

/// The recipe's claim and completion, shared with the statement diagnostic (`sql/run`).
const HAND_CLAIM: &str = include_str!("../../sql/recipe_claim.sql");
const HAND_COMPLETE: &str = include_str!("../../sql/recipe_complete.sql");
const HAND_TABLE: &str = include_str!("../../sql/recipe_table.sql");

impl HandPg {
    /// `select_replay`: replays are a plain `SELECT` of the row instead of the claim statement.
    async fn connect(schema: &str, n: usize, select_replay: bool) -> R<HandPg> {
        pg_client(Some(schema))
            .await?
            .batch_execute(HAND_TABLE)
            .await
            .map_err(pg_err)?;
        let mut clients = Vec::new();
        for _ in 0..n {
            let c = pg_client(Some(schema)).await?;
            let claim = c.prepare(HAND_CLAIM).await.map_err(pg_err)?;
            let complete = c.prepare(HAND_COMPLETE).await.map_err(pg_err)?;
            let read = match select_replay {
                true => Some(c.prepare(HAND_READ).await.map_err(pg_err)?),
                false => None,
            };
            clients.push(tokio::sync::Mutex::new(HandConn {
                c,
                claim,
                complete,
                read,
            }));
        }
        Ok(HandPg {
            clients,
            next: Default::default(),
        })
    }

    async fn client(&self) -> tokio::sync::MutexGuard<'_, HandConn> {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.clients[i % self.clients.len()].lock().await
    }
}

impl System for HandPg {
    fn claim_complete<'a>(&'a self, key: &'a str) -> BoxFut<'a> {
        Box::pin(async move {
            let h = self.client().await;
            let row =
                h.c.query_one(&h.claim, &[&key, &&FP[..]])
                    .await
                    .map_err(pg_err)?;
            if !row.get::<_, bool>(0) {
                return Err(format!("hand recipe: {key} was not acquired"));
            }
            let n =
                h.c.execute(&h.complete, &[&key, &body()])
                    .await
                    .map_err(pg_err)?;
            if n == 1 {
                Ok(())
            } else {
                Err(format!("hand recipe: {key} was not completed"))
            }
        })
    }

    fn replay<'a>(&'a self, key: &'a str) -> BoxFut<'a> {
        Box::pin(async move {
            let h = self.client().await;
            let row = match &h.read {
                Some(read) => h.c.query_one(read, &[&key]).await,
                None => h.c.query_one(&h.claim, &[&key, &&FP[..]]).await,
            }
            .map_err(pg_err)?;
            let resp: Option<Vec<u8>> = row.get(3);
            match (row.get::<_, bool>(0), resp) {
                (false, Some(r)) if r.len() == RESP_LEN => Ok(()),
                _ => Err(format!("hand recipe: no replay of {key}")),
            }
        })
    }
}

/// The Redis recipe: `SET key pending NX PX 30000`, then `SET key response XX PX 86400000`;
/// a duplicate's `SET NX` fails and it reads the response with `GET`. One synchronous connection
/// per task, used on the blocking pool.
struct RedisRecipe {
    conns: Vec<Arc<std::sync::Mutex<redis::Connection>>>,
    next: std::sync::atomic::AtomicUsize,
    prefix: String,
}

impl RedisRecipe {
    fn connect(n: usize, prefix: String) -> R<RedisRecipe> {
        let mut conns = Vec::new();
        for _ in 0..n {
            let client = redis::Client::open(format!("redis://{REDIS_ADDR}/"))
                .map_err(|e| format!("Redis at {REDIS_ADDR}: {e}"))?;
            let c = client
                .get_connection_with_timeout(Duration::from_secs(1))
                .map_err(|e| format!("cannot connect to Redis at {REDIS_ADDR}: {e}"))?;
            conns.push(Arc::new(std::sync::Mutex::new(c)));
        }
        Ok(RedisRecipe {
            conns,
            next: Default::default(),
            prefix,
        })
    }

    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T> + Send + 'static,
    ) -> R<T> {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let c = self.conns[i % self.conns.len()].clone();
        tokio::task::spawn_blocking(move || {
            let mut c = c.lock().map_err(|_| "poisoned".to_string())?;
            f(&mut c).map_err(|e| format!("Redis at {REDIS_ADDR}: {e}"))
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

/// The recipe's claim, `SET key fingerprint NX PX 30000`: whether it took the key.
fn claim_nx(c: &mut redis::Connection, key: &str) -> redis::RedisResult<bool> {
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(&FP[..])
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query(c)?;
    Ok(set.is_some())
}

impl System for RedisRecipe {
    fn claim_complete<'a>(&'a self, key: &'a str) -> BoxFut<'a> {
        let k = format!("{}{key}", self.prefix);
        Box::pin(async move {
            let done = self
                .with(move |c| {
                    if !claim_nx(c, &k)? {
                        return Ok(false);
                    }
                    let _: Option<String> = redis::cmd("SET")
                        .arg(&k)
                        .arg(body())
                        .arg("XX")
                        .arg("PX")
                        .arg(86_400_000)
                        .query(c)?;
                    Ok(true)
                })
                .await?;
            if done {
                Ok(())
            } else {
                Err("Redis recipe: a fresh key was not acquired".into())
            }
        })
    }

    fn replay<'a>(&'a self, key: &'a str) -> BoxFut<'a> {
        let k = format!("{}{key}", self.prefix);
        Box::pin(async move {
            let got = self
                .with(move |c| {
                    if claim_nx(c, &k)? {
                        return Ok(None);
                    }
                    redis::cmd("GET").arg(&k).query::<Option<Vec<u8>>>(c)
                })
                .await?;
            match got {
                Some(r) if r.len() == RESP_LEN => Ok(()),
                _ => Err("Redis recipe: no replay".into()),
            }
        })
    }
}

/// DBOS Transact for Rust (the `dbos` crate): each payment a workflow of one step whose workflow
/// ID is the key, a replay the same workflow started again (DBOS answers it from its system
/// database without running the step). It runs in a process of its own, `benches/dbos-peer`
/// (its own crate, outside the workspace, so that neither the library nor this harness depends
/// on sqlx), driven over its stdin and stdout: `cc|rp <tasks> <prefix> <n>`, answered by `ok
/// <elapsed µs> <latency µs>...`.
struct Dbos {
    child: std::sync::Mutex<(
        std::process::Child,
        std::process::ChildStdin,
        std::io::BufReader<std::process::ChildStdout>,
    )>,
}

impl Dbos {
    /// Starts the peer: `IDEMDB_DBOS_PEER`, or its build in its own target directory.
    fn start() -> R<Dbos> {
        let path = std::env::var("IDEMDB_DBOS_PEER").unwrap_or_else(|_| {
            format!(
                "{}/.cache/idemdb-dbos-target/release/dbos-peer",
                std::env::var("HOME").unwrap_or_default()
            )
        });
        // A pool as large as the other systems' (the server's 100 connections hold them all).
        let mut child = std::process::Command::new(&path)
            .args(["--pool", "24"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start the DBOS peer {path} ({e}); build it with `cd \
                     benches/dbos-peer && CARGO_TARGET_DIR=$HOME/.cache/idemdb-dbos-target \
                     cargo build --release`"
                )
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the DBOS peer's pipes were not opened".into());
        };
        Ok(Dbos {
            child: std::sync::Mutex::new((child, stdin, std::io::BufReader::new(stdout))),
        })
    }
}

impl System for Dbos {
    fn claim_complete<'a>(&'a self, _key: &'a str) -> BoxFut<'a> {
        Box::pin(async { Err("the DBOS peer runs whole phases only".into()) })
    }

    fn replay<'a>(&'a self, _key: &'a str) -> BoxFut<'a> {
        Box::pin(async { Err("the DBOS peer runs whole phases only".into()) })
    }

    fn phase(&self, keys: &[String], tasks: usize, replay: bool) -> Option<R<Measured>> {
        use std::io::{BufRead, Write};
        let prefix = keys.first().and_then(|k| k.strip_suffix("-0"))?.to_string();
        if keys
            .iter()
            .enumerate()
            .any(|(i, k)| *k != format!("{prefix}-{i}"))
        {
            return Some(Err(format!("keys not of the form {prefix}-i")));
        }
        let run = || -> R<Measured> {
            let mut g = self.child.lock().map_err(|_| "DBOS peer lock poisoned")?;
            let (_, stdin, stdout) = &mut *g;
            let cmd = if replay { "rp" } else { "cc" };
            writeln!(stdin, "{cmd} {tasks} {prefix} {}", keys.len())
                .and_then(|()| stdin.flush())
                .map_err(|e| format!("DBOS peer: {e}"))?;
            let mut line = String::new();
            stdout
                .read_line(&mut line)
                .map_err(|e| format!("DBOS peer: {e}"))?;
            let mut words = line.split_whitespace();
            if words.next() != Some("ok") {
                return Err(format!("DBOS peer: {}", line.trim()));
            }
            let num = |w: &str| w.parse::<u64>().map_err(|e| format!("DBOS peer: {w}: {e}"));
            let elapsed = num(words.next().ok_or("DBOS peer: no elapsed time")?)?;
            let lat = words.map(num).collect::<R<Vec<u64>>>()?;
            if lat.len() != keys.len() {
                return Err(format!(
                    "DBOS peer: {} latencies for {} keys",
                    lat.len(),
                    keys.len()
                ));
            }
            Ok((lat, Duration::from_micros(elapsed)))
        };
        Some(run())
    }
}

impl Drop for Dbos {
    fn drop(&mut self) {
        use std::io::Write;
        if let Ok(g) = self.child.get_mut() {
            let _ = writeln!(g.1, "quit").and_then(|()| g.1.flush());
            let _ = g.0.wait();
        }
    }
}

/// Runs `op` over `keys`, split over `tasks` concurrent tasks; per-key latencies (µs) and the
/// wall time.
async fn run(
    sys: &Arc<dyn System>,
    keys: Arc<Vec<String>>,
    tasks: usize,
    replay: bool,
) -> R<Measured> {
    if let Some(m) = {
        let (sys, keys) = (sys.clone(), keys.clone());
        tokio::task::spawn_blocking(move || sys.phase(&keys, tasks, replay))
            .await
            .map_err(|e| e.to_string())?
    } {
        return m.map(|(mut lat, t)| {
            lat.sort_unstable();
            (lat, t)
        });
    }
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (sys, keys) = (sys.clone(), keys.clone());
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            for k in keys.iter().skip(t).step_by(tasks) {
                let t0 = Instant::now();
                if replay {
                    sys.replay(k).await?;
                } else {
                    sys.claim_complete(k).await?;
                }
                lat.push(t0.elapsed().as_micros() as u64);
            }
            Ok::<_, String>(lat)
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.map_err(|e| e.to_string())??);
    }
    all.sort_unstable();
    Ok((all, start.elapsed()))
}

struct Row {
    system: &'static str,
    tasks: usize,
    cc: (Vec<u64>, Duration),
    rp: (Vec<u64>, Duration),
    /// Per round: the median claim+complete and replay latency.
    rounds: Vec<(u64, u64)>,
    /// A PostgreSQL system's server cost of its measured claim+complete requests.
    server: Option<ServerCost>,
}

/// One system at one task count: its name, whether its replays are timed after a first replay of
/// each key (a replay tier is filled by a first replay, so the timed ones are its hits), and the
/// prefix of its keys.
struct Entry {
    name: &'static str,
    sys: Arc<dyn System>,
    fill: bool,
    prefix: String,
    /// A PostgreSQL system's table: its schema, and whether it is the recipe's.
    table: Option<(String, bool)>,
}

impl Entry {
    fn new(
        (_id, name): (&'static str, &'static str),
        sys: impl System + 'static,
        fill: bool,
        prefix: String,
    ) -> Entry {
        Entry {
            name,
            sys: Arc::new(sys),
            fill,
            prefix,
            table: None,
        }
    }

    /// The entry of a system whose rows live in `schema`'s table (`hand`: the recipe's).
    fn on_table(mut self, schema: &str, hand: bool) -> Entry {
        self.table = Some((schema.to_owned(), hand));
        self
    }
}

/// What the server did for a system's claim+complete requests (`Row::server`): WAL written,
/// CPU used by every `postgres` process on this machine, and the table's row and index changes.
#[derive(Default, Clone, Copy)]
struct ServerCost {
    /// The measured requests (WAL, CPU), and every claim+complete request of the table
    /// (warm-up included: the row counts).
    requests: u64,
    all_requests: u64,
    wal_bytes: u64,
    cpu_ticks: u64,
    inserted: u64,
    updated: u64,
    hot: u64,
    indexes: u64,
}

/// The server's WAL insert position in bytes.
async fn wal_position(c: &tokio_postgres::Client) -> R<u64> {
    let row = c
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint",
            &[],
        )
        .await
        .map_err(pg_err)?;
    Ok(row.get::<_, i64>(0).max(0) as u64)
}

/// A table's inserted, updated and HOT-updated rows so far, and its number of indexes. Read
/// after the systems' connections closed: a backend sends its statistics when it exits (an idle
/// one may hold them for 10 s).
async fn table_counts(c: &tokio_postgres::Client, schema: &str, hand: bool) -> R<[u64; 4]> {
    let table = if hand {
        "hand_requests"
    } else {
        "idemdb_requests"
    };
    let row = c
        .query_one(
            "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, \
             (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid) \
             FROM pg_stat_user_tables t WHERE schemaname = $1 AND relname = $2",
            &[&schema, &table],
        )
        .await
        .map_err(pg_err)?;
    Ok([0, 1, 2, 3].map(|i| row.get::<_, i64>(i).max(0) as u64))
}

/// Measures every entry in `rounds` rounds of `keys / rounds` fresh keys each, the entries taking
/// turns in an order that rotates every round, after a short warm-up of each on other keys
/// (connections, prepared statements, caches).
async fn measure_all(entries: Vec<Entry>, tasks: usize, keys: usize, rounds: usize) -> R<Vec<Row>> {
    let mut rows: Vec<Row> = entries
        .iter()
        .map(|e| Row {
            system: e.name,
            tasks,
            cc: (Vec::new(), Duration::ZERO),
            rp: (Vec::new(), Duration::ZERO),
            rounds: Vec::new(),
            server: e.table.as_ref().map(|_| ServerCost::default()),
        })
        .collect();
    for e in &entries {
        let warm: Arc<Vec<String>> = Arc::new(
            (0..tasks * 8)
                .map(|i| format!("{}-w{tasks}-{i}", e.prefix))
                .collect(),
        );
        run(&e.sys, warm, tasks, false).await?;
    }
    let pg = pg_client(None).await?;
    let per_round = (keys / rounds).max(1);
    for round in 0..rounds {
        for i in 0..entries.len() {
            let at = (i + round) % entries.len();
            let e = &entries[at];
            let ks: Arc<Vec<String>> = Arc::new(
                (0..per_round)
                    .map(|k| format!("{}-{tasks}-{round}-{k}", e.prefix))
                    .collect(),
            );
            let before = match e.table {
                Some(_) => Some((wal_position(&pg).await?, postgres_cpu_ticks())),
                None => None,
            };
            let cc = run(&e.sys, ks.clone(), tasks, false).await?;
            if let (Some((wal, cpu)), Some(server)) = (before, rows[at].server.as_mut()) {
                server.wal_bytes += wal_position(&pg).await?.saturating_sub(wal);
                server.cpu_ticks += postgres_cpu_ticks().saturating_sub(cpu);
                server.requests += cc.0.len() as u64;
            }
            if e.fill {
                run(&e.sys, ks.clone(), tasks, true).await?;
            }
            let rp = run(&e.sys, ks, tasks, true).await?;
            let row = &mut rows[at];
            row.rounds.push((pct(&cc.0, 0.5), pct(&rp.0, 0.5)));
            row.cc.0.extend(cc.0);
            row.cc.1 += cc.1;
            row.rp.0.extend(rp.0);
            row.rp.1 += rp.1;
        }
    }
    for r in &mut rows {
        r.cc.0.sort_unstable();
        r.rp.0.sort_unstable();
    }
    // Every claim+complete request, warm-up included: the tables' counts (`table_counts`) are
    // per request over all of them.
    for r in &mut rows {
        if let Some(server) = r.server.as_mut() {
            server.all_requests = (tasks * 8) as u64 + server.requests;
        }
    }
    Ok(rows)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Fills `schema`'s table with `live` completed rows that stay live for a day and `expiring`
/// completed rows of which `per_sec` expire each second from the fill on (`--prefill`,
/// `--expiring`), shaped as the measured ones (tenant `t`, 32-byte fingerprint, 256-byte
/// response); `hand`: the recipe's table. Then `VACUUM ANALYZE`, as a table in service would
/// have been. Prints how long it took and the table's size with its indexes per row.
async fn prefill(schema: &str, hand: bool, live: u64, expiring: u64, per_sec: u64) -> R<()> {
    let c = pg_client(Some(schema)).await?;
    let started = Instant::now();
    let fill = |n: u64, expiry: &str| match hand {
        true => format!(
            "INSERT INTO hand_requests (key, fp, state, lease_until, response) \
             SELECT 'pre-' || g || '-{expiry}', decode(repeat('07', 32), 'hex'), 1, now(), \
             decode(repeat('2a', 256), 'hex') FROM generate_series(1, {n}) g"
        ),
        false => format!(
            "INSERT INTO idemdb_requests (ns, tenant, key, fingerprint, created_at, expires_at, \
             fence, attempts, takeovers, state, lease_until, taken_over, finished_at, \
             response_body, response_meta) \
             SELECT 0, 't'::bytea, convert_to('pre-' || g, 'UTF8'), \
             decode(repeat('07', 32), 'hex'), t, {expiry}, g, 1, 0, 2, t, false, t, \
             decode(repeat('2a', 256), 'hex'), '{{}}'::text[] \
             FROM generate_series(1, {n}) g, \
             (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS t) now"
        ),
    };
    if live > 0 {
        c.batch_execute(&fill(live, "t + 86400000"))
            .await
            .map_err(pg_err)?;
    }
    if expiring > 0 && !hand {
        let expiry = format!("t + g::bigint * 1000 / {}", per_sec.max(1));
        let sql =
            fill(expiring, &expiry).replace("'pre-' || g", &format!("'pre-' || (g + {live})"));
        c.batch_execute(&sql).await.map_err(pg_err)?;
    }
    // As a table in service would be: vacuumed, analyzed, and the load's WAL checkpointed (so
    // that the measured rounds do not pay the bulk load's checkpoint).
    c.batch_execute("VACUUM ANALYZE").await.map_err(pg_err)?;
    c.batch_execute("CHECKPOINT").await.map_err(pg_err)?;
    let table = table_of(hand);
    let row = c
        .query_one(
            &format!(
                "SELECT pg_table_size('{table}')::bigint, pg_indexes_size('{table}')::bigint, \
                 (SELECT count(*) FROM {table})::bigint"
            ),
            &[],
        )
        .await
        .map_err(pg_err)?;
    let (heap, idx, rows): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    eprintln!(
        "prefill {schema}: {rows} rows in {:.0} s; table {} MB ({} bytes a row), indexes {} MB \
         ({} bytes a row)",
        started.elapsed().as_secs_f64(),
        heap >> 20,
        heap / rows.max(1),
        idx >> 20,
        idx / rows.max(1)
    );
    Ok(())
}

/// The request table of a schema: the recipe's (`hand`) or idemdb's.
fn table_of(hand: bool) -> &'static str {
    if hand {
        "hand_requests"
    } else {
        "idemdb_requests"
    }
}

/// After a prefilled run: the table's dead rows (the sweeper's deletes; completions are HOT
/// updates), and how long one `VACUUM` of them takes: what autovacuum must keep up with.
async fn vacuum_report(schema: &str, hand: bool) -> R<()> {
    let c = pg_client(Some(schema)).await?;
    let table = table_of(hand);
    let row = c
        .query_one(
            &format!(
                "SELECT n_live_tup, n_dead_tup, n_tup_del, n_tup_hot_upd, n_tup_upd \
                 FROM pg_stat_user_tables WHERE relname = '{table}' AND schemaname = '{schema}'"
            ),
            &[],
        )
        .await
        .map_err(pg_err)?;
    let (live, dead, del, hot, upd): (i64, i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    let started = Instant::now();
    c.batch_execute(&format!("VACUUM {table}"))
        .await
        .map_err(pg_err)?;
    eprintln!(
        "after the run, {schema}: {live} live rows, {dead} dead ({del} deleted by the sweeper, \
         {hot} of {upd} updates HOT); VACUUM took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn admin(sql: &str) -> R<()> {
    pg_client(None)
        .await?
        .batch_execute(sql)
        .await
        .map_err(pg_err)
}

async fn main_async(s: Settings) -> R<()> {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    // Held to the end of the run: dropping it gives every process every core again.
    let pinned = match &s.pin {
        Some(spec) => Some(pin::Pinned::new(spec).await?),
        None => None,
    };
    let run_id = format!("{:x}", std::process::id());
    // Each PostgreSQL system on a table of its own, so that none reads and writes a table
    // another one filled (a larger table costs more per statement).
    let schemas = [
        format!("fleet_idem_{run_id}"),
        format!("fleet_coalesce_{run_id}"),
        format!("fleet_tier_{run_id}"),
        format!("fleet_hand_{run_id}"),
        format!("fleet_flushed_{run_id}"),
        format!("fleet_hsel_{run_id}"),
    ];
    let [idem_schema, coalesce_schema, tier_schema, hand_schema, flushed_schema, hsel_schema] =
        &schemas;
    let sync_commit: String = pg_client(None)
        .await?
        .query_one("SHOW synchronous_commit", &[])
        .await
        .map_err(pg_err)?
        .get(0);
    let mut rows = Vec::new();
    for &tasks in &s.tasks {
        for schema in &schemas {
            admin(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
            ))
            .await?;
        }
        // One connection per task, up to 24 per system: the server's 100 connections hold
        // every system's pool at 64 tasks (more than 24 connections buy nothing on 2 cores).
        let conns = tasks.min(24);
        let want = |id: &str| s.only.is_empty() || s.only.iter().any(|o| o == id);
        // An idemdb store on PostgreSQL in `schema`, a pool of `conns`, no sweeper, the
        // configuration changed by `tune`.
        let idem_store = |schema: &str, tune: fn(Config<OnPostgres>) -> Config<OnPostgres>| {
            let cfg = Config::postgres(format!(
                "{PG_URL}?options=-c%20search_path%3D{schema}&{}",
                s.idem_opts
            ))
            .pool_size(conns)
            .sweep_interval((s.expiring > 0).then_some(Duration::from_secs(s.sweep_every)));
            let cfg = match s.in_flight {
                Some(n) => tune(cfg).coalesce_in_flight(n),
                None => tune(cfg),
            };
            async move { cfg.open_async().await.map_err(|e| e.to_string()) }
        };
        // Only the systems asked for are opened (the server's 100 connections hold five pools
        // of 24 at 64 tasks, not every system's).
        let mut entries = Vec::new();
        let mut coalescing_stores = Vec::new();
        // The PostgreSQL tables opened (schema, whether the recipe's), for `--prefill`.
        let mut tables: Vec<(&String, bool)> = Vec::new();
        // idemdb's stores on PostgreSQL: (id, name, schema, configuration, whether its replays
        // are timed after a first one fills its tier, key prefix).
        type Variant<'a> = (
            &'static str,
            &'static str,
            &'a String,
            fn(Config<OnPostgres>) -> Config<OnPostgres>,
            bool,
            &'static str,
        );
        let variants: [Variant; 4] = [
            ("pg", "idemdb on PostgreSQL", idem_schema, |c| c, false, ""),
            (
                "pg-flushed",
                "idemdb on PostgreSQL, flushed claims",
                flushed_schema,
                |c| c.buffered_claims(false),
                false,
                "b",
            ),
            (
                "pg-coalesce",
                "idemdb on PostgreSQL, coalescing",
                coalesce_schema,
                |c| c.coalescing(true),
                false,
                "s",
            ),
            (
                "pg-tier",
                "idemdb on PostgreSQL, replay tier",
                tier_schema,
                |c| c.replay_tier(64 << 20),
                true,
                "t",
            ),
        ];
        for (id, name, schema, tune, fill, suffix) in variants {
            if !want(id) {
                continue;
            }
            let store = idem_store(schema, tune).await?;
            tables.push((schema, false));
            if name.contains("coalescing") {
                coalescing_stores.push((name, store.clone()));
            }
            entries.push(
                Entry::new((id, name), Idem(store), fill, format!("{run_id}{suffix}"))
                    .on_table(schema, false),
            );
        }
        if want("recipe") {
            tables.push((hand_schema, true));
            entries.push(
                Entry::new(
                    ("recipe", "hand-written PostgreSQL recipe"),
                    HandPg::connect(hand_schema, conns, false).await?,
                    false,
                    run_id.clone(),
                )
                .on_table(hand_schema, true),
            );
        }
        if want("recipe-select") {
            tables.push((hsel_schema, true));
            entries.push(
                Entry::new(
                    (
                        "recipe-select",
                        "hand-written recipe, replay as a plain SELECT",
                    ),
                    HandPg::connect(hsel_schema, conns, true).await?,
                    false,
                    run_id.clone(),
                )
                .on_table(hsel_schema, true),
            );
        }
        if want("redis") {
            entries.push(Entry::new(
                ("redis", "Redis SET NX recipe"),
                RedisRecipe::connect(tasks, format!("idemdb-fleet-{run_id}-"))?,
                false,
                run_id.clone(),
            ));
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        if want("embedded") {
            let store = Config::new(dir.path())
                .durability(Durability::Buffered)
                .sweep_interval(None)
                .open_async()
                .await
                .map_err(|e| e.to_string())?;
            entries.push(Entry::new(
                ("embedded", "idemdb embedded (Buffered)"),
                Idem(store),
                false,
                run_id.clone(),
            ));
        }
        // The DBOS peer only when asked for by name: it is built outside the workspace.
        if s.only.iter().any(|o| o == "dbos") {
            entries.push(Entry::new(
                ("dbos", "DBOS workflow, one step"),
                Dbos::start()?,
                false,
                format!("{run_id}d"),
            ));
        }
        if s.prefill + s.expiring > 0 {
            for (schema, hand) in &tables {
                prefill(schema, *hand, s.prefill, s.expiring * 600, s.expiring).await?;
            }
        }
        let tables_of: Vec<Option<(String, bool)>> =
            entries.iter().map(|e| e.table.clone()).collect();
        // The tables' counts before the systems' requests: a prefill's rows are not theirs (its
        // connection has closed, so its statistics have arrived).
        if s.prefill + s.expiring > 0 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let mut base = Vec::new();
        {
            let pg = pg_client(None).await?;
            for table in &tables_of {
                base.push(match table {
                    Some((schema, hand)) => table_counts(&pg, schema, *hand).await?,
                    None => [0; 4],
                });
            }
        }
        let mut measured = measure_all(entries, tasks, s.keys, s.rounds).await?;
        if s.prefill + s.expiring > 0 {
            for (schema, hand) in &tables {
                vacuum_report(schema, *hand).await?;
            }
        }
        for (what, store) in coalescing_stores {
            let st = store.postgres_stats().await.map_err(|e| e.to_string())?;
            if st.coalesced_statements > 0 {
                eprintln!(
                    "{tasks} task(s): {what}, sent {} coalesced statements of {:.1} calls on \
                     average",
                    st.coalesced_statements,
                    st.coalesced_calls as f64 / st.coalesced_statements as f64
                );
            }
        }
        // Every system's connections are closed now: their backends sent their statistics.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pg = pg_client(None).await?;
        for ((table, base), r) in tables_of.iter().zip(&base).zip(&mut measured) {
            if let (Some((schema, hand)), Some(server)) = (table, r.server.as_mut()) {
                let [ins, upd, hot, indexes] = table_counts(&pg, schema, *hand).await?;
                server.inserted = ins.saturating_sub(base[0]);
                server.updated = upd.saturating_sub(base[1]);
                server.hot = hot.saturating_sub(base[2]);
                server.indexes = indexes;
            }
        }
        rows.extend(measured);
    }
    for schema in &schemas {
        admin(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await?;
    }
    println!(
        "fleet comparison: {} keys per row in {} interleaved rounds, PostgreSQL \
         synchronous_commit={sync_commit}, {} cores, {}",
        s.keys,
        s.rounds,
        cores,
        match &pinned {
            Some(p) => format!(
                "PostgreSQL pinned to cores {}, the harness to cores {}",
                p.server_cores, p.harness_cores
            ),
            None => "unpinned".into(),
        }
    );
    println!();
    println!("| system | tasks | claim+complete p50 µs | p99 µs | ops/s | replay p50 µs | p99 µs | ops/s |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let ops = |m: &(Vec<u64>, Duration)| m.0.len() as f64 / m.1.as_secs_f64();
        println!(
            "| {} | {} | {} | {} | {:.0} | {} | {} | {:.0} |",
            r.system,
            r.tasks,
            pct(&r.cc.0, 0.5),
            pct(&r.cc.0, 0.99),
            ops(&r.cc),
            pct(&r.rp.0, 0.5),
            pct(&r.rp.0, 0.99),
            ops(&r.rp)
        );
    }
    println!();
    println!(
        "What the server did per claim+complete request: WAL and CPU (of every `postgres` \
         process on this machine) in the measured rounds; rows and index entries (rows inserted \
         and non-HOT updates times the table's indexes) over every request, warm-up included:"
    );
    println!();
    println!("| system | tasks | WAL bytes | server CPU µs | rows inserted | rows updated | HOT % | index entries |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let Some(c) = r.server.filter(|c| c.requests > 0) else {
            continue;
        };
        let per = |v: u64| v as f64 / c.requests as f64;
        let per_all = |v: u64| v as f64 / c.all_requests.max(1) as f64;
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} |",
            r.system,
            r.tasks,
            per(c.wal_bytes),
            per(c.cpu_ticks) * TICK_US,
            per_all(c.inserted),
            per_all(c.updated),
            100.0 * c.hot as f64 / c.updated.max(1) as f64,
            per_all((c.inserted + c.updated.saturating_sub(c.hot)) * c.indexes),
        );
    }
    println!();
    for &tasks in &s.tasks {
        let row = |name: &str| rows.iter().find(|r| r.system == name && r.tasks == tasks);
        let p50 = |name: &str, replay: bool| {
            row(name).map_or(0.0, |r| {
                pct(if replay { &r.rp.0 } else { &r.cc.0 }, 0.5) as f64
            })
        };
        // The per-round ratios: round i of one against round i of the other.
        let per_round = |replay: bool| {
            let (Some(a), Some(b)) = (
                row("idemdb on PostgreSQL"),
                row("hand-written PostgreSQL recipe"),
            ) else {
                return 0.0;
            };
            let pick = |x: &(u64, u64)| if replay { x.1 } else { x.0 } as f64;
            median(
                a.rounds
                    .iter()
                    .zip(&b.rounds)
                    .map(|(x, y)| pick(x) / pick(y).max(1.0))
                    .collect(),
            )
        };
        println!(
            "{tasks} task(s): idemdb on PostgreSQL / hand-written recipe, median latency: \
             claim+complete {:.2}x (median of rounds {:.2}x), replay {:.2}x (median of rounds \
             {:.2}x)",
            p50("idemdb on PostgreSQL", false) / p50("hand-written PostgreSQL recipe", false),
            per_round(false),
            p50("idemdb on PostgreSQL", true) / p50("hand-written PostgreSQL recipe", true),
            per_round(true),
        );
        let tier = p50("idemdb on PostgreSQL, replay tier", true).max(1.0);
        println!(
            "{tasks} task(s): replay tier speed-up over a database replay (median latency): {:.0}x",
            p50("idemdb on PostgreSQL", true) / tier,
        );
        // Each idemdb store on PostgreSQL against the recipe: throughput and median latency,
        // and its replays' median against the recipe's plain `SELECT`.
        let ops = |m: &(Vec<u64>, Duration)| m.0.len() as f64 / m.1.as_secs_f64().max(1e-9);
        if let Some(hand) = row("hand-written PostgreSQL recipe") {
            for r in rows
                .iter()
                .filter(|r| r.tasks == tasks && r.system.starts_with("idemdb on PostgreSQL"))
            {
                let select = p50("hand-written recipe, replay as a plain SELECT", true);
                println!(
                    "{tasks} task(s): {} / recipe: claim+complete {:.2}x the ops/s at {:.2}x the \
                     p50; replay {:.2}x the ops/s at {:.2}x the p50{}",
                    r.system,
                    ops(&r.cc) / ops(&hand.cc),
                    pct(&r.cc.0, 0.5) as f64 / pct(&hand.cc.0, 0.5).max(1) as f64,
                    ops(&r.rp) / ops(&hand.rp),
                    pct(&r.rp.0, 0.5) as f64 / pct(&hand.rp.0, 0.5).max(1) as f64,
                    if select > 0.0 {
                        format!(
                            "; replay p50 {:.2}x the recipe's plain SELECT",
                            pct(&r.rp.0, 0.5) as f64 / select
                        )
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    run_main("fleet", parse_args, main_async)
}
