//! Per-operation latency of idemdb behind its async API (`AsyncStore`): the store on PostgreSQL
//! against the embedded store with `Durability::Buffered` and with `Durability::Synced`, for six
//! operations, at each task count, printed as one Markdown table (p50 and p99 in microseconds,
//! ops/s) followed by the ratio of PostgreSQL's median to the embedded Synced store's median.
//!
//! ```text
//! cargo run --release -p idemdb-peers --bin fleet_ops -- [--keys 2000] [--tasks 1,4] [--rounds 4] [--smoke]
//! ```
//!
//! `--keys N` is the number of timed calls per operation, system and task count, split over the
//! tasks (each its own tokio task, the calls of one task one after the other); `--smoke` is
//! `--keys 40 --tasks 1,2 --rounds 1`, a check that every operation answers as expected (any other
//! answer fails the run with a message and a non-zero exit status, in any mode).
//!
//! The operations, each on ids and keys never used before (nothing is a replay or a duplicate):
//!
//! | operation | set-up, not timed | timed call(s), expected answer | PostgreSQL round trips |
//! |---|---|---|---|
//! | entity CAS | `put_entity(Expect::Absent)` | `put_entity(Expect::Version(1))`, version 2 | 1 |
//! | update_entity | `put_entity(Expect::Absent)` | `update_entity` (read, then a conditional write), version 2 | 2 |
//! | consumer begin+complete | none | `begin` (`Begin::Process`) then `complete` | 2 |
//! | commit (entity + lease) | `claim` (`Claim::Acquired`) | `commit().put(Expect::Absent).complete(lease).apply()` | 2 (`BEGIN`, entity and lease pipelined; `COMMIT`) |
//! | reserve | none | `reserve("email", [id], owner)`, `Reservation::Reserved` | 1 |
//! | offset mark | none | `mark_processed(group, "topic", task index, next offset)` | 1 |
//!
//! The embedded store makes no round trip: each call is a RocksDB write (synced to the device
//! with `Synced`) run on the blocking pool.
//!
//! Each call is timed on its own with `Instant`; the samples of all tasks are pooled; ops/s is
//! the number of timed calls over the wall time of the timed phases (set-up excluded). The calls
//! are measured in rounds (N / rounds per round), and within each round every operation is run
//! on each system in turn, in an order that rotates from round to round, so that no system always
//! runs first or last and a drift of the machine falls on all of them alike. Before the rounds,
//! each system runs a few calls of every operation on other ids (connections, prepared
//! statements, caches).
//!
//! PostgreSQL at 127.0.0.1:5432 (database `test`, user `postgres`, trust): a server that cannot
//! be reached fails the run, naming it. idemdb's tables live in the schema `idemdb_bench_ops`,
//! created (after dropping any left over) at the start and dropped at the end; the store has one
//! pooled connection per task and no sweeper; `synchronous_commit` is as the server has it
//! (stated in the output, with the number of cores).

use std::time::{Duration, Instant};

use idemdb::{
    AsyncStore, Begin, Claim, ClaimOptions, Config, ConsumerOptions, Durability, Expect, Lease,
    Reservation, Response, UpdateOptions, Versioned,
};

#[path = "../fleet_common.rs"]
mod fleet_common;
use fleet_common::{pg_client, pg_err, quantile, run_main, PG_URL, R};
const SCHEMA: &str = "idemdb_bench_ops";
const TENANT: &str = "bench";
const FP: [u8; 32] = [7; 32];
const VALUE_LEN: usize = 128;
const RESPONSE_LEN: usize = 64;

const PG: &str = "idemdb on PostgreSQL";
const BUFFERED: &str = "idemdb embedded (Buffered)";
const SYNCED: &str = "idemdb embedded (Synced)";

struct Settings {
    keys: usize,
    tasks: Vec<usize>,
    rounds: usize,
}

fn parse_args() -> R<Settings> {
    let mut s = Settings {
        keys: 2000,
        tasks: vec![1, 4],
        rounds: 4,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut next = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--keys" => {
                s.keys = next()?.parse().map_err(|e| format!("--keys: {e}"))?;
                if s.keys == 0 {
                    return Err("--keys must be at least 1".into());
                }
            }
            "--tasks" => {
                s.tasks = next()?
                    .split(',')
                    .map(|t| match t.trim().parse::<usize>() {
                        Ok(0) => Err("--tasks: a task count must be at least 1".to_string()),
                        Ok(n) => Ok(n),
                        Err(e) => Err(format!("--tasks: {e}")),
                    })
                    .collect::<R<_>>()?
            }
            "--rounds" => {
                s.rounds = next()?.parse().map_err(|e| format!("--rounds: {e}"))?;
                if s.rounds == 0 {
                    return Err("--rounds must be at least 1".into());
                }
            }
            "--smoke" => {
                s.keys = 40;
                s.tasks = vec![1, 2];
                s.rounds = 1;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(s)
}

/// The operations measured, in the order they are run and printed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    EntityCas,
    Update,
    Consumer,
    Commit,
    Reserve,
    Offset,
}

