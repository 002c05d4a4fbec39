//! What the upstream's failures do to a key: a 4xx answer is the upstream's definite answer,
//! stored and replayed like a success; a 5xx answer is passed to the client and releases the
//! key (a retry is forwarded again, and its success is stored); an upstream that refuses the
//! connection gets 502 `upstream-unreachable` and releases the key; an upstream that does not
//! answer within `--upstream-timeout` gets 504 `upstream-timeout`, which with the default
//! `on-unknown=fail` is stored as the key's outcome (retries replay it and are never forwarded,
//! so the payment, which the upstream finishes later, runs once), and with `on-unknown=release`
//! releases the key (a retry is forwarded again: the route's owner chose that risk).

use crate::harness::{closed_port, routes_file, wait_until, Proxy, Req, Store, Upstream};
use std::time::Duration;

fn pay(key: &str, account: &str) -> Req {
    Req::post("/payments").key(key).json(account, 1)
}

#[test]
fn upstream_errors_release_the_key_and_unknown_outcomes_stay() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let fail = Proxy::start(
        &upstream.url(),
        &Store::Db(dir.path().join("store-fail")),
        &["--upstream-timeout", "1s"],
    );
    let routes = routes_file(
        dir.path(),
        "routes",
        "POST,PATCH /** soft on-unknown=release\n",
    );
    let release = Proxy::start(
        &upstream.url(),
        &Store::Db(dir.path().join("store-release")),
        &[
            "--upstream-timeout",
            "1s",
            "--routes",
            routes.to_str().unwrap(),
        ],
    );
    let settled = |account: &str, n: usize| {
        wait_until(
            Duration::from_secs(30),
            &format!("{n} effects of {account} (the upstream's delayed run finishing)"),
            || (upstream.payments_of(account).len() >= n).then_some(()),
        );
    };

    // on-unknown=fail: the timeout is the key's stored outcome.
    let slow = || pay("t-fail", "acct-t-fail").header("X-Delay-Ms", "3000");
    let first = slow().send(fail.addr);
    assert_eq!(first.status, 504, "{first}");
    assert_eq!(first.code(), "upstream-timeout");
    let retry = slow().send(fail.addr);
    assert_eq!(retry.status, 504, "{retry}");
    assert!(retry.replayed(), "the stored timeout is replayed: {retry}");
    assert_eq!(retry.body, first.body);
    settled("acct-t-fail", 1);
    let later = pay("t-fail", "acct-t-fail").send(fail.addr);
    assert_eq!(later.status, 504, "still the stored outcome: {later}");
    assert!(later.replayed(), "{later}");
    assert_eq!(
        upstream.payments_of("acct-t-fail").len(),
        1,
        "a key whose outcome is unknown is never forwarded again"
    );

    // on-unknown=release: the timeout releases the key; the retry runs the payment again.
    let first = pay("t-release", "acct-t-release")
        .header("X-Delay-Ms", "3000")
        .send(release.addr);
    assert_eq!(first.status, 504, "{first}");
    assert_eq!(first.code(), "upstream-timeout");
    let retry = pay("t-release", "acct-t-release").send(release.addr);
    assert_eq!(
        retry.status, 201,
        "the released key is forwarded again: {retry}"
    );
    assert!(!retry.replayed(), "{retry}");
    let again = pay("t-release", "acct-t-release").send(release.addr);
    assert!(again.replayed(), "the success is stored: {again}");
    assert_eq!(again.body, retry.body);
    settled("acct-t-release", 2);

    // A 4xx is the upstream's definite answer: stored and replayed.
    let refused = || {
        Req::post("/payments")
            .key("bad-json")
            .header("Content-Type", "application/json")
            .body("not json")
    };
    let first = refused().send(fail.addr);
    assert_eq!(first.status, 400, "{first}");
    assert!(!first.replayed(), "{first}");
    let again = refused().send(fail.addr);
    assert!(
        again.status == 400 && again.replayed() && again.body == first.body,
        "a 4xx is stored: {again}"
    );

    // A 5xx is passed through and releases the key.
    for _ in 0..2 {
        let got = Req::post("/fail").key("f1").send(fail.addr);
        assert_eq!(got.status, 500, "{got}");
        assert_eq!(got.text(), "upstream failed on purpose\n", "passed through");
        assert!(!got.replayed(), "a 5xx is never replayed: {got}");
    }
    let flaky = || {
        Req::post("/flaky")
            .key("fl1")
            .header("X-Fail-Times", "2")
            .json("acct-flaky", 1)
    };
    let answers: Vec<_> = (0..4).map(|_| flaky().send(fail.addr)).collect();
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses,
        [503, 503, 201, 201],
        "each 503 released the key, the success is stored: {answers:#?}"
    );
    assert!(!answers[2].replayed() && answers[3].replayed());
    assert_eq!(answers[3].body, answers[2].body);
    assert_eq!(upstream.payments_of("acct-flaky").len(), 1);

    // Connection refused: 502 upstream-unreachable, the key released.
    let port = closed_port();
    let nowhere = Proxy::start(
        &format!("http://127.0.0.1:{port}"),
        &Store::Db(dir.path().join("store-nowhere")),
        &[],
    );
    for _ in 0..2 {
        let got = pay("u1", "acct-u").send(nowhere.addr);
        assert_eq!(got.status, 502, "{got}");
        assert_eq!(got.code(), "upstream-unreachable");
        assert!(!got.replayed(), "{got}");
    }
    let late_dir = tempfile::tempdir().unwrap();
    let late = Upstream::start_on(late_dir.path(), port);
    let got = pay("u1", "acct-u").send(nowhere.addr);
    assert_eq!(
        got.status, 201,
        "the released key is forwarded once the upstream is up: {got}"
    );
    assert!(!got.replayed(), "{got}");
    assert_eq!(late.payments_of("acct-u").len(), 1);
}
