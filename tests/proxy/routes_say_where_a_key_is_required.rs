//! The routes file decides what a request needs: on a `hard` route a request without
//! `Idempotency-Key` gets 400 `idempotency-key-missing` and one without its principal header 401
//! `principal-missing`, and neither reaches the upstream; the first matching line wins; keys are
//! scoped by principal (one key from two callers is two payments), a changed body under a used key
//! gets 422 `idempotency-key-reused`; a `soft` route passes a keyless request through (it runs
//! every time) and makes a keyed one idempotent; a `none` route and an unmatched request pass
//! through untouched even with a key. `wait=` makes a duplicate wait for the first answer (at
//! most that long: 409 after); `fingerprint=` headers (and the default, Content-Type) are part of the request
//! compared under a key, other headers are not; after `retention=` a key is forgotten;
//! `principal=jwt-sub-unverified:NAME` (behind a gateway that verified the token) scopes keys by
//! the token's `sub`, not by the token (verified tokens: `a_principal_is_only_what_was_verified`). Without
//! `--routes`, POST is soft and GET passes through.

use std::time::Duration;

use crate::harness::{pause, routes_file, wait_until, Proxy, Req, Store, Upstream};

const ROUTES: &str = "\
# Payments need a key, and the caller's API key scopes it.
POST /payments hard principal=header:x-api-key

