//! An axum payments service behind the idemdb HTTP layer (feature `http`).
//!
//! `POST /payments` charges the caller (the bearer token is the principal) and answers 201 with a
//! `Location` and a JSON receipt; `GET /ledger` counts the charges actually made, outside the
//! store. The layer makes retries of a `POST` with the same `Idempotency-Key` replay the receipt
//! instead of charging again.
//!
//! The same code runs on an embedded store (the default: a directory) or, with
//! `--postgres URL`, on PostgreSQL, where any number of instances share one store (fleet mode).
//!
//! Modes:
//! - `serve [--addr 127.0.0.1:3000] [--db DIR | --postgres URL [--pool N] [--coalescing]]
//!   [--synced] [--no-layer] [--bank] [--lease-ms N]`: run the service (the load test drives it with wrk; `--no-layer`
//!   measures the same service without idempotency). It prints `listening ADDR` on stdout.
//!   `--bank` (with `--postgres`) keeps the charges in a PostgreSQL table instead of memory, so
//!   that they outlive a killed instance;
//! - `check [--payments N] [--postgres URL]` (the default): start the service on an ephemeral
//!   port, send N payments from concurrent clients with duplicate deliveries, lost replies and
//!   concurrent twins, and verify over HTTP that each payment was charged exactly once and every
//!   client got the same receipt. Exits non-zero otherwise;
//! - `fleet [--postgres URL] [--pooler URL] [--instances 3] [--payments 2000] [--kills 6]`: fleet
//!   mode (`--pooler`: the instances reach the store through a pooler, as `idemdb_fleet`), see
//!   [`fleet`]: several instance processes on one PostgreSQL, retries sent to random instances,
//!   instances SIGKILLed and restarted; checks and reports that every payment was charged once.
//!
//! Run: `cargo run --release --features http,postgres --example axum_payments -- check`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use idemdb::http::{IdempotencyLayer, WhileRunning};
use idemdb::{AsyncStore, Config, Durability};

/// Where the charges are kept: in memory (one process), or in a PostgreSQL table (the fleet's
/// bank, which outlives the instances).
#[derive(Default)]
struct Ledger {
    charges: AtomicU64,
    bank: Option<tokio_postgres::Client>,
}

/// The bank's tables (fleet mode): every handler run that reached the bank, and the charges,
/// one per (user, key): the bank, like a real payment provider, takes the caller's idempotency
/// key as the charge's reference.
const BANK_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS demo_attempts (user_name text, key text, pid int, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS demo_charges (id bigserial PRIMARY KEY, user_name text, key text, amount bigint, pid int, UNIQUE (user_name, key));";

async fn pay(
    State(ledger): State<Arc<Ledger>>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let Some(user) = principal_of(&headers) else {
        return (
            StatusCode::UNAUTHORIZED,
            HeaderMap::new(),
            String::from("{\"error\":\"no token\"}"),
        );
    };
    let amount: u64 = match std::str::from_utf8(&body)
        .ok()
        .and_then(|b| b.trim().parse().ok())
    {
        Some(a) if a > 0 => a,
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                HeaderMap::new(),
                String::from("{\"error\":\"the body must be a positive amount\"}"),
            )
        }
    };
    let id = match &ledger.bank {
        None => ledger.charges.fetch_add(1, Ordering::SeqCst) + 1,
        Some(bank) => {
            let key = headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            match charge(bank, &user, &key, amount).await {
                Ok(id) => id,
                Err(e) => {
                    return (
                        StatusCode::SERVICE_UNAVAILABLE,
                        HeaderMap::new(),
                        format!("{{\"error\":\"bank: {e}\"}}"),
                    )
                }
            }
        }
    };
    let mut out = HeaderMap::new();
    out.insert(
        "location",
        format!("/payments/{id}").parse().expect("header"),
    );
    out.insert("content-type", "application/json".parse().expect("header"));
    (
        StatusCode::CREATED,
        out,
        format!("{{\"payment\":{id},\"user\":\"{user}\",\"amount\":{amount}}}"),
    )
}

