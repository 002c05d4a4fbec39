//! A client that disconnects mid-request does not leave its key in progress: the handler finishes
//! and its response is stored, so the retry replays it. A handler that panics releases the key at
//! once, so the retry runs it again instead of waiting out the lease.
use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_or_panic_never_leaves_the_key_stuck() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| l).await;
    let c = client();
    let gone = tokio::time::timeout(
        Duration::from_millis(100),
        req(srv.addr, "POST", "/pay")
            .key("k")
            .user("alice")
            .header("x-delay-ms", "300")
            .body("x")
            .send(&c),
    )
    .await;
    assert!(
        gone.is_err(),
        "the client gave up before the handler finished"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let retry = req(srv.addr, "POST", "/pay")
        .key("k")
        .user("alice")
        .body("x")
        .send(&c)
        .await;
    assert_eq!(retry.status, 201);
    assert!(
        retry.replayed(),
        "the abandoned request was completed: {retry:?}"
    );
    assert_eq!(srv.calls.pay.load(Ordering::SeqCst), 1);

    for n in 1..=2 {
        let got = req(srv.addr, "POST", "/panic")
            .key("p")
            .user("alice")
            .send(&c)
            .await;
        assert_eq!(got.status, 500);
        assert_eq!(got.problem_code(), "handler-panicked");
        assert_eq!(
            srv.calls.panic.load(Ordering::SeqCst),
            n,
            "released, so the retry ran"
        );
    }
}
