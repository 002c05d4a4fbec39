//! The transactional inbox on PostgreSQL: consumer workers (separate processes) take order
//! messages from an at-least-once "broker" (a table that redelivers until a message is
//! acknowledged, and sometimes redelivers acknowledged ones too), and for each message insert the
//! order into the application's own table and mark the message processed **in one transaction**
//! (`AsyncStore::transaction` + `SqlTransaction::commit_with`). Workers are SIGKILLed at random
//! moments, many of them between the order's `INSERT` and the commit, and restarted.
//!
//! - `inbox check [--postgres URL] [--workers 3] [--messages 2000] [--kills 8]`: runs the whole
//!   scenario in the schema `idemdb_inbox_demo` (emptied first) and checks, from the tables
//!   themselves: every message has exactly one order row (the orders table has no unique
//!   constraint that could hide a duplicate), and the set of messages idemdb marks processed is
//!   exactly the set of orders, so the application's table and the consumer's marks agree.
//! - `inbox worker --postgres URL`: one worker process (started by `check`).

use std::process::Stdio;
use std::time::{Duration, Instant};

use idemdb::{AsyncStore, Begin, Config, ConsumerOptions, Response, SqlValue};

const SCHEMA: &str = "idemdb_inbox_demo";
const GROUP: &str = "orders";
/// The lease of a delivery: how long a killed worker's message waits before another takes it.
const LEASE: Duration = Duration::from_millis(500);

type Res<T> = Result<T, String>;