/// Charges `amount` at the bank under the reference (user, key): records the attempt, then
/// inserts the charge unless the reference was charged already; the charge's id either way.
async fn charge(
    bank: &tokio_postgres::Client,
    user: &str,
    key: &str,
    amount: u64,
) -> Result<u64, tokio_postgres::Error> {
    let pid = std::process::id() as i32;
    let amount = amount as i64;
    bank.execute(
        "INSERT INTO demo_attempts (user_name, key, pid) VALUES ($1, $2, $3)",
        &[&user, &key, &pid],
    )
    .await?;
    let row = bank
        .query_opt(
            "INSERT INTO demo_charges (user_name, key, amount, pid) VALUES ($1, $2, $3, $4)
             ON CONFLICT (user_name, key) DO NOTHING RETURNING id",
            &[&user, &key, &amount, &pid],
        )
        .await?;
    let row = match row {
        Some(r) => r,
        None => {
            bank.query_one(
                "SELECT id FROM demo_charges WHERE user_name = $1 AND key = $2",
                &[&user, &key],
            )
            .await?
        }
    };
    Ok(row.get::<_, i64>(0) as u64)
}

async fn ledger(State(ledger): State<Arc<Ledger>>) -> String {
    match &ledger.bank {
        None => ledger.charges.load(Ordering::SeqCst).to_string(),
        Some(bank) => match bank
            .query_one("SELECT count(*) FROM demo_charges", &[])
            .await
        {
            Ok(r) => r.get::<_, i64>(0).to_string(),
            Err(e) => format!("bank: {e}"),
        },
    }
}

/// The bearer token, standing in for an authentication middleware's principal.
fn principal_of(headers: &HeaderMap) -> Option<String> {
    let v = headers.get("authorization")?.to_str().ok()?;
    let token = v.strip_prefix("Bearer ")?;
    (!token.is_empty() && token.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| token.to_owned())
}

