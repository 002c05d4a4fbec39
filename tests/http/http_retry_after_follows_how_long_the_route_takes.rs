//! `Retry-After` on a 409 follows how long the route's handlers take instead of the remaining
//! lease (30 s): the duplicate of a 400 ms request is told 1 s, and on a route whose handler took
//! 1.8 s the duplicate of the next request, sent about 0.1 s into it, is told 2 s.
use crate::common;

use std::time::Duration;

use common::{client, req, serve, Got};
use idemdb::Durability;

fn retry_after(got: &Got) -> u64 {
    assert_eq!(got.status, 409, "{got:?}");
    got.header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("whole seconds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_follows_how_long_the_route_takes() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| l).await;
    let c = client();
    // A slower route (the same handler under another path) learns its own duration, while the
    // fast route is checked.
    let slow = req(srv.addr, "POST", "/free")
        .key("slow-1")
        .user("alice")
        .header("x-delay-ms", "1800")
        .spawn(&c);
    let warm = req(srv.addr, "POST", "/pay")
        .key("warm")
        .user("alice")
        .header("x-delay-ms", "50")
        .send(&c)
        .await;
    assert_eq!(warm.status, 201);

    // A fast route: its duplicate is told to come back in a second, not in 30.
    let first = req(srv.addr, "POST", "/pay")
        .key("fast")
        .user("alice")
        .header("x-delay-ms", "400")
        .spawn(&c);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let dup = req(srv.addr, "POST", "/pay")
        .key("fast")
        .user("alice")
        .send(&c)
        .await;
    assert_eq!(retry_after(&dup), 1);
    assert_eq!(first.await.expect("first").status, 201);

    assert_eq!(slow.await.expect("slow").status, 201);
    let second = req(srv.addr, "POST", "/free")
        .key("slow-2")
        .user("alice")
        .header("x-delay-ms", "1800")
        .spawn(&c);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let dup = req(srv.addr, "POST", "/free")
        .key("slow-2")
        .user("alice")
        .send(&c)
        .await;
    assert_eq!(retry_after(&dup), 2, "1.8 s estimate, about 0.1 s in");
    // Meanwhile the fast route keeps its own estimate.
    let third = req(srv.addr, "POST", "/pay")
        .key("fast-2")
        .user("alice")
        .header("x-delay-ms", "400")
        .spawn(&c);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let dup = req(srv.addr, "POST", "/pay")
        .key("fast-2")
        .user("alice")
        .send(&c)
        .await;
    assert_eq!(retry_after(&dup), 1);
    assert_eq!(second.await.expect("second").status, 201);
    assert_eq!(third.await.expect("third").status, 201);
}
