//! A compressed response replays with its `Content-Encoding` under the default replay headers (the
//! body is stored as sent, so without the header a replay would hand the client gzip bytes as if
//! they were plain).
use crate::common;

use std::sync::atomic::Ordering;

use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_response_replays_with_its_encoding() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| l).await;
    let c = client();
    let send = || {
        req(srv.addr, "POST", "/encoded")
            .key("z")
            .user("alice")
            .send(&c)
    };
    let first = send().await;
    assert_eq!(first.header("content-encoding"), Some("gzip"));
    let again = send().await;
    assert!(again.replayed(), "{again:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("content-encoding"), Some("gzip"));
    assert_eq!(srv.calls.encoded.load(Ordering::SeqCst), 1);
}
