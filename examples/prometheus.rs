//! idemdb's metrics in Prometheus' text format (docs/operating.md): installs the Prometheus
//! exporter's recorder for the `metrics` facade, runs a small payment workload on an embedded
//! store (new payments, client retries, a changed request, a crashed worker's lease taken over),
//! then serves `/metrics` on 127.0.0.1 for a scraper, or prints the page once.
//!
//! ```sh
//! cargo run --release --features metrics --example prometheus              # serve 127.0.0.1:9898
//! cargo run --release --features metrics --example prometheus -- --print   # print and exit
//! cargo run --release --features metrics --example prometheus -- --check   # print, check, exit
//! ```
//! `--check` fails unless the page holds every metric docs/operating.md asks teams to alert on.

use std::time::Duration;

use idemdb::{Claim, ClaimOptions, Config, Durability, ManualClock, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// The series the alerting page (docs/operating.md) is written against.
const ALERTED_ON: [&str; 9] = [
    "idemdb_claims_total{outcome=\"acquired\"}",
    "idemdb_claims_total{outcome=\"replayed\"}",
    "idemdb_claims_total{outcome=\"mismatch\"}",
    "idemdb_takeovers_total",
    "idemdb_lease_lost_total",
    "idemdb_leases_outstanding",
    "idemdb_sweep_lag_seconds",
    "idemdb_disk_bytes",
    "idemdb_operation_duration_seconds_bucket{op=\"claim\"",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mode = std::env::args().nth(1).unwrap_or_default();
    // Latencies as histograms with buckets from 5 µs to 1 s (the default is a summary).
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Prefix("idemdb_".into()),
            &[5e-6, 2e-5, 1e-4, 5e-4, 2e-3, 1e-2, 5e-2, 0.25, 1.0],
        )?
        .install_recorder()?;

    let dir = tempfile::tempdir()?;
    let clock = ManualClock::new(1_700_000_000_000);
    let store = Config::new(dir.path())
        .durability(Durability::Buffered)
        .clock(clock.clone())
        .sweep_interval(None)
        .open()?;
    let o = ClaimOptions::default().lease(Duration::from_secs(10));
    for i in 0..200 {
        let key = format!("payment-{i}");
        if let Claim::Acquired(lease) = store.claim("shop", &key, b"amount=10", o)? {
            // Every tenth worker "crashes" and leaves its lease to be taken over.
            if i % 10 != 0 {
                let receipt = Response::new(format!("charged {i}").into_bytes()).with_status(201);
                let _ = store.complete(&lease, receipt)?;
            }
        }
        if i % 3 == 0 {
            let _ = store.claim("shop", &key, b"amount=10", o)?; // a client retry
        }
        if i % 50 == 0 {
            let _ = store.claim("shop", &key, b"amount=99", o)?; // the key reused: a mismatch
        }
    }
    clock.advance(Duration::from_secs(11));
    for i in (0..200).step_by(10) {
        if let Claim::Acquired(lease) =
            store.claim("shop", format!("payment-{i}"), b"amount=10", o)?
        {
            let _ = store.complete(&lease, Response::new(b"charged on retry".to_vec()))?;
        }
    }
    store.stats()?; // sets the gauges (the background sweeper also does, every pass)

    let page = handle.render();
    match mode.as_str() {
        "--print" | "--check" => {
            println!("{page}");
            if mode == "--check" {
                let missing: Vec<_> = ALERTED_ON.iter().filter(|m| !page.contains(*m)).collect();
                if !missing.is_empty() {
                    return Err(format!("the page lacks {missing:?}").into());
                }
                eprintln!("prometheus: every alerted-on series is exported");
            }
            Ok(())
        }
        _ => serve(handle),
    }
}

/// Serves the page at http://127.0.0.1:9898/metrics (loopback only) until interrupted.
fn serve(
    handle: metrics_exporter_prometheus::PrometheusHandle,
) -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let h = handle.clone();
                async move { h.render() }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:9898").await?;
        eprintln!("serving http://127.0.0.1:9898/metrics (Ctrl-C to stop)");
        axum::serve(listener, app).await?;
        Ok(())
    })
}
