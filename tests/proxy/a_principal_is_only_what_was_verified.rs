//! A principal is only what the proxy verified (regression, issue 42 item 1: `jwt-sub` took a
//! token's `sub` without checking it, so a forged token got another caller's stored answer, could
//! store an answer under a key its victim would use, and could tell by 422/409/replay whether the
//! victim had used a key). The upstream's `/orders` verifies HS256 tokens itself; the proxy in
//! front of it verifies them too (`jwt-key=secret:FILE`). Alice's real token runs once and
//! replays; tokens with Alice's `sub` that are `alg: none`, signed with another key, expired, or
//! carry her signature over changed claims get 401 `principal-unverified`: never her answer, never
//! a 422 or 409 that says what she did, nothing stored (she later uses the key they tried and
//! runs fresh), nothing forwarded. The principal header sent twice is 400 `principal-ambiguous`.
//! `scope-headers=` scopes an otherwise anonymous route by the headers it names, and the proxy
//! warns at start of a keyed anonymous route, an unverified one and a keyed GET.

use base64::Engine as _;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};

use crate::harness::{routes_file, Proxy, Req, Store, Upstream};

const SECRET: &[u8] = b"the shared HS256 secret, 32 bytes or more";

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

fn hs256(sub: &str, exp: u64, secret: &[u8]) -> String {
    let claims = serde_json::json!({"sub": sub, "exp": exp});
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap()
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

fn order(key: &str, token: &str) -> Req {
    Req::post("/orders")
        .key(key)
        .header("Authorization", &format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .body(br#"{"item":"book"}"#.to_vec())
}

fn check(dir: &std::path::Path, store: Store) {
    let secret = dir.join("jwt-secret");
    std::fs::write(&secret, [SECRET, b"\n"].concat()).unwrap();
    let upstream = Upstream::start_verifying(dir, &secret);
    let routes = routes_file(
        dir,
        "routes",
        &format!(
            "POST /orders hard principal=jwt-sub:authorization jwt-key=secret:{}\n\
             POST /payments hard scope-headers=authorization\n\
             GET,POST /state soft principal=header:x-api-key\n",
            secret.display()
        ),
    );
    let proxy = Proxy::start(
        &upstream.url(),
        &store,
        &["--routes", routes.to_str().unwrap()],
    );
    let at = proxy.addr;
    let orders = || {
        upstream
            .effects()
            .into_iter()
            .filter(|e| e.kind == "order")
            .count()
    };

    let alice = hs256("alice", now() + 600, SECRET);
    let first = order("k1", &alice).send(at);
    assert_eq!(first.status, 201, "{first}");
    assert_eq!(first.json()["sub"], "alice");
    let again = order("k1", &alice).send(at);
    assert!(
        again.replayed() && again.body == first.body,
        "a real token replays: {again}"
    );
    assert_eq!(orders(), 1);

    let alg_none = format!(
        "{}.{}.",
        b64(r#"{"alg":"none","typ":"JWT"}"#),
        b64(&format!(r#"{{"sub":"alice","exp":{}}}"#, now() + 600))
    );
    let other_key = hs256("alice", now() + 600, b"another secret, 32 bytes or more!!");
    let expired = hs256("alice", now() - 3600, SECRET);
    let mut parts: Vec<String> = hs256("mallory", now() + 600, SECRET)
        .split('.')
        .map(str::to_owned)
        .collect();
    parts[1] = b64(&format!(r#"{{"sub":"alice","exp":{}}}"#, now() + 600));
    let tampered = parts.join(".");
    for (what, token) in [
        ("alg none", &alg_none),
        ("another key", &other_key),
        ("expired", &expired),
        ("changed claims", &tampered),
    ] {
        // Alice's key and body: never her answer.
        let got = order("k1", token).send(at);
        assert_eq!(got.status, 401, "{what}: {got}");
        assert_eq!(got.code(), "principal-unverified", "{what}: {got}");
        assert!(!got.replayed() && got.body != first.body, "{what}: {got}");
        // Her key with another body: no 422 telling that she used it.
        let probe = Req::post("/orders")
            .key("k1")
            .header("Authorization", &format!("Bearer {token}"))
            .body(b"{}".to_vec())
            .send(at);
        assert_eq!(probe.status, 401, "{what}: {probe}");
        // A key she will use: nothing is stored under it.
        let squat = order("k2", token).send(at);
        assert_eq!(squat.status, 401, "{what}: {squat}");
    }
    assert_eq!(orders(), 1, "no forged request was forwarded");
    let later = order("k2", &alice).send(at);
    assert_eq!(later.status, 201, "{later}");
    assert!(
        !later.replayed(),
        "nothing was stored under k2 by forged tokens: {later}"
    );
    assert_eq!(orders(), 2);

    // Another real caller with the same key is another scope.
    let bob = order("k1", &hs256("bob", now() + 600, SECRET)).send(at);
    assert!(bob.status == 201 && !bob.replayed(), "{bob}");
    assert_eq!(bob.json()["sub"], "bob");
    assert_eq!(orders(), 3);

    // The principal header twice: refused, not the first value.
    let twice = order("k3", &alice)
        .header(
            "Authorization",
            &format!("Bearer {}", hs256("bob", now() + 600, SECRET)),
        )
        .send(at);
    assert_eq!(twice.status, 400, "{twice}");
    assert_eq!(twice.code(), "principal-ambiguous");
    assert_eq!(orders(), 3);

    // scope-headers=authorization: one key under two Authorization values is two payments.
    let pay = |auth: &str| {
        Req::post("/payments")
            .key("p1")
            .header("Authorization", auth)
            .json("acct-scoped", 1)
    };
    let a = pay("Bearer token-a").send(at);
    let a_again = pay("Bearer token-a").send(at);
    let b = pay("Bearer token-b").send(at);
    assert_eq!(a.status, 201, "{a}");
    assert!(a_again.replayed(), "{a_again}");
    assert!(b.status == 201 && !b.replayed(), "{b}");
    assert_eq!(upstream.payments_of("acct-scoped").len(), 2);

    let err = proxy.stderr();
    assert!(
        err.contains("warning: line 3") && err.contains("GET is keyed"),
        "the start warns of a keyed GET: {err}"
    );
    assert!(
        !err.contains("principal=anonymous"),
        "no anonymous keyed route here: {err}"
    );
}

on_both_stores!();

/// Without `--routes` every keyed request shares one scope: the proxy says so at start.
#[test]
fn an_anonymous_keyed_route_is_warned_of_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let proxy = Proxy::start(&upstream.url(), &Store::Db(dir.path().join("store")), &[]);
    let at = proxy.addr;
    let got = Req::post("/payments")
        .key("x")
        .json("acct-anon", 1)
        .send(at);
    assert_eq!(got.status, 201, "{got}");
    let err = proxy.stderr();
    assert!(
        err.contains("warning: the built-in route") && err.contains("principal=anonymous"),
        "{err}"
    );
}
