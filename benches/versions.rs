//! Criterion benchmarks for versioned entities: uncontended compare-and-swap, `update_entity` with
//! two threads on one key, a 4-key atomic commit, and a causal write (buffered durability).
use std::sync::atomic::{AtomicBool, Ordering};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use idemdb::{Config, Durability, Expect, UpdateOptions, VersionVector};

fn open(dir: &std::path::Path) -> idemdb::Store {
    Config::new(dir)
        .durability(Durability::Buffered)
        .sweep_interval(None)
        .open()
        .unwrap()
}

fn incr(v: Option<&[u8]>) -> Option<Vec<u8>> {
    let n = v.map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap_or([0; 8])));
    Some((n + 1).to_be_bytes().to_vec())
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("versions");
    g.throughput(Throughput::Elements(1));
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let value = vec![5u8; 128];

    let mut v = store
        .put_entity("t", "cas", Expect::Absent, value.clone())
        .unwrap()
        .unwrap();
    g.bench_function("cas/uncontended/value=128", |b| {
        b.iter(|| {
            v = store
                .put_entity("t", "cas", Expect::Version(v), value.clone())
                .unwrap()
                .unwrap();
        })
    });

    // Two threads hammering one key: the loser of each race backs off, so allow many attempts.
    let hot = UpdateOptions {
        max_attempts: 100_000,
        ..UpdateOptions::default()
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                store.update_entity("t", "hot", hot, incr).unwrap();
            }
        });
        g.bench_function("update/threads=2/keys=1", |b| {
            b.iter(|| {
                store
                    .update_entity("t", "hot", UpdateOptions::default(), incr)
                    .unwrap()
            })
        });
        stop.store(true, Ordering::Relaxed);
    });

    for k in 0..4 {
        store
            .put_entity("t", format!("k{k}"), Expect::Absent, value.clone())
            .unwrap()
            .unwrap();
    }
    g.bench_function("commit/keys=4/value=128", |b| {
        b.iter(|| {
            let mut c = store.commit();
            for k in 0..4 {
                c = c.put("t", format!("k{k}"), Expect::Any, value.clone());
            }
            c.apply().unwrap().unwrap()
        })
    });

    let mut ctx = VersionVector::new();
    g.bench_function("causal_put/siblings=1/value=128", |b| {
        b.iter(|| {
            ctx = store
                .causal_put("t", "cart", "eu", &ctx, value.clone())
                .unwrap()
                .context;
        })
    });
    g.finish();
}

criterion_group!(group, benches);
criterion_main!(group);
