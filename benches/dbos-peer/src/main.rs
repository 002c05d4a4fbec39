//! `dbos-peer`: the idempotent "payment" workload on DBOS Transact for Rust (the `dbos` crate),
//! as a benchmark peer of idemdb driven by another program over stdin and stdout.
//!
//! # What it measures
//!
//! For each key, a DBOS workflow (`payment`) whose workflow ID is the key runs exactly one step
//! (`charge`). The step returns a 256-byte response (`vec![42u8; 256]`) and the workflow returns
//! it. DBOS records the workflow's row when it starts, the step's outcome when the step ends and
//! the workflow's outcome when it returns, all in its system database on PostgreSQL: that is what
//! gives it exactly-once effects, and it is what a first run of a key costs here (the equivalent
//! of idemdb's claim and complete).
//!
//! A *replay* starts the workflow again under the same workflow ID. DBOS must then hand back the
//! recorded result without running the step again, which this program checks: every execution of
//! the step's body is counted, and a command fails if a replay ran the step, if a fresh key did
//! not run it exactly once, or if a result is not the 256 bytes.
//!
//! Each latency is one call, `Instant` around the whole `run_with(..).await` until the result is
//! in hand, in microseconds.
//!
//! # Running it
//!
//! ```text
//! dbos-peer [--url postgres://postgres@127.0.0.1:5432/dbos_peer_sys] [--pool N]
//! ```
//!
//! - `--url`: DBOS's system database. DBOS creates the database if it does not exist (through
//!   the server's `postgres` maintenance database) and migrates its `dbos` schema into it. A URL
//!   without an `sslmode` parameter gets `sslmode=disable` appended, so that the peer talks plain
//!   TCP like the client it is compared with (sqlx's own default, `prefer`, would negotiate TLS
//!   with a server that has `ssl=on`); give `sslmode=` explicitly to choose otherwise.
//! - `--pool N`: DBOS's `Config::max_connections`, the size of its sqlx pool (default 10, DBOS's
//!   own default). One of these connections is held for good by DBOS's LISTEN/NOTIFY listener,
//!   so N - 1 serve the workload.
//!
//! It launches DBOS, then reads commands from stdin, one per line, and writes exactly one answer
//! line per command to stdout, flushed after each. Logs go to stderr only.
//!
//! # Protocol
//!
//! - `cc <tasks> <prefix> <n>`: keys are `{prefix}-{i}` for `i` in `0..n`. `<tasks>` concurrent
//!   tokio tasks; task `t` takes the keys `skip(t).step_by(tasks)` and runs the workflow for each
//!   one, a fresh key (claim and complete).
//! - `rp <tasks> <prefix> <n>`: the same keys again, each started again under the same workflow
//!   ID (a replay), timed the same way.
//! - Answer: `ok <elapsed_us> <lat_1> ... <lat_n>` (the whole command's wall time in µs, then every
//!   per-key latency in µs, in no particular order), or `err <message on one line>` if anything
//!   failed: a step executed on a replay or more than once, a key of `cc` that was not fresh, a
//!   wrong result, a database error, a call that took longer than two minutes.
//! - `quit`, or the end of stdin: shut DBOS down cleanly and exit 0.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dbos::{Config, RunOptions, WorkflowRef, DBOS};
use tokio::io::AsyncBufReadExt as _;

/// The system database when `--url` is not given.
const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/dbos_peer_sys";

/// DBOS's own default for `Config::max_connections`.
const DEFAULT_POOL: u32 = 10;

/// The application name DBOS stamps on every row it writes (3 to 256 characters of lowercase
/// letters, digits, dashes and underscores).
const APP_NAME: &str = "dbos-peer";

/// The response every payment returns.
const RESPONSE_LEN: usize = 256;
const RESPONSE_BYTE: u8 = 42;

/// How long one call may take before the command fails. DBOS retries connection errors with no
/// attempt limit, so without a bound a database that went away would hang the command forever
/// rather than answer `err`.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

const USAGE: &str = "usage: dbos-peer [--url postgres://postgres@127.0.0.1:5432/dbos_peer_sys] \
                     [--pool N]";

