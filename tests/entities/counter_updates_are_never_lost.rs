//! No lost updates: 8 threads each increment a counter entity 5,000 times through `update_entity`;
//! the final value is exactly 40,000 and the version went up exactly 40,000 times. The same with
//! 1,000 counters.
use idemdb::{ManualClock, UpdateOptions};

use crate::common;

fn increment(v: Option<&[u8]>) -> Option<Vec<u8>> {
    let n = v.map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap()));
    Some((n + 1).to_be_bytes().to_vec())
}

fn run(counters: u64) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let opts = UpdateOptions {
        max_attempts: 10_000,
        ..UpdateOptions::default()
    };
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let store = &store;
            s.spawn(move || {
                for i in 0..5_000u64 {
                    let id = format!("counter-{}", (t * 5_000 + i) % counters);
                    store.update_entity("t", &id, opts, increment).unwrap();
                }
            });
        }
    });
    let (mut total, mut versions) = (0, 0);
    for c in 0..counters {
        let v = store
            .get_entity("t", format!("counter-{c}"))
            .unwrap()
            .unwrap();
        let n = u64::from_be_bytes(v.value.as_slice().try_into().unwrap());
        assert_eq!(v.version, n, "counter {c}: one version per increment");
        total += n;
        versions += v.version;
    }
    assert_eq!((total, versions), (40_000, 40_000));
}

#[test]
fn one_counter_under_eight_threads() {
    run(1);
}

#[test]
fn a_thousand_counters_under_eight_threads() {
    run(1_000);
}
