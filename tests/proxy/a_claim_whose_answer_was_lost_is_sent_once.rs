//! A claim whose answer was lost is not an unknown outcome (regression, issue 42 item 2). The
//! proxy's store reaches PostgreSQL through a TCP relay; the relay holds everything the database
//! sends for 8 s once, so a keyed request's claim commits while its answer comes later than the
//! statement's bound: the client gets 503 `idempotency-store-unavailable` and nothing is
//! forwarded. Before the fix the orphaned pending row was taken over once its 2 s lease ran out,
//! and the proxy stored 502 `upstream-outcome-unknown` for a request it never sent, replayed for
//! the whole retention with no effect at the upstream. Now the store releases the lease its lost
//! claim took (by the claim's nonce) once the database answers: the retry is a new attempt,
//! forwarded once (one effect), and its answer is stored and replayed.

use std::time::{Duration, Instant};

use crate::harness::{
    pg_addr, routes_file, wait_until, Proxy, Relay, Req, Schema, Store, Upstream,
};

#[test]
fn a_claim_whose_answer_was_lost_is_sent_once() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::fresh(module_path!());
    let relay = Relay::start(pg_addr());
    let upstream = Upstream::start(dir.path());
    let routes = routes_file(dir.path(), "routes", "POST /payments hard lease=2s\n");
    let proxy = Proxy::start(
        &upstream.url(),
        &Store::Postgres(schema.url_via(relay.port)),
        &["--routes", routes.to_str().unwrap()],
    );
    let at = proxy.addr;
    let pay = |key: &str| Req::post("/payments").key(key).json("acct-lost", 1);
    let warm = pay("warm").send(at);
    assert_eq!(warm.status, 201, "{warm}");

    let held = Duration::from_secs(8);
    relay.hold_answers(held);
    let since = Instant::now();
    let lost = pay("k1").send(at);
    assert_eq!(lost.status, 503, "the claim's answer came too late: {lost}");
    assert_eq!(lost.code(), "idempotency-store-unavailable", "{lost}");
    assert_eq!(
        upstream.payments_of("acct-lost").len(),
        1,
        "only the warm-up ran"
    );

    // After the hold and past the lease: the retry is forwarded once, as a new attempt.
    std::thread::sleep((held + Duration::from_secs(1)).saturating_sub(since.elapsed()));
    let retry = wait_until(
        Duration::from_secs(60),
        "the retry to be answered by the upstream",
        || {
            let got = pay("k1").send(at);
            // 409 while the lost claim's lease is still live (if the release came after it).
            (got.status != 409 && got.status != 503).then_some(got)
        },
    );
    assert_eq!(
        retry.status, 201,
        "a request never sent is sent, not answered as an unknown outcome: {retry}"
    );
    assert!(!retry.replayed(), "{retry}");
    let again = pay("k1").send(at);
    assert!(again.replayed() && again.body == retry.body, "{again}");
    assert_eq!(
        upstream.payments_of("acct-lost").len(),
        2,
        "the retried payment ran exactly once"
    );
}
