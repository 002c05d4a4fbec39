//! A handler that runs for several lease lengths keeps its key: the layer renews the lease, so a
//! duplicate meanwhile gets 409 instead of taking the key over and running the handler twice.
use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_is_renewed_while_the_handler_runs() {
    let srv = serve(Durability::Synced, 1 << 20, |l| {
        l.lease(Duration::from_millis(300))
    })
    .await;
    let c = client();
    let first = req(srv.addr, "POST", "/pay")
        .key("slow")
        .user("alice")
        .header("x-delay-ms", "1500")
        .body("x")
        .spawn(&c);
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let dup = req(srv.addr, "POST", "/pay")
            .key("slow")
            .user("alice")
            .body("x")
            .send(&c)
            .await;
        assert_eq!(dup.status, 409, "still leased, not taken over: {dup:?}");
    }
    let first = first.await.expect("first");
    assert_eq!(first.status, 201);
    assert_eq!(srv.calls.pay.load(Ordering::SeqCst), 1);
    let stats = srv.layer.stats();
    assert_eq!((stats.executed, stats.lease_lost), (1, 0), "{stats:?}");
}
