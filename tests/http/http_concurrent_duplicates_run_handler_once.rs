//! Two identical POSTs sent at the same moment over real sockets: the handler runs once, and both
//! clients get the same status and body (the second waits for the first and replays it). Runs in
//! synced durability, so the store's disk syncs go through tokio's blocking pool.
use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{client, req, serve};
use idemdb::http::WhileRunning;
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_run_the_handler_once() {
    let srv = serve(Durability::Synced, 1 << 20, |l| {
        l.while_running(WhileRunning::Wait(Duration::from_secs(10)))
    })
    .await;
    let c = client();
    for round in 0..5 {
        let key = format!("order-{round}");
        let send = || {
            req(srv.addr, "POST", "/pay")
                .key(&key)
                .user("alice")
                .header("x-delay-ms", "200")
                .body("amount=100")
                .send(&c)
        };
        let (a, b) = tokio::join!(send(), send());
        assert_eq!(a.status, 201, "{a:?}");
        assert_eq!(b.status, a.status);
        assert_eq!(a.body, b.body);
        assert_eq!(a.header("location"), b.header("location"));
        assert!(
            a.replayed() ^ b.replayed(),
            "exactly one is a replay: {a:?} {b:?}"
        );
        assert_eq!(srv.calls.pay.load(Ordering::SeqCst), round + 1);
    }
    let stats = srv.layer.stats();
    assert_eq!((stats.executed, stats.replayed), (5, 5), "{stats:?}");
}
