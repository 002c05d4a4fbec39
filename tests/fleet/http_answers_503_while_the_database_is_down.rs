//! PostgreSQL goes away (every connection of the store is cut and new ones are refused, through
//! a TCP proxy in front of the server) and comes back: while it is away the HTTP layer answers
//! 503 `idempotency-store-unavailable` with `Retry-After` and runs no handler; a handler that was
//! running when it went away gets its response stored once it is back (the layer asks again while
//! the lease is surely its own), so its retry replays instead of charging twice; afterwards the
//! layer recovers by itself (the pool replaces the broken connections) with no restart.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemdb::Config;
use parking_lot::Mutex;
use tokio::task::AbortHandle;

use crate::harness::{admin_url, drop_schema, fresh_schema};
use crate::http_common::{client, req, serve_on};

/// A TCP proxy to PostgreSQL that can cut every connection and refuse new ones.
struct Proxy {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let (u, cs) = (up.clone(), conns.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if !u.load(Ordering::SeqCst) {
                    continue; // refused: dropped at once
                }
                let task = tokio::spawn(async move {
                    let mut outbound = tokio::net::TcpStream::connect(upstream)
                        .await
                        .unwrap_or_else(|e| {
                            panic!("PostgreSQL at {upstream} is needed by this test: {e}")
                        });
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
                cs.lock().push(task.abort_handle());
            }
        });
        Proxy { addr, up, conns }
    }

    fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        for c in self.conns.lock().drain(..) {
            c.abort();
        }
    }

    fn up(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let schema = fresh_schema(module_path!()).await;
    let server: tokio_postgres::Config = admin_url().parse().unwrap();
    let host = match &server.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        other => panic!("the suite's PostgreSQL must be reached over TCP, not {other:?}"),
    };
    let port = server.get_ports().first().copied().unwrap_or(5432);
    let upstream = tokio::net::lookup_host((host.as_str(), port))
        .await
        .unwrap()
        .next()
        .unwrap();
    let proxy = Proxy::start(upstream).await;
    let mut url = format!(
        "host=127.0.0.1 port={} user={} dbname={} options='-c search_path={schema}'",
        proxy.addr.port(),
        server.get_user().unwrap_or("postgres"),
        server.get_dbname().unwrap_or("test"),
    );
    if let Some(pw) = server.get_password() {
        url.push_str(&format!(" password={}", String::from_utf8_lossy(pw)));
    }
    // Opening is retried while it fails transiently: its first connection has 500 ms, which a
    // machine loaded by other tests can miss (regression: failed once under two `yes` loops,
    // 2026-12-06); the short timeouts are what the outage below is measured with.
    let opening = std::time::Instant::now();
    let store = loop {
        match Config::postgres(url.clone())
            .pool_size(4)
            .connect_timeout(Duration::from_millis(500))
            .statement_timeout(Duration::from_millis(500))
            .open_async()
            .await
        {
            Ok(store) => break store,
            Err(e) if e.is_transient() && opening.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("opening the store through the proxy: {e}"),
        }
    };
    let (addr, calls, layer) = serve_on(store.clone(), |l| l).await;
    let c = client();
    let pay = |key: &str| req(addr, "POST", "/pay").key(key).user("alice").body("7");

    let before = pay("before").send(&c).await;
    assert_eq!(before.status, 201, "{before:?}");

    // A handler is running (its claim is stored) when the database goes away.
    let running = pay("running").header("x-delay-ms", "300").spawn(&c);
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.down();
    for key in ["new", "before"] {
        let got = pay(key).send(&c).await;
        assert_eq!(got.status, 503, "{key}: {got:?}");
        assert_eq!(got.problem_code(), "idempotency-store-unavailable");
        assert!(got.header("retry-after").is_some(), "{got:?}");
    }
    assert_eq!(
        calls.pay.load(Ordering::SeqCst),
        2,
        "no handler runs without a claim"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    proxy.up();

    let ran = running.await.unwrap();
    assert_eq!(ran.status, 201, "{ran:?}");
    // Back by itself: the refused request now runs, the earlier ones replay.
    let deadline = Instant::now() + Duration::from_secs(10);
    let new = loop {
        let got = pay("new").send(&c).await;
        if got.status != 503 || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(new.status, 201, "{new:?}");
    assert!(!new.replayed());
    for (key, first) in [("before", &before), ("running", &ran)] {
        let got = pay(key).send(&c).await;
        assert!(got.status == 201 && got.replayed(), "{key}: {got:?}");
        assert_eq!(&got.body, &first.body, "{key}");
    }
    assert_eq!(
        calls.pay.load(Ordering::SeqCst),
        3,
        "every payment ran once"
    );
    let stats = layer.stats();
    assert_eq!(stats.executed, 3, "{stats:?}");
    drop((layer, store));
    drop_schema(&schema).await;
}
