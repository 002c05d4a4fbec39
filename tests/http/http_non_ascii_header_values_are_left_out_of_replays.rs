//! As docs/design.md says, a stored response keeps only header values of visible ASCII: a replayed
//! header value with other bytes (here UTF-8) is left out silently, the header's other values stay,
//! and the first response reaches its client with all of them.
use crate::common;

use axum::http::HeaderName;
use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_ascii_header_values_are_left_out_of_replays() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| {
        l.replay_headers([HeaderName::from_static("x-note")])
    })
    .await;
    let c = client();
    let send = || {
        req(srv.addr, "POST", "/encoded")
            .key("n")
            .user("alice")
            .send(&c)
    };
    let first = send().await;
    let notes = |g: &common::Got| -> Vec<Vec<u8>> {
        g.headers
            .get_all("x-note")
            .iter()
            .map(|v| v.as_bytes().to_vec())
            .collect()
    };
    assert_eq!(
        notes(&first),
        [b"plain".to_vec(), "café".as_bytes().to_vec()]
    );
    let again = send().await;
    assert!(again.replayed(), "{again:?}");
    assert_eq!(notes(&again), [b"plain".to_vec()]);
}
