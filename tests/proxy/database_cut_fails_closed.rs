//! A PostgreSQL proxy whose database goes away (every connection cut and new ones refused, by a
//! TCP relay in front of the server) fails closed: keyed requests, new or retried, get 503
//! `idempotency-store-unavailable` with `Retry-After` and never reach the upstream, and
//! `/_idemdb/health` stops answering 200. When the database is back the proxy recovers by
//! itself: the refused payment runs, the earlier one replays, the one that was at the upstream
//! when the database went away ends with one answer, and no payment ran twice.

use std::time::{Duration, Instant};

use crate::harness::{pause, pg_addr, wait_until, Got, Proxy, Relay, Req, Schema, Store, Upstream};

fn pay(key: &str) -> Req {
    Req::post("/payments")
        .key(key)
        .json(&format!("acct-{key}"), 1)
}

/// Sends `req` until the answer is neither 409 nor 503 (at most 60 s); the panic names `what`.
fn until_settled(req: &Req, at: std::net::SocketAddr, what: &str) -> Got {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = req.send(at);
        if got.status != 409 && got.status != 503 {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {} 60 s after the database came back: {got}",
            got.status
        );
        pause(100);
    }
}

#[test]
fn database_cut_fails_closed() {
    let schema = Schema::fresh(module_path!());
    let relay = Relay::start(pg_addr());
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let proxy = Proxy::start(
        &upstream.url(),
        &Store::Postgres(schema.url_via(relay.port)),
        &[],
    );
    let at = proxy.addr;
    let health = || Req::get("/_idemdb/health").send(at);

    let before = pay("before").send(at);
    assert_eq!(before.status, 201, "{before}");
    assert_eq!(health().status, 200);

    std::thread::scope(|s| {
        // A payment is at the upstream, its effect done, when the database goes away.
        let running = s.spawn(|| pay("running").header("X-Delay-After-Ms", "1000").send(at));
        wait_until(
            Duration::from_secs(30),
            "the running payment's effect",
            || (upstream.payments_of("acct-running").len() == 1).then_some(()),
        );
        relay.down();
        for key in ["new", "before", "running"] {
            let got = pay(key).send(at);
            assert_eq!(got.status, 503, "{key} while the database is away: {got}");
            assert_eq!(got.code(), "idempotency-store-unavailable", "{key}");
            assert!(got.header("retry-after").is_some(), "{key}: {got}");
        }
        let h = health();
        assert_ne!(h.status, 200, "health while the database is away: {h}");
        assert_eq!(upstream.effects().len(), 2, "nothing reached the upstream");
        // The running payment's upstream answers while the database is still away.
        pause(1500);
        relay.up();

        let ran = running.join().unwrap();
        println!("the payment running when the database went away got: {ran}");
        let retried = until_settled(&pay("running"), at, "the running payment's retry");
        if ran.status == 201 {
            assert!(
                retried.status == 201 && retried.body == ran.body && retried.replayed(),
                "the running payment's retry replays its answer: {retried}"
            );
        } else {
            assert_eq!(
                retried.problem().as_deref(),
                Some("upstream-outcome-unknown"),
                "the running payment got {ran}, its retry {retried}"
            );
        }
    });

    let new = until_settled(
        &pay("new"),
        at,
        "the payment refused while the database was away",
    );
    assert_eq!(new.status, 201, "{new}");
    assert!(!new.replayed(), "{new}");
    let again = pay("before").send(at);
    assert!(again.status == 201 && again.replayed(), "{again}");
    assert_eq!(again.body, before.body);
    assert_eq!(health().status, 200, "health once the database is back");
    for key in ["before", "running", "new"] {
        let ran = upstream.payments_of(&format!("acct-{key}")).len();
        assert_eq!(ran, 1, "{key} ran {ran} times");
    }
    assert_eq!(upstream.effects().len(), 3);
}