fn app(
    store: Option<AsyncStore>,
    ledger_state: Ledger,
) -> (Router, Arc<Ledger>, Option<IdempotencyLayer>) {
    let ledger_state = Arc::new(ledger_state);
    let tier_store = store.clone();
    let routes = Router::new()
        .route("/payments", post(pay))
        .route("/ledger", get(ledger))
        // The local replay tier's counters (fleet mode reads them at the end of a run).
        .route(
            "/tier",
            get(move || {
                let stats = tier_store.as_ref().and_then(AsyncStore::replay_tier_stats);
                async move {
                    stats.map_or_else(
                        || "no tier".to_owned(),
                        |t| format!("hits {} misses {}", t.hits, t.misses),
                    )
                }
            }),
        );
    let Some(store) = store else {
        return (routes.with_state(ledger_state.clone()), ledger_state, None);
    };
    let layer = IdempotencyLayer::new(store)
        .require_key(true)
        .while_running(WhileRunning::Wait(Duration::from_secs(5)))
        .principal(|req| principal_of(&req.headers));
    let router = routes.layer(layer.clone()).with_state(ledger_state.clone());
    (router, ledger_state, Some(layer))
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// `serve`'s PostgreSQL options: the pool's size (the library's default when not given) and
/// whether concurrent calls are coalesced.
#[derive(Default, Clone, Copy)]
struct FleetOptions {
    pool: Option<usize>,
    coalescing: bool,
}

/// The store: on PostgreSQL if `postgres` is given (with a local replay tier of `tier` bytes if
/// given), else in `db` (a temporary directory if none); the lease if given (the default is
/// 30 s).
async fn open_store(
    db: Option<String>,
    postgres: Option<String>,
    synced: bool,
    lease: Option<Duration>,
    tier: Option<usize>,
    fleet: FleetOptions,
) -> (AsyncStore, Option<tempfile::TempDir>) {
    // The lease is a setting both backends read; durability only the embedded store's.
    fn with_lease<B>(cfg: Config<B>, lease: Option<Duration>) -> Config<B> {
        match lease {
            Some(l) => cfg.lease(l),
            None => cfg,
        }
    }
    let (opened, tmp) = match (postgres, db) {
        (Some(url), _) => {
            let cfg = Config::postgres(url).coalescing(fleet.coalescing);
            let cfg = match fleet.pool {
                Some(n) => cfg.pool_size(n),
                None => cfg,
            };
            let cfg = tier.map_or(cfg.clone(), |b| cfg.replay_tier(b));
            (with_lease(cfg, lease).open_async().await, None)
        }
        (None, db) => {
            let (cfg, tmp) = match db {
                Some(p) => (Config::new(p), None),
                None => {
                    let t = tempfile::tempdir().expect("temp dir");
                    (Config::new(t.path()), Some(t))
                }
            };
            let durability = if synced {
                Durability::Synced
            } else {
                Durability::Buffered
            };
            let cfg = with_lease(cfg, lease).durability(durability);
            (cfg.open_async().await, tmp)
        }
    };
    let store = opened.unwrap_or_else(|e| {
        eprintln!("axum_payments: cannot open the store: {e}");
        std::process::exit(1)
    });
    (store, tmp)
}

/// A client of the bank at `url` (fleet mode), with its tables created.
async fn bank(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| {
            eprintln!("axum_payments: PostgreSQL at {url} cannot be reached: {e}");
            std::process::exit(1)
        });
    tokio::spawn(conn);
    client
        .batch_execute(BANK_SCHEMA)
        .await
        .expect("create the bank's tables");
    client
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let synced = args.iter().any(|a| a == "--synced");
    let postgres = arg(&args, "--postgres");
    match args.first().map(String::as_str) {
        Some("serve") => {
            let addr: SocketAddr = arg(&args, "--addr")
                .unwrap_or_else(|| "127.0.0.1:3000".into())
                .parse()
                .expect("--addr host:port");
            let no_layer = args.iter().any(|a| a == "--no-layer");
            let lease = arg(&args, "--lease-ms")
                .map(|v| Duration::from_millis(v.parse().expect("--lease-ms N")));
            let (store, _tmp) = open_store(
                arg(&args, "--db"),
                postgres.clone(),
                synced,
                lease,
                arg(&args, "--replay-tier").map(|v| v.parse().expect("--replay-tier BYTES")),
                FleetOptions {
                    pool: arg(&args, "--pool").map(|v| v.parse().expect("--pool N")),
                    coalescing: args.iter().any(|a| a == "--coalescing"),
                },
            )
            .await;
            let mut ledger = Ledger::default();
            if args.iter().any(|a| a == "--bank") {
                // The bank is another service: it may be reached otherwise than the store (the
                // store through a pooler, the bank directly).
                let url = arg(&args, "--bank-postgres")
                    .or_else(|| postgres.clone())
                    .expect("--bank needs --postgres URL or --bank-postgres URL");
                ledger.bank = Some(bank(&url).await);
            }
            let backend = store.backend_name();
            let (router, _, _) = app((!no_layer).then_some(store), ledger);
            let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
            let addr = listener.local_addr().expect("local address");
            eprintln!(
                "axum_payments: serving on http://{addr} ({}, {backend}, {})",
                if no_layer {
                    "no idempotency layer"
                } else {
                    "idempotency layer"
                },
                if synced { "synced" } else { "buffered" }
            );
            println!("listening {addr}");
            axum::serve(listener, router).await.expect("serve");
        }
        None | Some("check") => {
            let payments: u64 = arg(&args, "--payments")
                .and_then(|v| v.parse().ok())
                .unwrap_or(500);
            if let Err(e) = check(payments, synced, postgres).await {
                eprintln!("axum_payments check FAILED: {e}");
                std::process::exit(1);
            }
        }
        Some("fleet") => {
            let n = |name: &str, default: u64| {
                arg(&args, name)
                    .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} N")))
                    .unwrap_or(default)
            };
            let url = postgres.unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());
            let plan = fleet::Plan {
                instances: n("--instances", 3) as usize,
                payments: n("--payments", 2_000),
                kills: n("--kills", 6),
                lease: Duration::from_millis(n("--lease-ms", 2_000)),
                pooler: arg(&args, "--pooler"),
            };
            if let Err(e) = fleet::run(&url, plan).await {
                eprintln!("axum_payments fleet FAILED: {e}");
                std::process::exit(1);
            }
        }
        Some(other) => {
            eprintln!("unknown mode {other}; use `serve`, `check` or `fleet`");
            std::process::exit(2);
        }
    }
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

