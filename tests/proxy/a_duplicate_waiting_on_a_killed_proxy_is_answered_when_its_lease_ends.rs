//! A holder that crashes wakes its waiters when its lease runs out: a payment is at the upstream
//! through proxy A when A is SIGKILLed; its duplicate, sent to proxy B (another process, the same
//! PostgreSQL schema) on a route with `wait=30s` and `lease=2s`, waits, and is answered once the
//! dead proxy's lease ends by the database's clock, long before its bound: B takes the key over,
//! does not send the request again (its outcome is unknown: `upstream-outcome-unknown`, 502,
//! stored), and the payment runs once. Were the waiter not woken at the lease's end it would get
//! 409 at its bound.

use crate::harness::{routes_file, Proxy, Req, Schema, Store, Upstream};

#[test]
fn a_duplicate_waiting_on_a_killed_proxy_is_answered_when_its_lease_ends() {
    let schema = Schema::fresh(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let routes = routes_file(
        dir.path(),
        "routes",
        "POST /payments hard lease=2s wait=30s\n",
    );
    let store = Store::Postgres(schema.url());
    let args = ["--routes", routes.to_str().unwrap()];
    let mut a = Proxy::start(&upstream.url(), &store, &args);
    let b = Proxy::start(&upstream.url(), &store, &args);
    let payment = || Req::post("/payments").key("crash-1").json("acct-c", 9);

    let first = std::thread::spawn({
        let at = a.addr;
        move || payment().header("x-delay-after-ms", "5000").try_send(at)
    });
    upstream.wait_for_effects(1, "the first request's payment");
    let dup = std::thread::spawn({
        let at = b.addr;
        move || payment().send(at)
    });
    // The duplicate is at B (waiting, or about to find the lease); A dies holding it.
    std::thread::sleep(std::time::Duration::from_millis(300));
    a.kill();
    assert!(
        first.join().unwrap().is_err(),
        "A was killed before it answered"
    );
    let dup = dup.join().unwrap();
    assert_eq!(
        (dup.status, dup.problem().as_deref()),
        (502, Some("upstream-outcome-unknown")),
        "the waiting duplicate took the dead proxy's key over at its lease's end: {dup}"
    );
    let again = payment().send(b.addr);
    assert!(
        again.status == 502 && again.replayed() && again.body == dup.body,
        "the unknown outcome is stored and replayed: {again}"
    );
    assert_eq!(upstream.effects().len(), 1, "the payment ran once");
}
