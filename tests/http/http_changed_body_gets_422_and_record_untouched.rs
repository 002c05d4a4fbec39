//! The same key with a different body, path or query gets 422 (problem+json), the handler does
//! not run, and the stored response still replays unchanged.
use crate::common;

use std::sync::atomic::Ordering;

use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_request_gets_422_and_leaves_the_record() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| l).await;
    let c = client();
    let first = req(srv.addr, "POST", "/pay")
        .key("k1")
        .user("alice")
        .body("amount=100")
        .send(&c)
        .await;
    assert_eq!(first.status, 201);

    for (path, body) in [
        ("/pay", "amount=999"),
        ("/pay?x=1", "amount=100"),
        ("/free", "amount=100"),
    ] {
        let other = req(srv.addr, "POST", path)
            .key("k1")
            .user("alice")
            .body(body)
            .send(&c)
            .await;
        assert_eq!(other.status, 422, "{path} {body}: {other:?}");
        assert_eq!(other.problem_code(), "idempotency-key-reused");
    }
    let changed_type = req(srv.addr, "POST", "/pay")
        .key("k1")
        .user("alice")
        .header("content-type", "application/json")
        .body("amount=100")
        .send(&c)
        .await;
    assert_eq!(
        changed_type.status, 422,
        "Content-Type is fingerprinted by default"
    );

    let replay = req(srv.addr, "POST", "/pay")
        .key("k1")
        .user("alice")
        .body("amount=100")
        .send(&c)
        .await;
    assert!(replay.replayed());
    assert_eq!(replay.body, first.body);
    assert_eq!(srv.calls.pay.load(Ordering::SeqCst), 1);
    assert_eq!(srv.layer.stats().mismatched, 4);
}
