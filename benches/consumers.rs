//! Criterion benchmarks for consumers and unique constraints: begin+complete of a new message,
//! duplicate detection, a watermark mark and check, and a reservation (buffered durability).
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use idemdb::{Begin, Config, ConsumerOptions, Durability, Response};

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("consumers");
    g.throughput(Throughput::Elements(1));
    let dir = tempfile::tempdir().unwrap();
    let store = Config::new(dir.path())
        .durability(Durability::Buffered)
        .sweep_interval(None)
        .open()
        .unwrap();
    let opts = ConsumerOptions::default();
    let n = AtomicU64::new(0);
    g.bench_function("begin_complete/new_message/resp=64", |b| {
        b.iter(|| {
            let id = n.fetch_add(1, Ordering::Relaxed).to_string();
            let Begin::Process(l) = store.begin("g", &id, opts).unwrap() else {
                panic!()
            };
            store
                .complete(&l, Response::new(vec![0u8; 64]))
                .unwrap()
                .unwrap();
        })
    });
    let done = n.load(Ordering::Relaxed).max(1);
    g.bench_function("begin/duplicate", |b| {
        b.iter(|| {
            let id = (n.fetch_add(7, Ordering::Relaxed) % done).to_string();
            matches!(store.begin("g", &id, opts).unwrap(), Begin::Completed(_))
        })
    });
    let off = AtomicU64::new(0);
    g.bench_function("watermark/mark_processed/partitions=1", |b| {
        b.iter(|| {
            store
                .mark_processed("g", "t", 0, off.fetch_add(1, Ordering::Relaxed))
                .unwrap()
        })
    });
    g.bench_function("watermark/is_processed/partitions=1", |b| {
        b.iter(|| store.is_processed("g", "t", 0, 12_345).unwrap())
    });
    g.bench_function("unique/reserve/new_value", |b| {
        b.iter(|| {
            let v = n.fetch_add(1, Ordering::Relaxed).to_be_bytes();
            store.reserve("email", &[&v], "owner").unwrap()
        })
    });
    g.finish();
}

criterion_group!(group, benches);
criterion_main!(group);
