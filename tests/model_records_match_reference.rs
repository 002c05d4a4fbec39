//! The centerpiece: random operation sequences run against the store and a small in-memory
//! reference model of the whole API, over a tiny key space (2 tenants × 3 keys × 2 fingerprints)
//! so that conflicts, takeovers, mismatches and expiries happen all the time. Every outcome is
//! compared, and after every step the observable state of every key (`get`) must equal the model's,
//! whether or not compaction, sweeps or reopen ran in between. Versioned entities (conditional
//! puts and deletes with tombstones), atomic commits, consumer deliveries (with poison) and unique
//! reservations (plain and bound to leases) and offset watermarks (out-of-order marks, watermark
//! commits) run in the same sequences against the same model.
//!
//! The model and the runner live in `tests/model/mod.rs`, shared with the `model` fuzz target
//! (`fuzz/fuzz_targets/model.rs`), which decodes its sequences from fuzzer bytes instead and runs
//! its stores in memory. This test stays on disk: its reopens, flushes and compactions then go
//! through real files, as every real store's do.
mod model;
#[path = "model/strategy.rs"]
mod strategy;

use std::collections::BTreeMap;
use std::sync::Mutex;

use proptest::prelude::*;

static HISTOGRAM: Mutex<Option<BTreeMap<String, u64>>> = Mutex::new(None);

fn count(op: &'static str, outcome: &'static str) {
    let name = if outcome.is_empty() {
        op.to_string()
    } else {
        format!("{op}: {outcome}")
    };
    let mut h = HISTOGRAM.lock().unwrap();
    *h.get_or_insert_with(BTreeMap::new).entry(name).or_default() += 1;
}

#[test]
fn store_matches_model() {
    let cases = std::env::var("IDEMDB_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let seqs = proptest::collection::vec(strategy::op(true), 1..150);
    if let Err(e) = runner.run(&seqs, |ops| {
        model::run(ops, model::Backend::Disk, &mut count);
        Ok(())
    }) {
        panic!("the store diverged from the model: {e}");
    }
    let h = HISTOGRAM.lock().unwrap().clone().unwrap_or_default();
    println!("outcome histogram over {cases} cases:");
    for (k, v) in &h {
        println!("  {k:<34} {v}");
    }
    // The run must have reached every operation and every outcome, or it proved little.
    for must in [
        "claim: acquired new",
        "claim: acquired after release",
        "claim: takeover",
        "claim: replay completed",
        "claim: replay failure",
        "claim: in progress",
        "claim: mismatch",
        "complete: ok",
        "complete: taken_over",
        "complete: finished",
        "complete: gone",
        "fail retryable: ok",
        "fail terminal: ok",
        "renew: ok",
        "checkpoint: ok",
        "entity put: ok",
        "entity put: conflict",
        "entity delete: ok",
        "entity delete: conflict",
        "begin: process",
        "begin: duplicate",
        "begin: poisoned",
        "begin: in flight",
        "fail message: retry",
        "fail message: poisoned",
        "reserve: reserved",
        "reserve: taken",
        "reserve: taken by a lease of that key string",
        "reserve for lease: reserved",
        "reserve for lease: taken",
        "reserve for lease: taken by another lease of that key string",
        "mark processed",
        "commit watermark",
        "release: released",
        "release: not owner",
        "release: not owner, a lease of that key string",
        "release: absent",
        "commit: ok",
        "commit: condition",
        "commit: lease",
        "forget",
        "advance clock",
        "sweep",
        "compact",
        "reopen",
    ] {
        assert!(
            h.get(must).copied().unwrap_or(0) > 0,
            "the model test never reached {must:?}: {h:?}"
        );
    }
}
