//! A response over the store's limit (1 MiB) is sent whole to its first client, and the request
//! is never sent again: the status and headers are stored with a marker in place of the body
//! (`Idempotent-Stored: body-omitted` on the first answer), and a retry gets them back with an
//! empty body, `Idempotent-Body-Omitted: true` and `Idempotent-Replayed: true`, without reaching
//! the upstream. Regression (issue 42, item 3): the key was released, so a retry of a completed
//! 1 MiB-plus response ran the request a second time. An upstream 5xx of any size still releases
//! the key.

use crate::harness::{Proxy, Req, Store, Upstream};

fn check(dir: &std::path::Path, store: Store) {
    let upstream = Upstream::start(dir);
    let proxy = Proxy::start(&upstream.url(), &store, &[]);
    let at = proxy.addr;
    let size = 2_000_000;
    let path = format!("/big?bytes={size}");
    let first = Req::post(&path).key("huge").send(at);
    assert_eq!(first.status, 201, "{first}");
    assert_eq!(
        first.body.len(),
        size,
        "the whole response reached the client"
    );
    assert_eq!(
        first.header("idempotent-stored"),
        Some("body-omitted"),
        "{first}"
    );
    let retry = Req::post(&path).key("huge").send(at);
    assert_eq!(retry.status, 201, "the stored status: {retry}");
    assert!(retry.replayed(), "{retry}");
    assert_eq!(
        retry.header("idempotent-body-omitted"),
        Some("true"),
        "{retry}"
    );
    assert_eq!(
        retry.header("content-type"),
        Some("application/octet-stream"),
        "the stored headers: {retry}"
    );
    assert!(retry.body.is_empty(), "{} bytes", retry.body.len());
    let bigs = || {
        upstream
            .effects()
            .into_iter()
            .filter(|e| e.kind == "big")
            .count()
    };
    assert_eq!(bigs(), 1, "the retry was not forwarded");
    // The same key with another request is still a mismatch, not a second run.
    let other = Req::post("/big?bytes=10").key("huge").send(at);
    assert_eq!(other.status, 422, "{other}");
    assert_eq!(bigs(), 1);
}

on_both_stores!();
