//! A response larger than the store's limit reaches its first client whole. When its status is
//! one the layer stores, its status and headers are stored with a marker in place of the body: a
//! retry replays them with an empty body and `Idempotent-Body-Omitted: true`, and the handler
//! does not run again (regression, issue 42 item 3: the key was released, so a retry of a
//! completed operation ran it a second time). A status that releases the key (5xx) still
//! releases it. A response within the limit is stored as usual.
use crate::common;

use std::sync::atomic::Ordering;

use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_response_runs_once_and_replays_without_its_body() {
    let srv = serve(Durability::Buffered, 4096, |l| l).await;
    let c = client();
    let expected: Vec<u8> = (0..200_000).map(|i| (i % 251) as u8).collect();
    let first = req(srv.addr, "POST", "/big?n=200000")
        .key("big")
        .user("alice")
        .send(&c)
        .await;
    assert_eq!(first.status, 200);
    assert!(!first.replayed());
    assert!(
        first.body == expected,
        "the whole body, in order ({} bytes)",
        first.body.len()
    );
    assert_eq!(first.header("idempotent-stored"), Some("body-omitted"));
    assert_eq!(first.header("idempotency-key-retention"), Some("86400"));
    let retry = req(srv.addr, "POST", "/big?n=200000")
        .key("big")
        .user("alice")
        .send(&c)
        .await;
    assert_eq!(retry.status, 200, "the stored status");
    assert!(retry.replayed());
    assert_eq!(retry.header("idempotency-replayed"), Some("true"));
    assert_eq!(retry.header("idempotent-body-omitted"), Some("true"));
    assert!(retry.body.is_empty(), "{} bytes", retry.body.len());
    assert_eq!(
        srv.calls.big.load(Ordering::SeqCst),
        1,
        "the retry did not run the handler again"
    );
    assert_eq!(srv.layer.stats().oversized, 1);

    // A 5xx releases its key whatever its size: a retry runs again.
    for _ in 0..2 {
        let got = req(srv.addr, "POST", "/big?n=200000&status=503")
            .key("big-503")
            .user("alice")
            .send(&c)
            .await;
        assert_eq!(got.status, 503);
        assert!(!got.replayed());
        assert_eq!(got.header("idempotent-stored"), Some("false"));
        assert!(got.body == expected);
    }
    assert_eq!(srv.calls.big.load(Ordering::SeqCst), 3);
    assert_eq!(srv.layer.stats().oversized, 3);

    let small = req(srv.addr, "POST", "/big?n=1000")
        .key("small")
        .user("alice")
        .send(&c)
        .await;
    let again = req(srv.addr, "POST", "/big?n=1000")
        .key("small")
        .user("alice")
        .send(&c)
        .await;
    assert!(again.replayed());
    assert!(again.header("idempotent-body-omitted").is_none());
    assert_eq!(again.body, small.body);
    assert_eq!(srv.calls.big.load(Ordering::SeqCst), 4);
}
