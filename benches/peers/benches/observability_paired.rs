//! The observability overhead in one process, in alternating rounds (docs/benchmarks.md,
//! "Observability overhead"): claim + complete on the embedded store (Buffered), with nothing
//! installed against a Prometheus recorder and an INFO tracing subscriber installed for the
//! round only (`metrics::with_local_recorder`, `tracing::subscriber::with_default`). Each
//! variant has a store of its own, and both get the same number of operations, so neither runs
//! on a store the other filled more. Rounds alternate which variant goes first; the result is the
//! median of the per-round ratios, which machine drift between rounds does not move.
//!
//! ```sh
//! cargo bench -p idemdb-peers --bench observability_paired                      # plain build
//! cargo bench -p idemdb-peers --bench observability_paired --features observe  # with both facades
//! ```
//! In the plain build the two variants run the same code: their ratio is the method's noise.

use std::sync::atomic::AtomicU64;
use std::time::Instant;

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

#[path = "common/observe_workload.rs"]
mod workload;
use workload::{claim_complete, fresh_store};

const ROUNDS: usize = 21;
const OPS: u64 = 20_000;

/// Nanoseconds per claim + complete over `OPS` operations.
fn round(store: &idemdb::Store, n: &AtomicU64) -> f64 {
    let t = Instant::now();
    for _ in 0..OPS {
        claim_complete(store, n);
    }
    t.elapsed().as_nanos() as f64 / OPS as f64
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let ((_da, plain), (_db, observed)) = (fresh_store(), fresh_store());
    let n = AtomicU64::new(0);
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let subscriber = || {
        tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::sink)
                .with_filter(LevelFilter::INFO),
        )
    };
    let installed = |store: &idemdb::Store| {
        metrics::with_local_recorder(&recorder, || {
            tracing::subscriber::with_default(subscriber(), || round(store, &n))
        })
    };
    // A warm-up round of each.
    round(&plain, &n);
    installed(&observed);
    let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..ROUNDS {
        let (x, y) = if r % 2 == 0 {
            let x = round(&plain, &n);
            (x, installed(&observed))
        } else {
            let y = installed(&observed);
            (round(&plain, &n), y)
        };
        a.push(x);
        b.push(y);
        ratios.push(y / x);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let features = if cfg!(feature = "observe") {
        "with the tracing and metrics features"
    } else {
        "plain build (both variants run the same code)"
    };
    println!(
        "observability_paired, {features}: {ROUNDS} rounds of {OPS} claim+complete each; \
         nothing installed {:.0} ns, recorder + INFO subscriber {:.0} ns (medians); \
         median per-round ratio {:.3}, range {:.3} to {:.3}",
        median(&mut a),
        median(&mut b),
        median(&mut ratios.clone()),
        ratios.iter().copied().fold(f64::INFINITY, f64::min),
        ratios.iter().copied().fold(0.0, f64::max),
    );
}