/// The registered workflow: no argument (the key is the workflow ID), the response as its result.
type Payment = WorkflowRef<(), Vec<u8>>;

struct Args {
    url: String,
    pool: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut url = DEFAULT_URL.to_owned();
    let mut pool = DEFAULT_POOL;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => {
                (name.to_owned(), Some(value.to_owned()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match name.as_str() {
            "--url" => url = value("--url")?,
            "--pool" => {
                let text = value("--pool")?;
                pool = match text.parse() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--pool must be a positive integer, not {text:?}")),
                };
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(Args {
        url: with_plain_tcp(url),
        pool,
    })
}

/// Appends `sslmode=disable` to a URL that does not choose an `sslmode` itself.
fn with_plain_tcp(url: String) -> String {
    let query = url.split_once('?').map(|(_, query)| query);
    let chooses = query.is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair.split('=').next(), Some("sslmode" | "ssl-mode")))
    });
    if chooses {
        url
    } else if query.is_some() {
        format!("{url}&sslmode=disable")
    } else {
        format!("{url}?sslmode=disable")
    }
}

/// A command read from stdin.
enum Command {
    /// A fresh key per call (`cc`), or a replay of a recorded one (`rp`).
    Run {
        replay: bool,
        tasks: usize,
        prefix: String,
        n: usize,
    },
    Quit,
}

fn parse_command(line: &str) -> Result<Command, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["quit"] => Ok(Command::Quit),
        [verb @ ("cc" | "rp"), tasks, prefix, n] => {
            let tasks = match tasks.parse::<usize>() {
                Ok(tasks) if tasks > 0 => tasks,
                _ => return Err(format!("<tasks> must be a positive integer, not {tasks:?}")),
            };
            let n = n
                .parse::<usize>()
                .map_err(|_| format!("<n> must be a non-negative integer, not {n:?}"))?;
            Ok(Command::Run {
                replay: *verb == "rp",
                tasks,
                prefix: (*prefix).to_owned(),
                n,
            })
        }
        [] => Err("empty command".to_owned()),
        _ => Err(format!(
            "unknown command {line:?}: expected `cc <tasks> <prefix> <n>`, \
             `rp <tasks> <prefix> <n>` or `quit`"
        )),
    }
}

/// Runs one `cc` or `rp` command and returns its answer line.
async fn run_command(
    payment: &Payment,
    executions: &AtomicU64,
    replay: bool,
    tasks: usize,
    prefix: &str,
    n: usize,
) -> String {
    let before = executions.load(Ordering::SeqCst);
    let started = Instant::now();
    let failed = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..tasks.min(n))
        .map(|t| {
            let payment = payment.clone();
            let prefix = prefix.to_owned();
            let failed = Arc::clone(&failed);
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(n / tasks + 1);
                for i in (0..n).skip(t).step_by(tasks) {
                    if failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let key = format!("{prefix}-{i}");
                    match run_one(&payment, &key).await {
                        Ok(us) => latencies.push(us),
                        Err(message) => {
                            failed.store(true, Ordering::Relaxed);
                            return Err(message);
                        }
                    }
                }
                Ok(latencies)
            })
        })
        .collect();

    let mut latencies = Vec::with_capacity(n);
    let mut first_error = None;
    for worker in workers {
        match worker.await {
            Ok(Ok(mut part)) => latencies.append(&mut part),
            Ok(Err(message)) => {
                first_error.get_or_insert(message);
            }
            Err(join) => {
                first_error.get_or_insert(format!("a task failed: {join}"));
            }
        }
    }
    let elapsed_us = micros(started.elapsed());
    if let Some(message) = first_error {
        return err_line(&message);
    }

    // Every call is over, and a step finishes before the workflow that ran it returns, so the
    // count is settled.
    let ran = executions.load(Ordering::SeqCst) - before;
    let expected = if replay { 0 } else { n as u64 };
    if ran != expected {
        let message = if replay {
            format!("a replay executed the step: {ran} executions for {n} replayed keys")
        } else if ran < expected {
            format!(
                "{} of {n} keys were already recorded, not fresh (the step ran {ran} times): \
                 use a new prefix",
                expected - ran
            )
        } else {
            format!("the step executed {ran} times for {n} fresh keys")
        };
        return err_line(&message);
    }

    let mut line = String::with_capacity(4 + 8 * (n + 1));
    let _ = write!(line, "ok {elapsed_us}");
    for us in latencies {
        let _ = write!(line, " {us}");
    }
    line
}

