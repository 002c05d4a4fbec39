//! A retry after completion replays the stored status, the allow-listed headers and the body byte
//! for byte, marked `Idempotent-Replayed: true`, and never replays `Set-Cookie`.
use crate::common;

use std::sync::atomic::Ordering;

use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_completion_replays_the_stored_response() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| l).await;
    let c = client();
    let first = req(srv.addr, "POST", "/pay")
        .key("abc")
        .user("alice")
        .body("amount=7")
        .send(&c)
        .await;
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    assert_eq!(
        first.header("set-cookie"),
        Some("session=1"),
        "the first response is untouched"
    );

    for _ in 0..3 {
        let retry = req(srv.addr, "POST", "/pay")
            .key("abc")
            .user("alice")
            .body("amount=7")
            .send(&c)
            .await;
        assert_eq!(retry.status, 201);
        assert!(retry.replayed(), "{retry:?}");
        assert_eq!(retry.body, first.body);
        assert_eq!(retry.header("location"), Some("/pay/1"));
        assert_eq!(retry.header("content-type"), Some("text/plain"));
        assert_eq!(
            retry.header("set-cookie"),
            None,
            "cookies are never replayed"
        );
    }
    // A bare (unquoted) key is the same key.
    let bare = req(srv.addr, "POST", "/pay")
        .header("idempotency-key", "abc")
        .user("alice")
        .body("amount=7")
        .send(&c)
        .await;
    assert!(bare.replayed());
    assert_eq!(srv.calls.pay.load(Ordering::SeqCst), 1);
}
