//! An axum payments service behind the idemdb HTTP layer (feature `http`).
//!
//! `POST /payments` charges the caller (the bearer token is the principal) and answers 201 with a
//! `Location` and a JSON receipt; `GET /ledger` counts the charges actually made, outside the
//! store. The layer makes retries of a `POST` with the same `Idempotency-Key` replay the receipt
//! instead of charging again.
//!
//! Modes:
//! - `serve [--addr 127.0.0.1:3000] [--db DIR] [--synced] [--no-layer]`: run the service (the
//!   load test drives it with wrk; `--no-layer` measures the same service without idempotency);
//! - `check [--payments N]` (the default): start the service on an ephemeral port, send N payments
//!   from concurrent clients with duplicate deliveries, lost replies and concurrent twins, and
//!   verify over HTTP that each payment was charged exactly once and every client got the same
//!   receipt. Exits non-zero otherwise.
//!
//! Run: `cargo run --release --features http --example axum_payments -- check`.

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
use idemdb::{Config, Durability};

#[derive(Default)]
struct Ledger {
    charges: AtomicU64,
}

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
    let id = ledger.charges.fetch_add(1, Ordering::SeqCst) + 1;
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

async fn ledger(State(ledger): State<Arc<Ledger>>) -> String {
    ledger.charges.load(Ordering::SeqCst).to_string()
}

/// The bearer token, standing in for an authentication middleware's principal.
fn principal_of(headers: &HeaderMap) -> Option<String> {
    let v = headers.get("authorization")?.to_str().ok()?;
    let token = v.strip_prefix("Bearer ")?;
    (!token.is_empty() && token.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| token.to_owned())
}

fn app(store: Option<idemdb::Store>) -> (Router, Arc<Ledger>, Option<IdempotencyLayer>) {
    let ledger_state = Arc::new(Ledger::default());
    let routes = Router::new()
        .route("/payments", post(pay))
        .route("/ledger", get(ledger));
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

fn open_store(db: Option<String>, synced: bool) -> (idemdb::Store, Option<tempfile::TempDir>) {
    let (path, tmp) = match db {
        Some(p) => (std::path::PathBuf::from(p), None),
        None => {
            let t = tempfile::tempdir().expect("temp dir");
            (t.path().to_path_buf(), Some(t))
        }
    };
    let durability = if synced {
        Durability::Synced
    } else {
        Durability::Buffered
    };
    let store = Config::new(path)
        .durability(durability)
        .open()
        .expect("open the store");
    (store, tmp)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let synced = args.iter().any(|a| a == "--synced");
    match args.first().map(String::as_str) {
        Some("serve") => {
            let addr: SocketAddr = arg(&args, "--addr")
                .unwrap_or_else(|| "127.0.0.1:3000".into())
                .parse()
                .expect("--addr host:port");
            let no_layer = args.iter().any(|a| a == "--no-layer");
            let (store, _tmp) = open_store(arg(&args, "--db"), synced);
            let (router, _, _) = app((!no_layer).then_some(store));
            let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
            eprintln!(
                "axum_payments: serving on http://{addr} ({}, {})",
                if no_layer {
                    "no idempotency layer"
                } else {
                    "idempotency layer"
                },
                if synced { "synced" } else { "buffered" }
            );
            axum::serve(listener, router).await.expect("serve");
        }
        None | Some("check") => {
            let payments: u64 = arg(&args, "--payments")
                .and_then(|v| v.parse().ok())
                .unwrap_or(500);
            if let Err(e) = check(payments, synced).await {
                eprintln!("axum_payments check FAILED: {e}");
                std::process::exit(1);
            }
        }
        Some(other) => {
            eprintln!("unknown mode {other}; use `serve` or `check`");
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

/// Clients send every payment, some twice at once (a proxy duplicating), some again later (a
/// lost reply); the ledger must count each payment once and each client see one receipt.
async fn check(payments: u64, synced: bool) -> Result<(), String> {
    let (store, _tmp) = open_store(None, synced);
    let (router, ledger, layer) = app(Some(store));
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
