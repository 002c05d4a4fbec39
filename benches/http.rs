//! Criterion benchmarks for the HTTP layer (feature `http`), in process: an axum router called as a
//! tower service (no sockets), with and without the layer. `new_key` sends a fresh key per request
//! (claim, handler, complete); `replay` repeats one completed key; `no_layer` is the same router
//! without idempotency, the floor. The socket-level load test is `scripts/http-load`.
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::Request;
use axum::routing::post;
use axum::Router;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use http_body_util::BodyExt;
use idemdb::http::IdempotencyLayer;
use idemdb::{Config, Durability};
use tower_service::Service;

const BODY: &str = "{\"amount\":100,\"currency\":\"EUR\",\"customer\":\"cus_8812\"}";

async fn handler(body: axum::body::Bytes) -> (axum::http::StatusCode, String) {
    (
        axum::http::StatusCode::CREATED,
        format!("{{\"charged\":{}}}", body.len()),
    )
}

fn request(key: Option<&str>) -> Request<Body> {
    let mut b = Request::post("/payments").header("content-type", "application/json");
    if let Some(k) = key {
        b = b.header("idempotency-key", k);
    }
    b.body(Body::from(BODY)).unwrap()
}

async fn call(router: &mut Router, req: Request<Body>) -> u16 {
    std::future::poll_fn(|cx| <Router as Service<Request<Body>>>::poll_ready(router, cx))
        .await
        .unwrap();
    let resp = router.call(req).await.unwrap();
    let status = resp.status().as_u16();
    let _ = resp.into_body().collect().await.unwrap();
    status
}

fn layer_bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("http");
    g.throughput(Throughput::Elements(1));
    let mut plain = Router::new().route("/payments", post(handler));
    g.bench_function(
        BenchmarkId::new("no_layer", format!("body={}", BODY.len())),
        |b| b.iter(|| rt.block_on(call(&mut plain, request(None)))),
    );
    for (name, d) in [
        ("buffered", Durability::Buffered),
        ("synced", Durability::Synced),
    ] {
        if d == Durability::Synced {
            g.sample_size(10);
        }
        let dir = tempfile::tempdir().unwrap();
        let store = Config::new(dir.path())
            .durability(d)
            .sweep_interval(None)
            .open()
            .unwrap();
        let mut router = Router::new()
            .route("/payments", post(handler))
            .layer(IdempotencyLayer::new(store));
        let n = AtomicU64::new(0);
        g.bench_function(
            BenchmarkId::new("new_key", format!("{name}/body={}", BODY.len())),
            |b| {
                b.iter(|| {
                    let key = format!("k{}", n.fetch_add(1, Ordering::Relaxed));
                    assert_eq!(rt.block_on(call(&mut router, request(Some(&key)))), 201);
                })
            },
        );
        assert_eq!(rt.block_on(call(&mut router, request(Some("same")))), 201);
        g.bench_function(
            BenchmarkId::new("replay", format!("{name}/body={}", BODY.len())),
            |b| b.iter(|| rt.block_on(call(&mut router, request(Some("same"))))),
        );
    }
    g.finish();
}

criterion_group!(benches, layer_bench);
criterion_main!(benches);
