//! A response larger than the store's limit reaches the client whole, is not stored, and
//! releases the key (counted), so a retry runs the handler again; a response within the limit is
//! stored as usual.
use crate::common;

use std::sync::atomic::Ordering;

use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_response_is_served_not_stored() {
    let srv = serve(Durability::Buffered, 4096, |l| l).await;
    let c = client();
    let expected: Vec<u8> = (0..200_000).map(|i| (i % 251) as u8).collect();
    for _ in 0..2 {
        let got = req(srv.addr, "POST", "/big?n=200000")
            .key("big")
            .user("alice")
            .send(&c)
            .await;
        assert_eq!(got.status, 200);
        assert!(!got.replayed());
        assert!(
            got.body == expected,
            "the whole body, in order ({} bytes)",
            got.body.len()
        );
    }
    assert_eq!(srv.calls.big.load(Ordering::SeqCst), 2);
    assert_eq!(srv.layer.stats().oversized, 2);

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
    assert_eq!(again.body, small.body);
    assert_eq!(srv.calls.big.load(Ordering::SeqCst), 3);
}