/// Runs the workflow once under `key` and returns how long the call took, in µs.
async fn run_one(payment: &Payment, key: &str) -> Result<u64, String> {
    let started = Instant::now();
    let call = payment.run_with(
        (),
        RunOptions {
            workflow_id: Some(key),
            ..Default::default()
        },
    );
    let result = tokio::time::timeout(CALL_TIMEOUT, call).await;
    let elapsed = started.elapsed();
    let response = match result {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => return Err(format!("key {key}: {error}")),
        Err(_) => return Err(format!("key {key}: no result within {CALL_TIMEOUT:?}")),
    };
    if response.len() != RESPONSE_LEN || response.iter().any(|&b| b != RESPONSE_BYTE) {
        return Err(format!(
            "key {key}: wrong result ({} bytes, expected {RESPONSE_LEN} bytes of {RESPONSE_BYTE})",
            response.len()
        ));
    }
    Ok(micros(elapsed))
}

fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

/// An `err` answer, on one line whatever the message holds.
fn err_line(message: &str) -> String {
    let one_line: String = message
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    format!("err {one_line}")
}

fn answer(line: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(line.as_bytes())?;
    stdout.write_all(b"\n")?;
    stdout.flush()
}

/// Registers the workflow and its step, counting every execution of the step's body.
fn register(dbos: &DBOS, executions: &Arc<AtomicU64>) -> dbos::Result<Payment> {
    let executions = Arc::clone(executions);
    dbos.register_workflow("payment", move |(): ()| {
        let executions = Arc::clone(&executions);
        async move {
            dbos::step("charge", move || {
                let executions = Arc::clone(&executions);
                async move {
                    executions.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, dbos::Error>(vec![RESPONSE_BYTE; RESPONSE_LEN])
                }
            })
            .await
        }
    })
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("dbos-peer: {message}");
            return ExitCode::from(2);
        }
    };

    let dbos = DBOS::new(Config {
        max_connections: args.pool,
        // DBOS computes no version and refuses to launch without one (or `DBOS__APPVERSION`).
        app_version: Some(env!("CARGO_PKG_VERSION").to_owned()),
        ..Config::new(APP_NAME, args.url.as_str())
    });
    let executions = Arc::new(AtomicU64::new(0));
    let payment = match register(&dbos, &executions) {
        Ok(payment) => payment,
        Err(error) => {
            eprintln!("dbos-peer: could not register the workflow: {error}");
            return ExitCode::FAILURE;
        }
    };
    let launching = Instant::now();
    if let Err(error) = dbos.launch().await {
        eprintln!("dbos-peer: DBOS did not launch: {error}");
        return ExitCode::FAILURE;
    }
    eprintln!(
        "dbos-peer: DBOS launched in {:?} (pool {}, executor {})",
        launching.elapsed(),
        args.pool,
        dbos.executor_id().unwrap_or_default()
    );

    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut code = ExitCode::SUCCESS;
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(error) => {
                eprintln!("dbos-peer: reading stdin failed: {error}");
                code = ExitCode::FAILURE;
                break;
            }
        };
        let reply = match parse_command(&line) {
            Ok(Command::Quit) => break,
            Ok(Command::Run {
                replay,
                tasks,
                prefix,
                n,
            }) => run_command(&payment, &executions, replay, tasks, &prefix, n).await,
            Err(message) => err_line(&message),
        };
        if let Err(error) = answer(&reply) {
            eprintln!("dbos-peer: writing stdout failed: {error}");
            code = ExitCode::FAILURE;
            break;
        }
    }

    dbos.shutdown().await;
    eprintln!(
        "dbos-peer: DBOS shut down; the step ran {} times",
        executions.load(Ordering::SeqCst)
    );
    code
}