const OPS: [Op; 6] = [
    Op::EntityCas,
    Op::Update,
    Op::Consumer,
    Op::Commit,
    Op::Reserve,
    Op::Offset,
];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::EntityCas => "entity CAS",
            Op::Update => "update_entity",
            Op::Consumer => "consumer begin+complete",
            Op::Commit => "commit (entity + lease)",
            Op::Reserve => "reserve",
            Op::Offset => "offset mark",
        }
    }

    /// The prefix of this operation's ids, so that no two operations share one.
    fn tag(self) -> &'static str {
        match self {
            Op::EntityCas => "cas",
            Op::Update => "upd",
            Op::Consumer => "msg",
            Op::Commit => "req",
            Op::Reserve => "mail",
            Op::Offset => "off",
        }
    }
}

/// What the set-up of one id left for its timed call.
enum Prep {
    Nothing,
    Lease(Lease),
}

fn first_value() -> Vec<u8> {
    vec![42; VALUE_LEN]
}

fn second_value() -> Vec<u8> {
    vec![43; VALUE_LEN]
}

fn response() -> Response {
    Response::new(vec![0u8; RESPONSE_LEN])
}

fn store_err(e: idemdb::Error) -> String {
    e.to_string()
}

/// The untimed part of `op` for `id`.
async fn set_up(store: &AsyncStore, op: Op, id: &str) -> R<Prep> {
    match op {
        Op::EntityCas | Op::Update => {
            match store
                .put_entity(TENANT, id, Expect::Absent, first_value())
                .await
                .map_err(store_err)?
            {
                Ok(1) => Ok(Prep::Nothing),
                other => Err(format!(
                    "first write of {id}: expected version 1, got {other:?}"
                )),
            }
        }
        Op::Commit => match store
            .claim(TENANT, id, FP, ClaimOptions::default())
            .await
            .map_err(store_err)?
        {
            Claim::Acquired(lease) => Ok(Prep::Lease(lease)),
            other => Err(format!("claim of {id}: expected Acquired, got {other:?}")),
        },
        Op::Consumer | Op::Reserve | Op::Offset => Ok(Prep::Nothing),
    }
}

/// Where the offset marks of one task go: its group (one per task count, so that every run
/// starts on empty partitions), its partition and its next offset.
struct OffsetSlot {
    group: String,
    partition: u32,
    offset: u64,
}

/// The timed part of `op` for `id`: `Ok` only for the expected answer.
async fn timed(store: &AsyncStore, op: Op, id: &str, prep: Prep, slot: &OffsetSlot) -> R<()> {
    match (op, prep) {
        (Op::EntityCas, _) => match store
            .put_entity(TENANT, id, Expect::Version(1), second_value())
            .await
            .map_err(store_err)?
        {
            Ok(2) => Ok(()),
            other => Err(format!("expected version 2, got {other:?}")),
        },
        (Op::Update, _) => {
            let bump = |cur: Option<&[u8]>| -> Option<Vec<u8>> {
                Some(
                    cur.unwrap_or_default()
                        .iter()
                        .map(|b| b.wrapping_add(1))
                        .collect(),
                )
            };
            match store
                .update_entity(TENANT, id, UpdateOptions::default(), bump)
                .await
                .map_err(store_err)?
            {
                Some(Versioned { value, version: 2 }) if value == second_value() => Ok(()),
                other => Err(format!(
                    "expected version 2 of the bumped value, got {other:?}"
                )),
            }
        }
        (Op::Consumer, _) => {
            let lease = match store
                .begin("consumers", id, ConsumerOptions::default())
                .await
                .map_err(store_err)?
            {
                Begin::Process(lease) => lease,
                other => return Err(format!("begin: expected Process, got {other:?}")),
            };
            store
                .complete(&lease, response())
                .await
                .map_err(store_err)?
                .map_err(|lost| format!("complete: lost the lease: {lost:?}"))
        }
        (Op::Commit, Prep::Lease(lease)) => {
            match store
                .commit()
                .put(TENANT, format!("order-{id}"), Expect::Absent, first_value())
                .complete(&lease, response())
                .apply()
                .await
                .map_err(store_err)?
            {
                Ok(c) if c.versions == [Some(1), None] => Ok(()),
                other => Err(format!(
                    "expected a commit of version 1 and the lease, got {other:?}"
                )),
            }
        }
        (Op::Commit, Prep::Nothing) => Err("commit: the set-up left no lease".into()),
        (Op::Reserve, _) => match store
            .reserve("email", &[id.as_bytes()], "owner")
            .await
            .map_err(store_err)?
        {
            Reservation::Reserved => Ok(()),
            other => Err(format!("expected Reserved, got {other:?}")),
        },
        (Op::Offset, _) => store
            .mark_processed(&slot.group, "topic", slot.partition, slot.offset)
            .await
            .map_err(store_err),
    }
}