# Never used: the line above matches first.
POST /payments none
POST /flaky soft wait=10s fingerprint=content-type,x-tenant
GET /payments/* none
";

const MORE_ROUTES: &str = "\
POST /big soft lease=1s retention=2s
POST /payments soft wait=1s
POST /flaky hard principal=jwt-sub-unverified:authorization
";

/// A JWT (unsigned: on a `jwt-sub-unverified` route the proxy reads its subject without
/// verifying it) with `claims`.
fn jwt(claims: &str) -> String {
    fn b64url(data: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in data.chunks(3) {
            let n = chunk.iter().fold(0u32, |n, &b| n << 8 | b as u32) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }
    format!(
        "{}.{}.{}",
        b64url(br#"{"alg":"HS256","typ":"JWT"}"#),
        b64url(claims.as_bytes()),
        b64url(b"not-checked")
    )
}

#[test]
fn routes_say_where_a_key_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let routes = routes_file(dir.path(), "routes", ROUTES);
    let proxy = Proxy::start(
        &upstream.url(),
        &Store::Db(dir.path().join("store")),
        &["--routes", routes.to_str().unwrap()],
    );
    let at = proxy.addr;
    let ran = || upstream.effects().len();

    // hard: no key, or no principal: refused, nothing runs.
    let missing = Req::post("/payments")
        .header("x-api-key", "alice")
        .json("acct-a", 5)
        .send(at);
    assert_eq!(missing.status, 400, "{missing}");
    assert_eq!(missing.code(), "idempotency-key-missing");
    let anonymous = Req::post("/payments").key("k1").json("acct-a", 5).send(at);
    assert_eq!(anonymous.status, 401, "{anonymous}");
    assert_eq!(anonymous.code(), "principal-missing");
    let empty = Req::post("/payments")
        .key("k1")
        .header("x-api-key", "")
        .json("acct-a", 5)
        .send(at);
    assert_eq!(empty.status, 401, "an empty principal: {empty}");
    assert_eq!(empty.code(), "principal-missing");
    assert_eq!(ran(), 0, "no refused request reached the upstream");

    // Keyed and with a principal: runs once, retries replay it.
    let alice = |amount| {
        Req::post("/payments")
            .key("k1")
            .header("x-api-key", "alice")
            .json("acct-a", amount)
    };
    let first = alice(5).send(at);
    assert_eq!(first.status, 201, "{first}");
    assert!(!first.replayed(), "{first}");
    let again = alice(5).send(at);
    assert_eq!(again.status, 201, "{again}");
    assert!(again.replayed(), "a retry is a replay: {again}");
    assert_eq!(
        again.body, first.body,
        "the replay is the first answer byte for byte"
    );
    assert_eq!(again.header("location"), first.header("location"));
    assert_eq!(ran(), 1);

    // The same key with another body: refused, nothing runs.
    let changed = alice(6).send(at);
    assert_eq!(changed.status, 422, "{changed}");
    assert_eq!(changed.code(), "idempotency-key-reused");
    assert_eq!(ran(), 1);

    // The same key from another caller is another payment.
    let bob = || {
        Req::post("/payments")
            .key("k1")
            .header("x-api-key", "bob")
            .json("acct-b", 5)
    };
    let bobs = bob().send(at);
    assert_eq!(bobs.status, 201, "{bobs}");
    assert!(!bobs.replayed(), "bob's key k1 is not alice's: {bobs}");
    assert_ne!(bobs.body, first.body);
    let bobs_again = bob().send(at);
    assert!(bobs_again.replayed(), "{bobs_again}");
    assert_eq!(bobs_again.body, bobs.body);
    assert_eq!(upstream.payments_of("acct-b").len(), 1);
    assert_eq!(upstream.payments_of("acct-a").len(), 1);
    let after_hard = ran();
    assert_eq!(after_hard, 2);

    // soft: keyless requests pass through and run each time; a key makes them idempotent.
    let flaky = || Req::post("/flaky").json("acct-soft", 1);
    for _ in 0..2 {
        let got = flaky().send(at);
        assert_eq!(got.status, 201, "{got}");
        assert!(!got.replayed(), "{got}");
    }
    assert_eq!(
        ran(),
        after_hard + 2,
        "a keyless request on a soft route runs every time"
    );
    let keyed = flaky().key("f1").send(at);
    let keyed_again = flaky().key("f1").send(at);
    assert_eq!(keyed.status, 201, "{keyed}");
    assert!(keyed_again.replayed(), "{keyed_again}");
    assert_eq!(keyed_again.body, keyed.body);
    assert_eq!(ran(), after_hard + 3);

    // wait=10s: a duplicate of a running request waits for its answer and replays it.
    let slow = || {
        Req::post("/flaky")
            .key("w1")
            .header("X-Delay-After-Ms", "1500")
            .json("acct-wait", 1)
    };
    let (first, twin) = std::thread::scope(|s| {
        let first = s.spawn(|| slow().send(at));
        wait_until(
            Duration::from_secs(30),
            "the first w1 at the upstream",
            || (upstream.payments_of("acct-wait").len() == 1).then_some(()),
        );
        let twin = slow().send(at);
        (first.join().unwrap(), twin)
    });
    assert_eq!(first.status, 201, "{first}");
    assert_eq!(
        twin.status, 201,
        "the duplicate waited instead of 409: {twin}"
    );
    assert!(twin.replayed(), "{twin}");
    assert_eq!(twin.body, first.body);
    assert_eq!(upstream.payments_of("acct-wait").len(), 1);

    // fingerprint=content-type,x-tenant: those headers are compared under a key, others not.
    let tenant = |t: &str| {
        Req::post("/flaky")
            .key("fp1")
            .header("x-tenant", t)
            .json("acct-fp", 1)
    };
    let first = tenant("a").send(at);
    assert_eq!(first.status, 201, "{first}");
    let other_tenant = tenant("b").send(at);
    assert_eq!(other_tenant.status, 422, "another x-tenant: {other_tenant}");
    assert_eq!(other_tenant.code(), "idempotency-key-reused");
    let other_type = Req::post("/flaky")
        .key("fp1")
        .header("x-tenant", "a")
        .header("Content-Type", "text/plain")
        .body(r#"{"account":"acct-fp","amount":1}"#)
        .send(at);
    assert_eq!(other_type.status, 422, "another Content-Type: {other_type}");
    let other_header = tenant("a").header("x-note", "retry 2").send(at);
    assert!(
        other_header.status == 201 && other_header.replayed(),
        "a header not fingerprinted changes nothing: {other_header}"
    );
    assert_eq!(other_header.body, first.body);
    assert_eq!(upstream.payments_of("acct-fp").len(), 1);
    let after_options = ran();

    // none: passed through untouched, key or not: never stored, never compared.
    for (path, n) in [("/payments/1", 1), ("/payments/1", 1), ("/payments/2", 2)] {
        let got = Req::get(path).key("g1").send(at);
        assert_eq!(got.status, 200, "GET {path} on a none route: {got}");
        assert!(!got.replayed(), "GET {path} is not replayed: {got}");
        let line = &upstream.effects()[n - 1].line;
        assert_eq!(
            got.text().trim_end(),
            line,
            "GET {path} reached the upstream"
        );
    }

    // Unmatched: passed through untouched, even with a key.
    for _ in 0..2 {
        let got = Req::post("/big?bytes=10").key("b1").send(at);
        assert_eq!(got.status, 201, "{got}");
        assert!(
            !got.replayed(),
            "an unmatched request is never replayed: {got}"
        );
    }
    assert_eq!(
        ran(),
        after_options + 2,
        "an unmatched keyed request runs every time"
    );
    drop(proxy);

    // retention=2s: then the key is forgotten, and the same request runs again.
    let more = routes_file(dir.path(), "more-routes", MORE_ROUTES);
    let other = Proxy::start(
        &upstream.url(),
        &Store::Db(dir.path().join("store-more")),
        &["--routes", more.to_str().unwrap()],
    );
    let before = ran();
    let first = Req::post("/big?bytes=10").key("r1").send(other.addr);
    assert_eq!(first.status, 201, "{first}");
    pause(3000);
    let later = Req::post("/big?bytes=10").key("r1").send(other.addr);
    assert_eq!(later.status, 201, "{later}");
    assert!(
        !later.replayed(),
        "the key was forgotten after its retention: {later}"
    );
    assert_eq!(ran(), before + 2);

    // wait=1s: a duplicate waits at most that long, then gets 409.
    let slow = || {
        Req::post("/payments")
            .key("w2")
            .header("X-Delay-After-Ms", "4000")
            .json("acct-wait-bounded", 1)
    };
    std::thread::scope(|s| {
        let first = s.spawn(|| slow().send(other.addr));
        wait_until(
            Duration::from_secs(30),
            "the first w2 at the upstream",
            || (upstream.payments_of("acct-wait-bounded").len() == 1).then_some(()),
        );
        let twin = slow().send(other.addr);
        assert_eq!(twin.status, 409, "the wait is bounded: {twin}");
        assert_eq!(twin.code(), "idempotency-key-in-progress");
        assert!(twin.header("retry-after").is_some(), "{twin}");
        let first = first.join().unwrap();
        assert_eq!(first.status, 201, "{first}");
    });
    assert_eq!(upstream.payments_of("acct-wait-bounded").len(), 1);

    // principal=jwt-sub-unverified:authorization: the token's subject scopes the key.
    let as_ = |token: Option<String>| {
        let req = Req::post("/flaky").key("j1").json("acct-jwt", 1);
        match token {
            Some(t) => req.header("Authorization", &format!("Bearer {t}")),
            None => req,
        }
    };
    let before = ran();
    let alice = as_(Some(jwt(r#"{"sub":"alice","iat":1}"#))).send(other.addr);
    assert_eq!(alice.status, 201, "{alice}");
    let alice_again = as_(Some(jwt(r#"{"sub":"alice","iat":2}"#))).send(other.addr);
    assert!(
        alice_again.replayed() && alice_again.body == alice.body,
        "another token of the same subject is the same caller: {alice_again}"
    );
    let bob = as_(Some(jwt(r#"{"sub":"bob","iat":1}"#))).send(other.addr);
    assert!(
        bob.status == 201 && !bob.replayed(),
        "another subject is another caller: {bob}"
    );
    assert_eq!(ran(), before + 2);
    for (what, token) in [
        ("no token", None),
        ("a token that is no JWT", Some("not-a-jwt".to_owned())),
        ("a JWT without sub", Some(jwt(r#"{"iat":1}"#))),
    ] {
        let got = as_(token).send(other.addr);
        assert_eq!(got.status, 401, "{what}: {got}");
        assert_eq!(got.code(), "principal-missing", "{what}");
    }
    assert_eq!(ran(), before + 2, "no request without a subject ran");
    drop(other);

    // Without --routes: POST and PATCH are soft, everything else passes through.
    let default = Proxy::start(
        &upstream.url(),
        &Store::Db(dir.path().join("store-default")),
        &[],
    );
    let before = ran();
    let big = || Req::post("/big?bytes=10");
    let keyed = big().key("d1").send(default.addr);
    let keyed_again = big().key("d1").send(default.addr);
    assert_eq!(keyed.status, 201, "{keyed}");
    assert!(
        keyed_again.replayed(),
        "POST is soft by default: {keyed_again}"
    );
    assert_eq!(keyed_again.body, keyed.body);
    assert_eq!(ran(), before + 1);
    for _ in 0..2 {
        let got = big().send(default.addr);
        assert_eq!(got.status, 201, "{got}");
        assert!(!got.replayed(), "{got}");
    }
    assert_eq!(
        ran(),
        before + 3,
        "a keyless POST passes through by default"
    );
    let patched = Req::new("PATCH", "/big?bytes=10")
        .key("p1")
        .send(default.addr);
    let patched_again = Req::new("PATCH", "/big?bytes=10")
        .key("p1")
        .send(default.addr);
    assert_eq!(patched.status, 201, "{patched}");
    assert!(
        patched_again.replayed(),
        "PATCH is soft by default: {patched_again}"
    );
    assert_eq!(ran(), before + 4);
    let other_query = Req::post("/big?bytes=11").key("d1").send(default.addr);
    assert_eq!(
        other_query.status, 422,
        "the query is part of the request: {other_query}"
    );
    assert_eq!(other_query.code(), "idempotency-key-reused");
    assert_eq!(ran(), before + 4);
    let get = Req::get("/payments/1").key("g1").send(default.addr);
    let get_again = Req::get("/payments/1").key("g1").send(default.addr);
    assert_eq!(get.status, 200, "{get}");
    assert!(
        !get_again.replayed(),
        "GET passes through by default: {get_again}"
    );
}