async fn post_payment(
    c: &HttpClient,
    addr: SocketAddr,
    user: &str,
    key: &str,
    amount: u64,
) -> Result<(u16, bool, Vec<u8>), String> {
    let req = axum::http::Request::post(format!("http://{addr}/payments"))
        .header("authorization", format!("Bearer {user}"))
        .header("idempotency-key", format!("\"{key}\""))
        .body(Full::new(Bytes::from(amount.to_string())))
        .map_err(|e| e.to_string())?;
    let resp = c.request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let replayed = resp.headers().contains_key("idempotent-replayed");
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes()
        .to_vec();
    Ok((status, replayed, body))
}

/// A GET's body as text.
async fn get_text(c: &HttpClient, uri: &str) -> Result<String, String> {
    let req = axum::http::Request::get(uri)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let resp = c.request(req).await.map_err(|e| format!("{uri}: {e}"))?;
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Clients send every payment, some twice at once (a proxy duplicating), some again later (a
/// lost reply); the ledger must count each payment once and each client see one receipt.
async fn check(payments: u64, synced: bool, postgres: Option<String>) -> Result<(), String> {
    // On PostgreSQL, in a schema of its own, emptied first.
    let postgres = match postgres {
        Some(url) => Some(fleet::fresh_schema(&url, "axum_payments_check").await?),
        None => None,
    };
    let (store, _tmp) =
        open_store(None, postgres, synced, None, None, FleetOptions::default()).await;
    let (router, ledger, layer) = app(Some(store), Ledger::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for p in 0..payments {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            let user = format!("user{}", p % 7);
            let key = format!("pay-{p}");
            let amount = 100 + p;
            let mut receipts = Vec::new();
            if p % 5 == 0 {
                // Twins: a proxy delivers the request twice at the same moment.
                let (a, b) = tokio::join!(
                    post_payment(&c, addr, &user, &key, amount),
                    post_payment(&c, addr, &user, &key, amount)
                );
                receipts.push(a?);
                receipts.push(b?);
            } else {
                receipts.push(post_payment(&c, addr, &user, &key, amount).await?);
            }
            if p % 3 == 0 {
                // The reply was lost: the client retries later with the same key.
                receipts.push(post_payment(&c, addr, &user, &key, amount).await?);
            }
            if p % 50 == 0 {
                // A buggy client reuses the key for another amount: refused with 422.
                let (status, _, _) = post_payment(&c, addr, &user, &key, amount + 1).await?;
                if status != 422 {
                    return Err(format!("{key}: key reuse got {status}, not 422"));
                }
            }
            let first = &receipts[0];
            for r in &receipts {
                if r.0 != 201 || r.2 != first.2 {
                    return Err(format!("{key}: receipts differ: {receipts:?}"));
                }
            }
            Ok::<usize, String>(receipts.iter().filter(|r| r.1).count())
        }));
    }
    let mut replays = 0;
    for t in tasks {
        replays += t.await.map_err(|e| e.to_string())??;
    }
    let charged: u64 = {
        let req = axum::http::Request::get(format!("http://{addr}/ledger"))
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let resp = client.request(req).await.map_err(|e| e.to_string())?;
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        String::from_utf8_lossy(&body)
            .parse()
            .map_err(|e| format!("ledger: {e}"))?
    };
    let direct = ledger.charges.load(Ordering::SeqCst);
    let stats = layer.map(|l| l.stats()).unwrap_or_default();
    println!(
        "axum_payments check: {payments} payments, {replays} replayed duplicates, ledger {charged} \
         charges, {:.2} s; layer {stats:?}",
        started.elapsed().as_secs_f64()
    );
    if charged != payments || direct != payments {
        return Err(format!("{payments} payments but {charged} charges"));
    }
    if stats.executed != payments {
        return Err(format!("layer executed {} of {payments}", stats.executed));
    }
    Ok(())
}

#[path = "axum_payments/fleet.rs"]
mod fleet;