/// The ids of task `t` of `tasks`: every `tasks`-th id from the `t`-th.
fn share(ids: &[String], t: usize, tasks: usize) -> Vec<String> {
    ids.iter().skip(t).step_by(tasks).cloned().collect()
}

/// One phase: the set-up of every id, then the timed calls, both over `tasks` concurrent tasks
/// (task `t` takes every `tasks`-th id from the `t`-th). Offset marks of task `t` go to
/// partition `t` of `group`, from offset `round * (its ids per round)` on, so that the rounds
/// continue each partition without a gap. The per-call latencies (ns) and the timed wall time.
async fn phase(
    store: &AsyncStore,
    op: Op,
    ids: &[String],
    tasks: usize,
    group: &str,
    round: u64,
) -> R<(Vec<u64>, Duration)> {
    let mut set_ups = Vec::new();
    for t in 0..tasks {
        let (store, mine) = (store.clone(), share(ids, t, tasks));
        set_ups.push(tokio::spawn(async move {
            let mut preps = Vec::with_capacity(mine.len());
            for id in &mine {
                preps.push(
                    set_up(&store, op, id)
                        .await
                        .map_err(|e| format!("set-up: {e}"))?,
                );
            }
            Ok::<_, String>((mine, preps))
        }));
    }
    let mut work = Vec::new();
    for h in set_ups {
        work.push(h.await.map_err(|e| e.to_string())??);
    }
    let start = Instant::now();
    let mut runs = Vec::new();
    for (t, (mine, preps)) in work.into_iter().enumerate() {
        let store = store.clone();
        let mut slot = OffsetSlot {
            group: group.to_string(),
            partition: t as u32,
            offset: round * mine.len() as u64,
        };
        runs.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(mine.len());
            for (id, prep) in mine.iter().zip(preps) {
                let t0 = Instant::now();
                timed(&store, op, id, prep, &slot)
                    .await
                    .map_err(|e| format!("{id}: {e}"))?;
                lat.push(t0.elapsed().as_nanos() as u64);
                slot.offset += 1;
            }
            Ok::<_, String>(lat)
        }));
    }
    let mut all = Vec::new();
    for h in runs {
        all.extend(h.await.map_err(|e| e.to_string())??);
    }
    Ok((all, start.elapsed()))
}

/// The pooled samples of one operation on one system at one task count.
struct Row {
    op: Op,
    system: &'static str,
    tasks: usize,
    ns: Vec<u64>,
    wall: Duration,
}

