//! The proxy answers `GET /_idemdb/health` (200 while its store answers) and `GET
//! /_idemdb/metrics` (Prometheus text with `idemdb_http_requests_total`) itself, on both
//! backends; neither reaches the upstream (which has no such paths).

use crate::harness::{Proxy, Req, Store, Upstream};

fn check(dir: &std::path::Path, store: Store) {
    let upstream = Upstream::start(dir);
    let proxy = Proxy::start(&upstream.url(), &store, &[]);
    let health = Req::get("/_idemdb/health").send(proxy.addr);
    assert_eq!(health.status, 200, "{health}");

    for _ in 0..2 {
        let got = Req::post("/payments")
            .key("m1")
            .json("acct-m", 1)
            .send(proxy.addr);
        assert_eq!(got.status, 201, "{got}");
    }
    let metrics = Req::get("/_idemdb/metrics").send(proxy.addr);
    assert_eq!(metrics.status, 200, "{metrics}");
    let text = metrics.text();
    assert!(
        text.lines()
            .any(|l| l.starts_with("idemdb_http_requests_total")),
        "no idemdb_http_requests_total sample in:\n{text}"
    );
    assert!(
        metrics
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/plain")),
        "Prometheus' text format: {metrics}"
    );
    assert_eq!(
        upstream.effects().len(),
        1,
        "only the payment reached the upstream"
    );
}

on_both_stores!();
