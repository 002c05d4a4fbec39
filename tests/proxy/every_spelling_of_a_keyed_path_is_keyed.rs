//! Routes match what the upstream would route (regression, issue 42 item 4: `POST /payments
//! hard` did not match `/payments/`, `//payments` or `/%70ayments`, which passed through
//! unkeyed while the upstream ran them as payments). Every spelling the upstream routes to
//! `/payments` needs a key there and is made idempotent; a keyed request that no keyed route
//! takes passes through and is counted in `idemdb_proxy_keys_ignored_total` and logged.

use crate::harness::{routes_file, Proxy, Req, Store, Upstream};

#[test]
fn every_spelling_of_a_keyed_path_is_keyed() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let routes = routes_file(
        dir.path(),
        "routes",
        "POST /payments hard principal=header:x-api-key\n* /health none\n",
    );
    let proxy = Proxy::start(
        &upstream.url(),
        &Store::Db(dir.path().join("store")),
        &[
            "--routes",
            routes.to_str().unwrap(),
            "--log",
            "idemdb::proxy=warn",
        ],
    );
    let at = proxy.addr;
    let spellings = [
        "/payments/",
        "//payments",
        "/%70ayments",
        "/x/../payments",
        "/payments//",
    ];
    for (i, path) in spellings.iter().enumerate() {
        let account = format!("acct-spelling-{i}");
        let keyless = Req::post(path)
            .header("x-api-key", "alice")
            .json(&account, 1)
            .send(at);
        assert_eq!(keyless.status, 400, "{path} needs a key: {keyless}");
        assert_eq!(keyless.code(), "idempotency-key-missing");
        let key = format!("spelling-{i}");
        let keyed = || {
            Req::post(path)
                .key(&key)
                .header("x-api-key", "alice")
                .json(&account, 1)
        };
        let first = keyed().send(at);
        assert_eq!(
            first.status, 201,
            "the upstream routes {path} to /payments: {first}"
        );
        let again = keyed().send(at);
        assert!(again.replayed(), "{path}: {again}");
        assert_eq!(upstream.payments_of(&account).len(), 1, "{path}");
    }

    // A key on a path no keyed route takes: passed through, counted, logged.
    for path in ["/health", "/nowhere"] {
        let got = Req::post(path).key("ignored").json("acct-x", 1).send(at);
        assert!(!got.replayed(), "{got}");
    }
    let metrics = Req::get("/_idemdb/metrics").send(at);
    let text = String::from_utf8_lossy(&metrics.body);
    for reason in ["none_route", "no_route"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("idemdb_proxy_keys_ignored_total")
                    && l.contains(&format!("reason=\"{reason}\""))
                    && l.ends_with(" 1")),
            "{reason} counted once: {text}"
        );
    }
    assert!(
        proxy.stderr().contains("matched no keyed route"),
        "{}",
        proxy.stderr()
    );
}
