//! A client that closes its connection at any moment while its request is being claimed never
//! leaves the key stuck, in either durability. On a synced store the claim runs on the blocking
//! pool: a request dropped while it is there used to leave the acquired lease with nobody to
//! complete or release it, so every retry got 409 until the lease (30 s) ran out. Real sockets
//! send each request and close after a pseudo-random delay spread over a request's round trip;
//! then a retry of every key (waiting at most 3 s for one in flight) must run the handler or
//! replay, and each key's handler has run exactly once.
//!
//! A synced claim that keeps its pending record in memory (the default) writes nothing and is on
//! the pool only briefly, so the window is proven with every pending record durable
//! (`pending_in_memory(0)`: each claim syncs), and the default configuration is run as well.
use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{client, req, serve_on};
use idemdb::http::WhileRunning;
use idemdb::{Config, Durability};

fn request(key: &str) -> Vec<u8> {
    format!(
        "POST /pay HTTP/1.1\r\nhost: test\r\nx-user: alice\r\nidempotency-key: \"{key}\"\r\n\
         content-type: text/plain\r\ncontent-length: 1\r\n\r\nx"
    )
    .into_bytes()
}

/// Sends `key`'s request and waits for the first bytes of the answer: one round trip.
fn round_trip(addr: SocketAddr, key: &str) -> Duration {
    let mut s = TcpStream::connect(addr).expect("connect");
    let start = Instant::now();
    s.write_all(&request(key)).expect("send");
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).expect("answer");
    assert!(buf
        .get(..n)
        .unwrap_or_default()
        .starts_with(b"HTTP/1.1 201"));
    start.elapsed()
}

/// Sends `key`'s request and closes the connection `after` later, without reading the answer.
fn abort(addr: SocketAddr, key: &str, after: Duration) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(&request(key)).expect("send");
    std::thread::sleep(after);
    drop(s);
}

/// Runs the scenario on a store whose claims keep `pending_in_memory` pending records in memory;
/// with `must_abandon`, aborted requests go on until some claims were seen abandoned.
async fn run(durability: Durability, pending_in_memory: usize, must_abandon: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Config::new(dir.path())
        .durability(durability)
        .max_lease(Duration::from_secs(600))
        .sweep_interval(None)
        .pending_in_memory(pending_in_memory)
        .open()
        .expect("open store");
    let (addr, calls, layer) = serve_on(store.into(), |l| {
        l.while_running(WhileRunning::Wait(Duration::from_secs(3)))
    })
    .await;
    let stats_of = layer.clone();
    let keys = tokio::task::spawn_blocking(move || {
        let mut trips: Vec<Duration> = (0..7)
            .map(|i| round_trip(addr, &format!("calibrate-{i}")))
            .collect();
        trips.sort();
        let spread = u64::try_from(trips[3].as_micros())
            .unwrap_or(u64::MAX)
            .max(200)
            * 3
            / 2;
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let start = Instant::now();
        let mut keys = Vec::new();
        // Go on until some claims were seen abandoned (at most 2,000 keys, 10 s) when asked to.
        while keys.len() < 60
            || (must_abandon
                && keys.len() < 2_000
                && layer.stats().abandoned < 5
                && start.elapsed() < Duration::from_secs(10))
        {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let key = format!("gone-{}", keys.len());
            abort(addr, &key, Duration::from_micros(seed % spread));
            keys.push(key);
        }
        println!(
            "{durability:?} (pending_in_memory {pending_in_memory}): median round trip {:?}, {} aborted requests",
            trips[3],
            keys.len()
        );
        keys
    })
    .await
    .expect("aborting client");

    let c = client();
    let started = Instant::now();
    let retries: Vec<_> = keys
        .iter()
        .map(|k| {
            req(addr, "POST", "/pay")
                .key(k)
                .user("alice")
                .header("content-type", "text/plain")
                .body("x")
                .spawn(&c)
        })
        .collect();
    let mut stuck = Vec::new();
    for (k, r) in keys.iter().zip(retries) {
        let got = r.await.expect("retry");
        if got.status != 201 {
            stuck.push((k.clone(), got.status));
        }
    }
    let stats = stats_of.stats();
    println!(
        "{durability:?} (pending_in_memory {pending_in_memory}): retries took {:?}, {stats:?}",
        started.elapsed()
    );
    assert!(
        stuck.is_empty(),
        "{durability:?} (pending_in_memory {pending_in_memory}): keys stuck after their client left: {stuck:?}"
    );
    // Every key's handler ran exactly once: in the aborted request (then the retry replayed) or
    // in the retry (the aborted request never ran it).
    let ran = calls.pay.load(Ordering::SeqCst) - 7;
    assert_eq!(ran, keys.len() as u64, "{durability:?}");
    if must_abandon {
        assert!(
            stats.abandoned > 0,
            "no client left during a claim: {stats:?}"
        );
    } else if durability == Durability::Buffered {
        assert_eq!(stats.abandoned, 0, "a buffered claim is never on the pool");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_gone_during_claim_never_leaves_key_stuck() {
    run(Durability::Synced, 0, true).await;
    run(Durability::Synced, 65_536, false).await;
    run(Durability::Buffered, 65_536, false).await;
}
