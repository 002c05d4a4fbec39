//! Fleet-wide waits through the proxy: with `wait=` on its route, a duplicate that lands on
//! another proxy instance (another process, the same PostgreSQL schema) while the first request
//! is still running at the upstream waits for it, woken by the database when the first
//! proxy stores the answer, and gets that answer byte for byte (`Idempotent-Replayed: true`), not
//! a 409; the payment runs once. On a route without `wait=` the same duplicate gets 409 at once.

use crate::harness::{routes_file, Proxy, Req, Schema, Store, Upstream};

const ROUTES: &str = "\
POST /payments hard wait=10s
POST /flaky hard
";

#[test]
fn a_duplicate_on_another_proxy_waits_for_the_first_answer() {
    let schema = Schema::fresh(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let routes = routes_file(dir.path(), "routes", ROUTES);
    let store = Store::Postgres(schema.url());
    let args = ["--routes", routes.to_str().unwrap()];
    let a = Proxy::start(&upstream.url(), &store, &args);
    let b = Proxy::start(&upstream.url(), &store, &args);

    for (path, waits) in [("/payments", true), ("/flaky", false)] {
        let key = format!("wait-{}", &path[1..]);
        // The first request: the upstream performs the payment, then takes 1.5 s to answer.
        let first = std::thread::spawn({
            let (key, a) = (key.clone(), a.addr);
            move || {
                Req::post(path)
                    .key(&key)
                    .header("x-delay-after-ms", "1500")
                    .json("acct-w", 7)
                    .send(a)
            }
        });
        let before = upstream.effects().len();
        upstream.wait_for_effects(before + 1, "the first request's payment");
        // Its duplicate, on the other proxy, while the first is still running.
        let dup = Req::post(path).key(&key).json("acct-w", 7).send(b.addr);
        let first = first.join().unwrap();
        assert_eq!(first.status, 201, "{first}");
        if waits {
            assert_eq!(
                dup.status, 201,
                "the duplicate waited for the first answer: {dup}"
            );
            assert_eq!(dup.body, first.body, "the first answer, byte for byte");
            assert_eq!(dup.header("idempotent-replayed"), Some("true"), "{dup}");
        } else {
            assert_eq!(dup.status, 409, "no wait on this route: {dup}");
        }
        assert_eq!(
            upstream.effects().len(),
            before + 1,
            "the payment ran once for both requests"
        );
    }
}