impl Row {
    fn p50_us(&self) -> f64 {
        quantile(&self.ns, 0.5) as f64 / 1e3
    }
    fn p99_us(&self) -> f64 {
        quantile(&self.ns, 0.99) as f64 / 1e3
    }
    fn ops_per_s(&self) -> f64 {
        self.ns.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Every operation on every system at one task count: a warm-up, then `rounds` rounds of
/// `keys / rounds` fresh ids per operation and system, the systems taking turns in an order that
/// rotates every round.
async fn measure(
    systems: &[(&'static str, AsyncStore)],
    tasks: usize,
    keys: usize,
    rounds: usize,
) -> R<Vec<Row>> {
    let mut rows = Vec::new();
    for op in OPS {
        for (name, _) in systems {
            rows.push(Row {
                op,
                system: name,
                tasks,
                ns: Vec::new(),
                wall: Duration::ZERO,
            });
        }
    }
    let warm_group = format!("warm-{tasks}");
    for (name, store) in systems {
        for op in OPS {
            let ids: Vec<String> = (0..tasks * 4)
                .map(|k| format!("{}-w{tasks}-{k}", op.tag()))
                .collect();
            phase(store, op, &ids, tasks, &warm_group, 0)
                .await
                .map_err(|e| format!("{name}, {} (warm-up): {e}", op.name()))?;
        }
    }
    let group = format!("bench-{tasks}");
    let per_round = (keys / rounds).max(1);
    for round in 0..rounds {
        for (o, op) in OPS.into_iter().enumerate() {
            let ids: Vec<String> = (0..per_round)
                .map(|k| format!("{}-{tasks}-{round}-{k}", op.tag()))
                .collect();
            for i in 0..systems.len() {
                let at = (i + round) % systems.len();
                let (name, store) = &systems[at];
                let (ns, wall) = phase(store, op, &ids, tasks, &group, round as u64)
                    .await
                    .map_err(|e| format!("{name}, {}, {tasks} task(s): {e}", op.name()))?;
                let row = &mut rows[o * systems.len() + at];
                row.ns.extend(ns);
                row.wall += wall;
            }
        }
    }
    for r in &mut rows {
        r.ns.sort_unstable();
    }
    Ok(rows)
}

async fn show(c: &tokio_postgres::Client, setting: &str) -> R<String> {
    Ok(c.query_one(&format!("SHOW {setting}"), &[])
        .await
        .map_err(pg_err)?
        .get(0))
}

/// Opens the three systems for `tasks` concurrent tasks (the embedded ones in `dirs`).
async fn open_systems(
    tasks: usize,
    dirs: &(tempfile::TempDir, tempfile::TempDir),
) -> R<Vec<(&'static str, AsyncStore)>> {
    let pg = Config::postgres(format!("{PG_URL}?options=-c%20search_path%3D{SCHEMA}"))
        .pool_size(tasks)
        .sweep_interval(None)
        .open_async()
        .await
        .map_err(|e| format!("{PG} at {PG_URL}: {e}"))?;
    let mut systems = vec![(PG, pg)];
    for (name, dir, durability) in [
        (BUFFERED, &dirs.0, Durability::Buffered),
        (SYNCED, &dirs.1, Durability::Synced),
    ] {
        let store = Config::new(dir.path())
            .durability(durability)
            .sweep_interval(None)
            .open_async()
            .await
            .map_err(|e| format!("{name} in {}: {e}", dir.path().display()))?;
        systems.push((name, store));
    }
    Ok(systems)
}

async fn measure_all(s: &Settings) -> R<Vec<Row>> {
    let mut rows = Vec::new();
    for &tasks in &s.tasks {
        let tmp = || tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"));
        let dirs = (tmp()?, tmp()?);
        let systems = open_systems(tasks, &dirs).await?;
        rows.extend(measure(&systems, tasks, s.keys, s.rounds).await?);
        // The stores close before their directories are removed.
        drop(systems);
    }
    Ok(rows)
}

fn print_results(s: &Settings, rows: &[Row]) {
    println!("| operation | system | tasks | p50 µs | p99 µs | ops/s |");
    println!("|---|---|---|---|---|---|");
    for op in OPS {
        for &tasks in &s.tasks {
            for r in rows.iter().filter(|r| r.op == op && r.tasks == tasks) {
                println!(
                    "| {} | {} | {} | {:.1} | {:.1} | {:.0} |",
                    op.name(),
                    r.system,
                    r.tasks,
                    r.p50_us(),
                    r.p99_us(),
                    r.ops_per_s()
                );
            }
        }
    }
    println!();
    for op in OPS {
        for &tasks in &s.tasks {
            let p50 = |system: &str| {
                rows.iter()
                    .find(|r| r.op == op && r.tasks == tasks && r.system == system)
                    .map_or(0.0, Row::p50_us)
            };
            println!(
                "{}, {tasks} task(s): PostgreSQL over embedded Synced: p50 ratio {:.2}",
                op.name(),
                p50(PG) / p50(SYNCED).max(1e-3)
            );
        }
    }
}

async fn main_async(s: Settings) -> R<()> {
    let admin = pg_client(None).await?;
    let sync_commit = show(&admin, "synchronous_commit").await?;
    let version = show(&admin, "server_version").await?;
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}"
        ))
        .await
        .map_err(pg_err)?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "fleet operations: {} calls per operation, system and task count, {} interleaved \
         round(s), tasks {:?}",
        (s.keys / s.rounds).max(1) * s.rounds,
        s.rounds,
        s.tasks
    );
    println!(
        "machine: {cores} cores (nproc), {} {}; PostgreSQL {version} at {PG_URL}, \
         synchronous_commit={sync_commit}",
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    println!();
    let measured = measure_all(&s).await;
    // The schema goes whatever the outcome; a failed measurement is the error to report.
    let dropped = admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        .await
        .map_err(pg_err);
    let rows = measured?;
    dropped?;
    print_results(&s, &rows);
    Ok(())
}

fn main() -> std::process::ExitCode {
    run_main("fleet_ops", parse_args, main_async)
}
