//! With `WhileRunning::Wait(d)`, a duplicate waits for the running request at most `d`: if the
//! first is still running then, the duplicate gets 409 (it neither hangs until the handler ends
//! nor runs the handler a second time).
use crate::common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{client, req, serve};
use idemdb::http::WhileRunning;
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_a_duplicate_is_bounded() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| {
        l.while_running(WhileRunning::Wait(Duration::from_millis(200)))
    })
    .await;
    let c = client();
    let first = req(srv.addr, "POST", "/pay")
        .key("k")
        .user("alice")
        .header("x-delay-ms", "2000")
        .body("x")
        .spawn(&c);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let dup = req(srv.addr, "POST", "/pay")
        .key("k")
        .user("alice")
        .body("x")
        .send(&c)
        .await;
    let waited = started.elapsed();
    assert_eq!(dup.status, 409, "{dup:?}");
    assert!(dup.header("retry-after").is_some());
    assert!(
        waited >= Duration::from_millis(190),
        "it waited for the bound: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(1500),
        "not for the handler: {waited:?}"
    );
    let first = first.await.expect("first");
    assert_eq!(first.status, 201);
    assert_eq!(srv.calls.pay.load(Ordering::SeqCst), 1);
}
