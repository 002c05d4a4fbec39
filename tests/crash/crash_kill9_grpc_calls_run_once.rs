//! kill -9 of a gRPC server behind `GrpcIdempotencyLayer` (with `written_pending`), on both
//! backends: calls are sent while the server runs, the server is SIGKILLed at random moments
//! (before, during and after methods' effects and answers), a new server starts on the same
//! store, and clients retry every call until it is answered. Each payment's effect happens
//! exactly once: a retry gets the stored reply, waits (`ABORTED`) while the key is still held,
//! or, once the dead server's lease has run out, runs as a takeover, whose method checks its
//! own effect first (the pattern `Attempt::takeover` is for). The child is this test binary,
//! re-executed: a tonic server on a free port, its effects appended and synced to a file.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use idemdb::grpc::{Code, GrpcIdempotencyLayer};
use idemdb::http::Attempt;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::Status;

use crate::common;

const STORE_ENV: &str = "IDEMDB_GRPC_CHILD_STORE";
const EFFECTS_ENV: &str = "IDEMDB_GRPC_CHILD_EFFECTS";
const PAYMENTS: usize = 24;
const ROUNDS: usize = 5;
const LEASE: Duration = Duration::from_millis(1500);
const PATH: &str = "/crash.Payments/Charge";

#[derive(Clone, PartialEq, prost::Message)]
struct ChargeRequest {
    #[prost(string, tag = "1")]
    account: String,
    #[prost(uint32, tag = "2")]
    delay_ms: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ChargeReply {
    #[prost(string, tag = "1")]
    account: String,
    /// Whether this answer came from a takeover that found the effect already made.
    #[prost(bool, tag = "2")]
    found: bool,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The child's method: the effect is a line appended (and synced) to the effects file; a
/// takeover first looks for its account's line.
struct Charge(String);

impl tonic::server::UnaryService<ChargeRequest> for Charge {
    type Response = ChargeReply;
    type Future = BoxFuture<Result<tonic::Response<ChargeReply>, Status>>;

    fn call(&mut self, req: tonic::Request<ChargeRequest>) -> Self::Future {
        let effects = self.0.clone();
        Box::pin(async move {
            let takeover = req
                .extensions()
                .get::<Attempt>()
                .is_some_and(|a| a.takeover);
            let req = req.into_inner();
            let line = format!("effect {}", req.account);
            let done = std::fs::read_to_string(&effects)
                .unwrap_or_default()
                .lines()
                .any(|l| l == line);
            if !(takeover && done) {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&effects)
                    .unwrap();
                // One write of the whole line: concurrent calls append to the same file, and
                // `writeln!` may write the line and its newline apart.
                f.write_all(format!("{line}\n").as_bytes()).unwrap();
                f.sync_all().unwrap();
            }
            tokio::time::sleep(Duration::from_millis(u64::from(req.delay_ms))).await;
            Ok(tonic::Response::new(ChargeReply {
                account: req.account,
                found: takeover && done,
            }))
        })
    }
}

#[derive(Clone)]
struct Payments(String);

impl tonic::server::NamedService for Payments {
    const NAME: &'static str = "crash.Payments";
}

impl tower_service::Service<http::Request<tonic::body::Body>> for Payments {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let effects = self.0.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(Charge(effects), req).await)
        })
    }
}

#[test]
#[ignore = "the child side of the gRPC crash test; run by the parent tests"]
fn grpc_server_child() {
    let Ok(store) = std::env::var(STORE_ENV) else {
        return;
    };
    let effects = std::env::var(EFFECTS_ENV).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let store: idemdb::AsyncStore = match store.split_once(':') {
            Some(("db", dir)) => idemdb::Config::new(dir)
                .durability(idemdb::Durability::Synced)
                .open_async()
                .await
                .unwrap(),
            _ => idemdb::Config::postgres(store.trim_start_matches("pg:"))
                .open_async()
                .await
                .unwrap(),
        };
        let layer = GrpcIdempotencyLayer::new(store)
            .require_key(true)
            .written_pending(true)
            .lease(LEASE);
        let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = incoming.local_addr().unwrap().port();
        let mut out = std::io::stdout().lock();
        // The test harness has printed the test's name without a newline: end that line first.
        writeln!(out).unwrap();
        writeln!(out, "LISTENING {port} 0").unwrap();
        out.flush().unwrap();
        drop(out);
        Server::builder()
            .layer(layer)
            .add_service(Payments(effects))
            .serve_with_incoming(incoming)
            .await
            .unwrap();
    });
}

/// Starts a server child on `store` and returns it with its address.
fn start(store: &str, effects: &str) -> (std::process::Child, SocketAddr) {
    let mut child = common::spawn_child(
        "crash_kill9_grpc_calls_run_once::grpc_server_child",
        &[
            (STORE_ENV, store.to_owned()),
            (EFFECTS_ENV, effects.to_owned()),
        ],
    );
    let port = listening_port(&mut child);
    match port {
        Some(port) => (child, SocketAddr::from(([127, 0, 0, 1], port))),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server child never said it listened");
        }
    }
}

