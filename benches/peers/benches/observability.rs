//! What tracing and metrics cost a claim + complete on the embedded store (Buffered: the fastest
//! path, where any overhead shows most), measured by criterion (docs/benchmarks.md,
//! "Observability overhead"):
//!
//! ```sh
//! cargo bench -p idemdb-peers --bench observability -- --save-baseline plain       # plain build
//! cargo bench -p idemdb-peers --bench observability --features observe -- --baseline plain
//! ```
//! The first run builds the library without its `tracing` and `metrics` features; the second
//! with both and compares against the first. Each run measures, in this order:
//! - `nothing_installed`: no subscriber, no recorder (the target: no measurable change);
//! - `recorder_info_subscriber`: the Prometheus exporter's recorder and a tracing subscriber
//!   that records INFO spans (the HTTP layer's) and skips the store's DEBUG spans: a usual
//!   production setup (the target: under 10 %);
//! - `recorder_debug_subscriber`: the same recorder and a subscriber that records every span of
//!   every store operation (two per claim + complete, with their hashes), for the record.
//!
//! In the plain build the last two have nothing to call: they measure the same as the first.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

#[path = "common/observe_workload.rs"]
mod workload;
use workload::{claim_complete, fresh_store};

fn bench(c: &mut Criterion) {
    let n = AtomicU64::new(0);
    let mut g = c.benchmark_group("claim_complete");
    g.measurement_time(Duration::from_secs(8));
    {
        let (_dir, store) = fresh_store();
        g.bench_function("nothing_installed", |b| {
            b.iter(|| claim_complete(&store, &n))
        });
    }

    // A recorder for the rest of the process (the facade takes one global recorder).
    let _handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .unwrap();
    for (name, level) in [
        ("recorder_info_subscriber", LevelFilter::INFO),
        ("recorder_debug_subscriber", LevelFilter::DEBUG),
    ] {
        // A subscriber that keeps spans (the registry) and formats events to nowhere.
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::sink)
                .with_filter(level),
        );
        let (_dir, store) = fresh_store();
        tracing::subscriber::with_default(subscriber, || {
            g.bench_function(name, |b| b.iter(|| claim_complete(&store, &n)));
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