fn fail(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn in_schema(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{SCHEMA}")
}

async fn open(url: &str) -> Res<AsyncStore> {
    Config::postgres(in_schema(url))
        .pool_size(4)
        .open_async()
        .await
        .map_err(|e| format!("PostgreSQL at {url}: {e}"))
}

/// Runs one statement of the application in its own transaction; its rows.
async fn sql(store: &AsyncStore, q: &str, params: &[SqlValue]) -> Res<Vec<Vec<SqlValue>>> {
    let mut tx = store.transaction().await.map_err(fail)?;
    let rows = tx.query(q, params).await.map_err(fail)?;
    tx.commit().await.map_err(fail)?;
    Ok(rows)
}

fn int(v: Option<&SqlValue>) -> Res<i64> {
    match v {
        Some(SqlValue::Int(i)) => Ok(*i),
        other => Err(format!("expected an integer, got {other:?}")),
    }
}

/// One worker: takes deliveries until the broker has nothing left to deliver.
async fn worker(url: &str) -> Res<()> {
    let store = open(url).await?;
    let opts = ConsumerOptions::default().lease(LEASE).max_attempts(1_000);
    let mut rng = Rng(u64::from(std::process::id()) ^ 0x5EED);
    loop {
        // A delivery: an unacknowledged message, or now and then an acknowledged one again.
        let redeliver = rng.below(10) == 0;
        let rows = sql(
            &store,
            "SELECT id FROM broker WHERE acked = $1 ORDER BY random() LIMIT 1",
            &[SqlValue::Bool(redeliver)],
        )
        .await?;
        let Some(id) = rows.first().map(|r| int(r.first())).transpose()? else {
            if redeliver {
                continue;
            }
            return Ok(()); // everything acknowledged
        };
        let msg = format!("m-{id}");
        match store.begin(GROUP, &msg, opts).await.map_err(fail)? {
            Begin::Process(lease) => {
                let mut tx = store.transaction().await.map_err(fail)?;
                tx.execute(
                    "INSERT INTO orders (message, worker, amount) VALUES ($1, $2, $3)",
                    &[id.into(), std::process::id().into(), (id * 10).into()],
                )
                .await
                .map_err(fail)?;
                // The window a SIGKILL lands in most often: the order is written, not committed.
                tokio::time::sleep(Duration::from_micros(rng.below(3_000))).await;
                let done = tx
                    .commit_with(store.commit().complete(&lease, Response::new(Vec::new())))
                    .await
                    .map_err(fail)?;
                if done.is_err() {
                    continue; // the lease was lost: rolled back, order included
                }
            }
            Begin::Completed(_) | Begin::Failed(_) => {} // a duplicate: acknowledge it
            Begin::InProgress { .. } => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            Begin::Poisoned { attempts } => return Err(format!("{msg} poisoned after {attempts}")),
            other => return Err(format!("{msg}: {other:?}")),
        }
        sql(
            &store,
            "UPDATE broker SET acked = true WHERE id = $1",
            &[id.into()],
        )
        .await?;
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

async fn check(url: &str, workers: usize, messages: i64, kills: u64) -> Res<()> {
    let (admin, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("PostgreSQL at {url} cannot be reached: {e}"))?;
    tokio::spawn(conn);
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}"
        ))
        .await
        .map_err(fail)?;
    let store = open(url).await?;
    sql(
        &store,
        "CREATE TABLE broker (id integer PRIMARY KEY, acked boolean NOT NULL)",
        &[],
    )
    .await?;
    // No unique constraint: a duplicate order would show.
    sql(&store, "CREATE TABLE orders (message integer NOT NULL, worker integer NOT NULL, amount bigint NOT NULL)", &[]).await?;
    sql(
        &store,
        "INSERT INTO broker SELECT g, false FROM generate_series(1, $1) g",
        &[SqlValue::Int(messages)],
    )
    .await?;

    let exe = std::env::current_exe().map_err(fail)?;
    let spawn = || {
        tokio::process::Command::new(&exe)
            .args(["worker", "--postgres", url])
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(fail)
    };
    let mut children = Vec::new();
    for _ in 0..workers {
        children.push(spawn()?);
    }
    let started = Instant::now();
    let mut rng = Rng(0xC0FFEE);
    let mut killed = 0;
    let acked = |store: AsyncStore| async move {
        let rows = sql(&store, "SELECT count(*) FROM broker WHERE acked", &[]).await?;
        int(rows.first().and_then(|r| r.first()))
    };
    // The killer: SIGKILLs a random worker at evenly spread moments of progress, restarts it.
    while killed < kills {
        let target = messages * i64::try_from(killed + 1).unwrap_or(1)
            / i64::try_from(kills + 1).unwrap_or(1);
        if acked(store.clone()).await? < target {
            tokio::time::sleep(Duration::from_micros(200 + rng.below(2_000))).await;
            continue;
        }
        let i = usize::try_from(rng.below(workers as u64)).unwrap_or(0);
        if let Some(child) = children.get_mut(i) {
            child.start_kill().map_err(fail)?; // SIGKILL
            child.wait().await.map_err(fail)?;
            *child = spawn()?;
        }
        killed += 1;
    }
    for mut child in children {
        let status = child.wait().await.map_err(fail)?;
        if !status.success() {
            return Err(format!("a worker failed: {status}"));
        }
    }
    let elapsed = started.elapsed();

    // The checks, from the tables themselves.
    let rows = sql(
        &store,
        "SELECT count(*), count(DISTINCT message) FROM orders",
        &[],
    )
    .await?;
    let row = rows.first().ok_or("no count")?;
    let (orders, distinct) = (int(row.first())?, int(row.get(1))?);
    if orders != messages || distinct != messages {
        return Err(format!(
            "{orders} order rows for {distinct} distinct messages, expected {messages} of each"
        ));
    }
    // Every mark has its order and every order its mark: the symmetric difference is empty.
    let rows = sql(
        &store,
        "WITH marks AS (SELECT convert_from(key, 'UTF8') AS m FROM idemdb_requests \
         WHERE ns = 1 AND tenant = $1 AND state = 2), \
         placed AS (SELECT 'm-' || message AS m FROM orders) \
         SELECT (SELECT count(*) FROM marks), \
                (SELECT count(*) FROM (SELECT m FROM marks EXCEPT SELECT m FROM placed) x), \
                (SELECT count(*) FROM (SELECT m FROM placed EXCEPT SELECT m FROM marks) y), \
                (SELECT count(*) FROM idemdb_requests WHERE ns = 1 AND attempts > 1)",
        &[SqlValue::Bytes(GROUP.as_bytes().to_vec())],
    )
    .await?;
    let row = rows.first().ok_or("no row")?;
    let (marks, marks_only, orders_only, retaken) = (
        int(row.first())?,
        int(row.get(1))?,
        int(row.get(2))?,
        int(row.get(3))?,
    );
    if marks != messages || marks_only != 0 || orders_only != 0 {
        return Err(format!(
            "{marks} marks for {messages} messages; {marks_only} marks without an order, \
             {orders_only} orders without a mark"
        ));
    }
    println!(
        "inbox: {messages} messages, {workers} workers, {killed} SIGKILLs in {elapsed:.1?}; \
         {retaken} messages taken over after a kill; every message has exactly one order row \
         and the consumer's marks equal the orders"
    );
    Ok(())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = arg(&args, "--postgres")
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());
    let n = |name: &str, default: u64| {
        arg(&args, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let result = match args.first().map(String::as_str) {
        Some("worker") => worker(&url).await,
        Some("check") => {
            check(
                &url,
                usize::try_from(n("--workers", 3)).unwrap_or(3),
                i64::try_from(n("--messages", 2_000)).unwrap_or(2_000),
                n("--kills", 8),
            )
            .await
        }
        _ => Err(
            "usage: inbox check [--postgres URL] [--workers 3] [--messages 2000] \
                  [--kills 8] | inbox worker --postgres URL"
                .into(),
        ),
    };
    if let Err(e) = result {
        eprintln!("inbox: {e}");
        std::process::exit(1);
    }
}
