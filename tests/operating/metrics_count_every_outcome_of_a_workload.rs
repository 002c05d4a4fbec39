//! A scripted workload on the embedded store, read back through the `metrics` facade's debugging
//! recorder: every outcome counter (`idemdb_claims_total{outcome}`, `idemdb_lease_ends_total`,
//! takeovers, lost leases, renewals, checkpoints, removals), one latency sample per operation,
//! the gauges after `stats`, and each counter equal to the store's own `Counters`.

use std::collections::HashMap;
use std::time::Duration;

use idemdb::{Claim, ClaimOptions, FailKind, ManualClock, Response};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;

use crate::common::{acquire, open};

/// `name{label=value,...}` → value, for counters and gauges; `name{...}` → sample count for
/// histograms.
fn read(recorder: &DebuggingRecorder) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let v = match (kind, value) {
            (MetricKind::Counter, DebugValue::Counter(n)) => n as f64,
            (MetricKind::Gauge, DebugValue::Gauge(g)) => g.into_inner(),
            (MetricKind::Histogram, DebugValue::Histogram(h)) => h.len() as f64,
            other => panic!("unexpected {other:?}"),
        };
        out.insert(name, v);
    }
    out
}

#[test]
fn workload() {
    let _serial = crate::serial();
    let recorder = DebuggingRecorder::new();
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let counters = metrics::with_local_recorder(&recorder, || {
        let store = open(dir.path(), &clock);
        let o = ClaimOptions::default();
        // a: acquired, completed, replayed twice, mismatched once.
        let a = acquire(&store, "t", "a", b"fp");
        store
            .complete(&a, Response::new(b"ok".to_vec()))
            .unwrap()
            .unwrap();
        for _ in 0..2 {
            assert!(matches!(
                store.claim("t", "a", b"fp", o).unwrap(),
                Claim::Completed(_)
            ));
        }
        assert_eq!(store.claim("t", "a", b"xx", o).unwrap(), Claim::Mismatch);
        // b: acquired, renewed, checkpointed, in progress for a duplicate, released.
        let mut b = acquire(&store, "t", "b", b"fp");
        store
            .renew(&mut b, Duration::from_secs(20))
            .unwrap()
            .unwrap();
        store
            .checkpoint(&b, "half", b"s".to_vec())
            .unwrap()
            .unwrap();
        assert!(matches!(
            store.claim("t", "b", b"fp", o).unwrap(),
            Claim::InProgress { .. }
        ));
        store.fail(&b, FailKind::Retryable).unwrap().unwrap();
        // c: acquired, failed terminally.
        let c = acquire(&store, "t", "c", b"fp");
        let failure = FailKind::Terminal(Response::new(b"no".to_vec()));
        store.fail(&c, failure).unwrap().unwrap();
        // d: acquired, its lease runs out, taken over; the old holder's completion is refused.
        let d = acquire(&store, "t", "d", b"fp");
        clock.advance(Duration::from_secs(11));
        let d2 = acquire(&store, "t", "d", b"fp");
        assert!(store
            .complete(&d, Response::new(b"late".to_vec()))
            .unwrap()
            .is_err());
        // An operator forgets a; everything expires and is swept.
        assert!(store.forget("t", "a").unwrap());
        store
            .complete(&d2, Response::new(b"ok".to_vec()))
            .unwrap()
            .unwrap();
        clock.advance(Duration::from_secs(7200));
        assert_eq!(store.sweep(100).unwrap(), 3);
        // An invalid call is counted as an error of its operation.
        assert!(store.claim("", "k", b"fp", o).is_err());
        store.stats().unwrap().counters
    });
    let m = read(&recorder);
    let get = |k: &str| {
        m.get(k)
            .copied()
            .unwrap_or_else(|| panic!("no {k} in {m:#?}"))
    };
    for (outcome, n) in [
        ("acquired", 5.0),
        ("replayed", 2.0),
        ("mismatch", 1.0),
        ("in_progress", 1.0),
    ] {
        assert_eq!(
            get(&format!("idemdb_claims_total{{outcome={outcome}}}")),
            n,
            "{outcome}"
        );
    }
    for (outcome, n) in [("completed", 2.0), ("released", 1.0), ("failed", 1.0)] {
        assert_eq!(
            get(&format!("idemdb_lease_ends_total{{outcome={outcome}}}")),
            n,
            "{outcome}"
        );
    }
    assert_eq!(get("idemdb_takeovers_total{}"), 1.0);
    assert_eq!(get("idemdb_lease_lost_total{}"), 1.0);
    assert_eq!(get("idemdb_renewals_total{}"), 1.0);
    assert_eq!(get("idemdb_checkpoints_total{}"), 1.0);
    assert_eq!(get("idemdb_removed_total{by=operator}"), 1.0);
    assert_eq!(get("idemdb_removed_total{by=sweep}"), 3.0);
    assert_eq!(
        get("idemdb_errors_total{class=invalid_input,op=claim}"),
        1.0
    );
    // One latency sample per call: 10 claims (one refused), 3 completions, 2 failures.
    assert_eq!(get("idemdb_operation_duration_seconds{op=claim}"), 10.0);
    assert_eq!(get("idemdb_operation_duration_seconds{op=complete}"), 3.0);
    assert_eq!(get("idemdb_operation_duration_seconds{op=fail}"), 2.0);
    assert_eq!(get("idemdb_operation_duration_seconds{op=sweep}"), 1.0);
    // The gauges, set by `stats`: nothing outstanding, nothing waiting for a sweep.
    assert_eq!(get("idemdb_leases_outstanding{}"), 0.0);
    assert_eq!(get("idemdb_sweep_lag_seconds{}"), 0.0);
    assert!(get("idemdb_records_estimated{}") >= 0.0);
    // The facade's counters and the store's own agree.
    assert_eq!(counters.acquired, 5);
    assert_eq!(counters.replayed, 2);
    assert_eq!(counters.takeover, 1);
    assert_eq!(counters.lease_lost, 1);
    assert_eq!(counters.leases_outstanding(), 0);
}
