//! Where a key is required, a missing or malformed `Idempotency-Key` gets 400 with a problem
//! document saying what is wrong, and the handler never runs; other methods pass through
//! untouched, and without `require_key` a keyless POST passes through too.
use crate::common;

use std::sync::atomic::Ordering;

use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_malformed_key_gets_400() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| {
        l.require_key(true).max_key_len(32)
    })
    .await;
    let c = client();
    let missing = req(srv.addr, "POST", "/pay")
        .user("alice")
        .body("x")
        .send(&c)
        .await;
    assert_eq!(missing.status, 400);
    assert_eq!(missing.problem_code(), "idempotency-key-missing");

    let long = "k".repeat(33);
    let bad: [&[u8]; 7] = [
        b"\"\"",
        b"\"unterminated",
        b"\"a\"b",
        b"a b",
        b"a,b",
        b"\"caf\xc3\xa9\"",
        long.as_bytes(),
    ];
    for value in bad {
        let got = req(srv.addr, "POST", "/pay")
            .raw_header("idempotency-key", value)
            .user("alice")
            .body("x")
            .send(&c)
            .await;
        assert_eq!(
            got.status,
            400,
            "{:?}: {got:?}",
            String::from_utf8_lossy(value)
        );
        assert_eq!(got.problem_code(), "idempotency-key-invalid");
    }
    let twice = req(srv.addr, "POST", "/pay")
        .key("a")
        .key("b")
        .user("alice")
        .send(&c)
        .await;
    assert_eq!(twice.status, 400);
    assert!(twice.text().contains("exactly once"), "{}", twice.text());
    assert_eq!(
        srv.calls.pay.load(Ordering::SeqCst),
        0,
        "no refused request ran"
    );

    // GET is not a configured method: it passes through without a key.
    let get = req(srv.addr, "GET", "/free").user("alice").send(&c).await;
    assert_eq!(get.status, 201);
    assert_eq!(srv.calls.pay.load(Ordering::SeqCst), 1);
    assert_eq!(srv.layer.stats().refused, 9);

    // Without require_key a keyless POST is passed through (and not protected).
    let open = serve(Durability::Buffered, 1 << 20, |l| l).await;
    for _ in 0..2 {
        let got = req(open.addr, "POST", "/pay")
            .user("alice")
            .body("x")
            .send(&c)
            .await;
        assert_eq!(got.status, 201);
        assert!(!got.replayed());
    }
    assert_eq!(open.calls.pay.load(Ordering::SeqCst), 2);
    // And a request without a principal is refused when it carries a key.
    let anonymous = req(open.addr, "POST", "/pay")
        .key("k")
        .body("x")
        .send(&c)
        .await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.problem_code(), "principal-missing");
}
