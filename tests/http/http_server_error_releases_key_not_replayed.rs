//! Under the default policy a 5xx is not stored: the key is released and a retry runs the
//! handler again. A custom policy can store it instead.
use crate::common;

use std::sync::atomic::Ordering;

use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_error_releases_the_key() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| l).await;
    let c = client();
    for n in 1..=3 {
        let got = req(srv.addr, "POST", "/boom")
            .key("k")
            .user("alice")
            .send(&c)
            .await;
        assert_eq!(got.status, 503);
        assert!(!got.replayed());
        assert_eq!(got.text(), format!("down {n}"));
    }
    assert_eq!(srv.calls.boom.load(Ordering::SeqCst), 3);
    assert_eq!(srv.layer.stats().released, 3);

    let storing = serve(Durability::Buffered, 1 << 20, |l| l.store_status(|_| true)).await;
    let first = req(storing.addr, "POST", "/boom")
        .key("k")
        .user("alice")
        .send(&c)
        .await;
    let second = req(storing.addr, "POST", "/boom")
        .key("k")
        .user("alice")
        .send(&c)
        .await;
    assert_eq!((first.status, second.status), (503, 503));
    assert!(second.replayed());
    assert_eq!(second.body, first.body);
    assert_eq!(storing.calls.boom.load(Ordering::SeqCst), 1);
}
