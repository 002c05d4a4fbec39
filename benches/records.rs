//! Criterion benchmarks for request records: claim+complete, replay of a completed key, claim of an
//! in-progress key, in buffered and synced durability, and the floor they build on: a bare RocksDB
//! get + put + put (record and index entry) and a bare point read, with comparable options.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use idemdb::{Claim, ClaimOptions, Config, Durability, Response, Store};

const RESPONSE: usize = 256;

fn open(dir: &std::path::Path, d: Durability) -> Store {
    Config::new(dir)
        .durability(d)
        .sweep_interval(None)
        .open()
        .unwrap()
}

fn bare_rocksdb(dir: &std::path::Path) -> rocksdb::DB {
    let mut o = rocksdb::Options::default();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    o.set_compression_type(rocksdb::DBCompressionType::Lz4);
    let mut cf = o.clone();
    let mut t = rocksdb::BlockBasedOptions::default();
    t.set_bloom_filter(10.0, false);
    t.set_block_cache(&rocksdb::Cache::new_lru_cache(64 << 20));
    cf.set_block_based_table_factory(&t);
    cf.set_memtable_prefix_bloom_ratio(0.05);
    cf.set_memtable_whole_key_filtering(true);
    cf.set_write_buffer_size(64 << 20);
    let cfs = vec![
        rocksdb::ColumnFamilyDescriptor::new("default", o.clone()),
        rocksdb::ColumnFamilyDescriptor::new("records", cf.clone()),
        rocksdb::ColumnFamilyDescriptor::new("expiry", o.clone()),
    ];
    rocksdb::DB::open_cf_descriptors(&o, dir, cfs).unwrap()
}

fn claim_complete(c: &mut Criterion) {
    let mut g = c.benchmark_group("claim_complete");
    g.throughput(Throughput::Elements(1));
    for (name, d) in [
        ("buffered", Durability::Buffered),
        ("synced", Durability::Synced),
    ] {
        if d == Durability::Synced {
            g.sample_size(10).measurement_time(Duration::from_secs(5));
        }
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), d);
        let n = AtomicU64::new(0);
        let fp = [7u8; 32];
        let resp = Response::new(vec![1u8; RESPONSE]).with_status(201);
        g.bench_function(
            BenchmarkId::new("idemdb", format!("{name}/resp={RESPONSE}")),
            |b| {
                b.iter(|| {
                    let key = format!("key-{}", n.fetch_add(1, Ordering::Relaxed));
                    let Claim::Acquired(l) = store
                        .claim("bench", &key, fp, ClaimOptions::default())
                        .unwrap()
                    else {
                        panic!()
                    };
                    store.complete(&l, resp.clone()).unwrap().unwrap();
                })
            },
        );
        let dir = tempfile::tempdir().unwrap();
        let db = bare_rocksdb(dir.path());
        let mut wo = rocksdb::WriteOptions::default();
        wo.set_sync(d == Durability::Synced);
        let value = vec![1u8; RESPONSE + 64];
        g.bench_function(
            BenchmarkId::new(
                "bare_rocksdb_get_put_put",
                format!("{name}/resp={RESPONSE}"),
            ),
            |b| {
                let rec = db.cf_handle("records").unwrap();
                let idx = db.cf_handle("expiry").unwrap();
                let ro = rocksdb::ReadOptions::default();
                b.iter(|| {
                    let key = format!("key-{}", n.fetch_add(1, Ordering::Relaxed));
                    assert!(db.get_pinned_cf_opt(rec, &key, &ro).unwrap().is_none());
                    let mut batch = rocksdb::WriteBatch::default();
                    batch.put_cf(rec, &key, &value[..64]);
                    batch.put_cf(idx, &key, b"");
                    db.write_opt(batch, &wo).unwrap();
                    db.put_cf_opt(rec, &key, &value, &wo).unwrap();
                })
            },
        );
    }
    g.finish();
}

fn replay_and_in_progress(c: &mut Criterion) {
    let mut g = c.benchmark_group("replay");
    g.throughput(Throughput::Elements(1));
    let keys = 10_000u64;
    for (name, d) in [
        ("buffered", Durability::Buffered),
        ("synced", Durability::Synced),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), d);
        let fp = [7u8; 32];
        let resp = Response::new(vec![1u8; RESPONSE]).with_status(201);
        // A lease longer than the whole group: setting up 10,000 synced keys can take longer than
        // the default 30 s lease on a busy machine, and the in-progress keys must stay in progress.
        let long = ClaimOptions::default().lease(std::time::Duration::from_secs(3600));
        for i in 0..keys {
            let Claim::Acquired(l) = store.claim("bench", format!("key-{i}"), fp, long).unwrap()
            else {
                panic!()
            };
            if i % 2 == 0 {
                store.complete(&l, resp.clone()).unwrap().unwrap();
            }
        }
        let n = AtomicU64::new(0);
        g.bench_function(
            BenchmarkId::new("completed_key", format!("{name}/keys={keys}")),
            |b| {
                b.iter(|| {
                    let i = (n.fetch_add(1, Ordering::Relaxed) % (keys / 2)) * 2;
                    match store
                        .claim("bench", format!("key-{i}"), fp, ClaimOptions::default())
                        .unwrap()
                    {
                        Claim::Completed(r) => r,
                        _ => panic!(),
                    }
                })
            },
        );
        g.bench_function(
            BenchmarkId::new("in_progress_key", format!("{name}/keys={keys}")),
            |b| {
                b.iter(|| {
                    let i = (n.fetch_add(1, Ordering::Relaxed) % (keys / 2)) * 2 + 1;
                    match store
                        .claim("bench", format!("key-{i}"), fp, ClaimOptions::default())
                        .unwrap()
                    {
                        Claim::InProgress { retry_after } => retry_after,
                        _ => panic!(),
                    }
                })
            },
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let db = bare_rocksdb(dir.path());
    let rec = db.cf_handle("records").unwrap();
    for i in 0..keys {
        db.put_cf(rec, format!("key-{i}"), vec![1u8; RESPONSE + 64])
            .unwrap();
    }
    let n = AtomicU64::new(0);
    let ro = rocksdb::ReadOptions::default();
    g.bench_function(
        BenchmarkId::new("bare_rocksdb_point_read", format!("keys={keys}")),
        |b| {
            b.iter(|| {
                let i = n.fetch_add(1, Ordering::Relaxed) % keys;
                db.get_pinned_cf_opt(rec, format!("key-{i}"), &ro)
                    .unwrap()
                    .unwrap()
                    .len()
            })
        },
    );
    g.finish();
}

criterion_group!(benches, claim_complete, replay_and_in_progress);
criterion_main!(benches);