/// The port in the child's `LISTENING <port> 0` line (waiting at most a minute).
fn listening_port(child: &mut std::process::Child) -> Option<u16> {
    let mut reader = std::io::BufReader::new(child.stdout.take()?);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut reader, &mut line).ok()? == 0 {
            return None;
        }
        if let Some(rest) = line.strip_prefix("LISTENING ") {
            return rest.split(' ').next()?.parse().ok();
        }
    }
    None
}

/// How long payment `i`'s method waits after its effect (the same on every retry: the delay is
/// part of the request, which a retry must repeat).
fn delay_of(i: usize) -> u32 {
    (i * 37 % 300) as u32
}

/// One call of payment `i`: `Ok(reply)` once answered `OK`, `Err(())` for an answer to retry
/// (the server died or is not up yet, or `ABORTED` while the key is held).
async fn call(addr: SocketAddr, i: usize) -> Result<ChargeReply, ()> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|_| ())?;
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.map_err(|_| ())?;
    let mut req = tonic::Request::new(ChargeRequest {
        account: format!("acct-{i}"),
        delay_ms: delay_of(i),
    });
    req.metadata_mut()
        .insert("idempotency-key", format!("pay-{i}").parse().unwrap());
    let path = http::uri::PathAndQuery::from_static(PATH);
    match client
        .unary(req, path, tonic_prost::ProstCodec::default())
        .await
    {
        Ok(r) => Ok(r.into_inner()),
        // A refusal of the layer that a retry must not get: the request is the same each time.
        Err(s) if matches!(s.code(), Code::FailedPrecondition | Code::InvalidArgument) => {
            panic!("payment {i}: unexpected {s:?}")
        }
        // ABORTED while the key is held; anything else here is the killed server's connection.
        Err(_) => Err(()),
    }
}

fn run(store: &str) {
    let dir = tempfile::tempdir().unwrap();
    let effects = dir.path().join("effects").display().to_string();
    let store = store.replace("{dir}", &dir.path().join("store").display().to_string());
    let mut rng = common::Xorshift::from_clock();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut answered: HashMap<usize, ChargeReply> = HashMap::new();
    for round in 0..ROUNDS {
        let (mut child, addr) = start(&store, &effects);
        // Every payment not yet answered is (re)sent, each with a random delay after its effect.
        let pending: Vec<usize> = (0..PAYMENTS)
            .filter(|i| !answered.contains_key(i))
            .collect();
        let calls = rt.spawn(async move {
            let mut hs = Vec::new();
            for i in pending {
                hs.push(tokio::spawn(async move { (i, call(addr, i).await) }));
            }
            let mut got = Vec::new();
            for h in hs {
                got.push(h.await.unwrap());
            }
            got
        });
        if round + 1 < ROUNDS {
            common::kill_after_random_pause(&mut child, &mut rng, 30, 300);
        }
        for (i, r) in rt.block_on(calls).unwrap() {
            if let Ok(reply) = r {
                answered.insert(i, reply);
            }
        }
        if round + 1 == ROUNDS {
            // The last server is not killed: retry until every payment is answered.
            let deadline = Instant::now() + Duration::from_secs(120);
            while answered.len() < PAYMENTS {
                assert!(Instant::now() < deadline, "unanswered: {answered:?}");
                for i in 0..PAYMENTS {
                    if answered.contains_key(&i) {
                        continue;
                    }
                    if let Ok(reply) = rt.block_on(call(addr, i)) {
                        answered.insert(i, reply);
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
    let found = answered.values().filter(|r| r.found).count();
    eprintln!("{PAYMENTS} payments answered; {found} by a takeover that found its effect made");
    let text = std::fs::read_to_string(&effects).unwrap();
    for i in 0..PAYMENTS {
        let line = format!("effect acct-{i}");
        let n = text.lines().filter(|l| *l == line).count();
        assert_eq!(n, 1, "payment {i}'s effect happened {n} times:\n{text}");
        assert_eq!(answered[&i].account, format!("acct-{i}"));
    }
}

#[test]
fn grpc_calls_run_once_across_kill9_embedded() {
    run("db:{dir}");
}

#[test]
fn grpc_calls_run_once_across_kill9_postgres() {
    let url = std::env::var("IDEMDB_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = format!("crash_grpc_{}", std::process::id());
    let admin = |sql: String| {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e}"));
            tokio::spawn(conn);
            client.batch_execute(&sql).await.unwrap();
        });
    };
    admin(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
    ));
    let sep = if url.contains('?') { '&' } else { '?' };
    run(&format!("pg:{url}{sep}options=-c%20search_path%3D{schema}"));
    admin(format!("DROP SCHEMA {schema} CASCADE"));
}
