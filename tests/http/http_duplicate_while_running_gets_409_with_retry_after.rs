//! Under the default policy a duplicate that arrives while the first request runs gets 409 with
//! `Retry-After` and a problem document; the handler ran once, and once it is done the duplicate
//! replays.
use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_while_running_gets_409_with_retry_after() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| l).await;
    let c = client();
    let first = req(srv.addr, "POST", "/pay")
        .key("k")
        .user("alice")
        .header("x-delay-ms", "400")
        .body("x")
        .spawn(&c);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let dup = req(srv.addr, "POST", "/pay")
        .key("k")
        .user("alice")
        .body("x")
        .send(&c)
        .await;
    assert_eq!(dup.status, 409, "{dup:?}");
    assert_eq!(dup.problem_code(), "idempotency-key-in-progress");
    let secs: u64 = dup
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((1..=30).contains(&secs), "Retry-After {secs}");

    let first = first.await.expect("first request");
    assert_eq!(first.status, 201);
    let again = req(srv.addr, "POST", "/pay")
        .key("k")
        .user("alice")
        .body("x")
        .send(&c)
        .await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    assert_eq!(srv.calls.pay.load(Ordering::SeqCst), 1);
    assert_eq!(srv.layer.stats().in_progress, 1);
}
