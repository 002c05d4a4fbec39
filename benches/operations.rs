//! Criterion benchmarks for every public operation that `records.rs`, `versions.rs`,
//! `consumers.rs` and `http.rs` do not already measure: the rest of the request-record lifecycle
//! (fail, renew, checkpoint, execute, get, forget, commit with a lease), maintenance (sweep, stats,
//! sync, compact, physical counts, reopen), the rest of the entity, consumer, unique, offset and
//! causal APIs, and the pure helpers (version vectors, keys, fingerprints, entity tags).
//!
//! Single thread, 32-byte fingerprint, buffered durability unless a name says `synced`; every
//! store is in its own temporary directory with the background sweeper off. Each benchmark checks
//! the outcome it measures (an `assert!` on the returned variant or value), so an error path can
//! never be timed by mistake. Setup that is not the operation (claiming the lease a `fail` ends,
//! writing the record a `forget` deletes) runs outside the timed section (`iter_batched`).
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkGroup, BenchmarkId, Criterion,
    SamplingMode, Throughput,
};
use idemdb::{
    derive_key, etag, expect_from_headers, fingerprint, mint_key, parse_etag, Begin, Causality,
    Claim, ClaimOptions, Config, ConsumerOptions, Durability, Execution, Expect, FailKind, Lease,
    ManualClock, MessageFailed, RecordState, Released, Reservation, Response, Store, SystemClock,
    UpdateOptions, VersionVector,
};

const FP: [u8; 32] = [7u8; 32];
const RESPONSE: usize = 256;
const VALUE: usize = 128;

fn open(dir: &Path, d: Durability) -> Store {
    Config::new(dir)
        .durability(d)
        .sweep_interval(None)
        .open()
        .unwrap()
}

fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::Buffered => "buffered",
        _ => "synced",
    }
}

/// A group with short warm-up and measurement, so the whole file runs in a few minutes.
fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(1));
    g
}

fn next_key(n: &AtomicU64, prefix: &str) -> String {
    format!("{prefix}-{}", n.fetch_add(1, Ordering::Relaxed))
}

fn acquire(store: &Store, tenant: &str, key: &str) -> Lease {
    match store
        .claim(tenant, key, FP, ClaimOptions::default())
        .unwrap()
    {
        Claim::Acquired(l) => l,
        other => panic!("expected Acquired for {key}, got {other:?}"),
    }
}

fn response(size: usize) -> Response {
    Response::new(vec![1u8; size]).with_status(201)
}

/// Claims and completes `keys` keys `key-0..` of tenant `bench` with a `resp`-byte response.
fn preload_records(store: &Store, keys: u64, resp: usize) {
    let r = response(resp);
    for i in 0..keys {
        let l = acquire(store, "bench", &format!("key-{i}"));
        store.complete(&l, r.clone()).unwrap().unwrap();
    }
}

/// The request-record lifecycle beyond claim and complete.
fn records(c: &mut Criterion) {
    let mut g = group(c, "records_ops");
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Buffered);
    let n = AtomicU64::new(0);

    g.bench_function("fail/retryable/buffered", |b| {
        b.iter_batched(
            || acquire(&store, "bench", &next_key(&n, "fr")),
            |l| assert_eq!(store.fail(&l, FailKind::Retryable).unwrap(), Ok(())),
            BatchSize::SmallInput,
        )
    });
    let failure = response(RESPONSE).with_status(422);
    g.bench_function(
        BenchmarkId::new("fail/terminal", format!("buffered/resp={RESPONSE}")),
        |b| {
            b.iter_batched(
                || acquire(&store, "bench", &next_key(&n, "ft")),
                |l| {
                    let kind = FailKind::Terminal(failure.clone());
                    assert_eq!(store.fail(&l, kind).unwrap(), Ok(()));
                },
                BatchSize::SmallInput,
            )
        },
    );

    let mut lease = acquire(&store, "bench", "renewed");
    g.bench_function("renew/buffered/extra=30s", |b| {
        b.iter(|| {
            store
                .renew(&mut lease, Duration::from_secs(30))
                .unwrap()
                .unwrap();
        })
    });
    let held = acquire(&store, "bench", "checkpointed");
    let state = vec![3u8; RESPONSE];
    g.bench_function(
        BenchmarkId::new("checkpoint", format!("buffered/state={RESPONSE}")),
        |b| {
            b.iter(|| {
                store
                    .checkpoint(&held, "charged", state.clone())
                    .unwrap()
                    .unwrap();
            })
        },
    );

    // execute: claim, run the closure, complete. Each variant writes to a store of its own, closed
    // afterwards, so the flushes and compactions its writes cause do not run under later benches.
    for (d, resp) in [
        (Durability::Buffered, RESPONSE),
        (Durability::Buffered, 16_384),
        (Durability::Synced, RESPONSE),
    ] {
        if d == Durability::Synced {
            g.sample_size(20);
        }
        let wdir = tempfile::tempdir().unwrap();
        let writes = open(wdir.path(), d);
        let r = response(resp);
        g.bench_function(
            BenchmarkId::new(
                "execute/new_key",
                format!("{}/resp={resp}", durability_name(d)),
            ),
            |b| {
                b.iter(|| {
                    let key = next_key(&n, "ex");
                    match writes
                        .execute("bench", &key, FP, |_| Ok(r.clone()))
                        .unwrap()
                    {
                        Execution::Ran(Ok(_)) => {}
                        other => panic!("expected Ran(Ok), got {other:?}"),
                    }
                })
            },
        );
        writes.close().unwrap();
    }
    g.sample_size(100);
    let keys = 1_000u64;
    for resp in [RESPONSE, 16_384] {
        let r = response(resp);
        for i in 0..keys {
            let key = format!("rp{resp}-{i}");
            let ran = store.execute("bench", &key, FP, |_| Ok(r.clone())).unwrap();
            assert!(matches!(ran, Execution::Ran(Ok(_))));
        }
        g.bench_function(
            BenchmarkId::new(
                "execute/replay",
                format!("buffered/resp={resp}/keys={keys}"),
            ),
            |b| {
                b.iter(|| {
                    let i = n.fetch_add(1, Ordering::Relaxed) % keys;
                    let key = format!("rp{resp}-{i}");
                    match store.execute("bench", &key, FP, |_| Ok(r.clone())).unwrap() {
                        Execution::Completed(replay) => {
                            assert_eq!(replay.response.body.len(), resp);
                            replay
                        }
                        other => panic!("expected Replayed, got {other:?}"),
                    }
                })
            },
        );
    }

    g.bench_function(
        BenchmarkId::new("forget/completed", format!("buffered/resp={RESPONSE}")),
        |b| {
            let r = response(RESPONSE);
            b.iter_batched(
                || {
                    let key = next_key(&n, "fg");
                    let l = acquire(&store, "bench", &key);
                    store.complete(&l, r.clone()).unwrap().unwrap();
                    key
                },
                |key| assert!(store.forget("bench", &key).unwrap()),
                BatchSize::SmallInput,
            )
        },
    );

    // A store that only holds `keys` completed records, for the reads.
    let keys = 10_000u64;
    let rdir = tempfile::tempdir().unwrap();
    let reads = open(rdir.path(), Durability::Buffered);
    preload_records(&reads, keys, RESPONSE);
    g.bench_function(
        BenchmarkId::new(
            "get/completed",
            format!("buffered/resp={RESPONSE}/keys={keys}"),
        ),
        |b| {
            b.iter(|| {
                let i = n.fetch_add(1, Ordering::Relaxed) % keys;
                let info = reads.get("bench", format!("key-{i}")).unwrap().unwrap();
                assert!(matches!(info.state, RecordState::Completed(_)));
                info
            })
        },
    );
    g.bench_function(BenchmarkId::new("stats", format!("keys={keys}")), |b| {
        b.iter(|| {
            let s = reads.stats().unwrap();
            assert!(s.counters.completed >= keys);
            s
        })
    });
    g.bench_function("now", |b| b.iter(|| black_box(reads.now())));
    g.sample_size(20);
    g.bench_function(
        BenchmarkId::new("physical_counts", format!("keys={keys}")),
        |b| b.iter(|| assert_eq!(reads.physical_counts().unwrap(), (keys, keys))),
    );
    g.sample_size(100);

    // Atomic commits that end a lease.
    let value = vec![5u8; VALUE];
    g.bench_function(
        BenchmarkId::new(
            "commit/complete+put",
            format!("buffered/resp={RESPONSE}/value={VALUE}"),
        ),
        |b| {
            let r = response(RESPONSE);
            b.iter_batched(
                || acquire(&store, "bench", &next_key(&n, "cc")),
                |l| {
                    store
                        .commit()
                        .complete(&l, r.clone())
                        .put("t", "outbox", Expect::Any, value.clone())
                        .apply()
                        .unwrap()
                        .unwrap()
                },
                BatchSize::SmallInput,
            )
        },
    );
    g.bench_function("commit/fail+check+delete+reserve/buffered", |b| {
        b.iter_batched(
            || acquire(&store, "bench", &next_key(&n, "cf")),
            |l| {
                let v = n.fetch_add(1, Ordering::Relaxed).to_be_bytes();
                store
                    .commit()
                    .fail(&l, FailKind::Retryable)
                    .check("t", "checked", Expect::Any)
                    .delete("t", "deleted", Expect::Any)
                    .reserve("email", &[&v], "owner")
                    .apply()
                    .unwrap()
                    .unwrap()
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// Slow maintenance operations: sweep, sync, compact, reopen.
fn maintenance(c: &mut Criterion) {
    let mut g = group(c, "maintenance");
    g.sample_size(10).sampling_mode(SamplingMode::Flat);

    // Sweep: every timed call deletes 1000 expired records (claimed and completed with a 60 s
    // retention, then the manual clock moved 61 s on). `swept_before=0` compacts after every
    // timed sweep, so each one starts on a clean index; `swept_before=100000` first sweeps
    // 100,000 records in a fresh store (untimed, no compaction), leaving their tombstones, which
    // a sweep that started at the index's start would walk again (sweeps resume where the last
    // one stopped since this benchmark showed that).
    let limit = 1_000u64;
    g.throughput(Throughput::Elements(limit));
    for history in [0u64, 100_000] {
        g.bench_function(
            BenchmarkId::new(
                "sweep",
                format!("limit={limit}/expired={limit}/swept_before={history}"),
            ),
            |b| {
                b.iter_custom(|iters| {
                    let dir = tempfile::tempdir().unwrap();
                    let clock = ManualClock::default();
                    let store = Config::new(dir.path())
                        .durability(Durability::Buffered)
                        .clock(clock.clone())
                        .sweep_interval(None)
                        .open()
                        .unwrap();
                    let expire = |prefix: &str, n: u64| {
                        let opts = ClaimOptions::default().retention(Duration::from_secs(60));
                        let r = response(RESPONSE);
                        for k in 0..n {
                            let key = format!("{prefix}-{k}");
                            let Claim::Acquired(l) = store.claim("bench", &key, FP, opts).unwrap()
                            else {
                                panic!("expected Acquired for {key}")
                            };
                            store.complete(&l, r.clone()).unwrap().unwrap();
                        }
                        clock.advance(Duration::from_secs(61));
                    };
                    if history > 0 {
                        expire("h", history);
                        assert_eq!(store.sweep(history as usize).unwrap() as u64, history);
                    }
                    let mut total = Duration::ZERO;
                    for i in 0..iters {
                        expire(&format!("s{i}"), limit);
                        let t = Instant::now();
                        let swept = store.sweep(limit as usize).unwrap();
                        total += t.elapsed();
                        assert_eq!(swept as u64, limit);
                        if history == 0 {
                            store.compact().unwrap();
                        }
                    }
                    total
                })
            },
        );
    }
    // The common case of a periodic sweep: nothing has expired yet.
    let keys = 10_000u64;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Buffered);
    preload_records(&store, keys, RESPONSE);
    g.throughput(Throughput::Elements(1));
    g.sampling_mode(SamplingMode::Auto).sample_size(20);
    g.bench_function(
        BenchmarkId::new("sweep", format!("limit={limit}/expired=0/keys={keys}")),
        |b| b.iter(|| assert_eq!(store.sweep(limit as usize).unwrap(), 0)),
    );

    // Sync of the WAL after one buffered write (a claim), as after a batch of buffered work.
    let n = AtomicU64::new(0);
    g.bench_function("sync/buffered/after_1_write", |b| {
        b.iter_batched(
            || acquire(&store, "bench", &next_key(&n, "sy")),
            |l| {
                store.sync().unwrap();
                l
            },
            BatchSize::PerIteration,
        )
    });

    // Compact: 1000 entities rewritten, then flushed and compacted (the live data stays at 1000
    // entities, so every iteration does the same work).
    g.sampling_mode(SamplingMode::Flat).sample_size(10);
    let entities = 1_000;
    let cdir = tempfile::tempdir().unwrap();
    let cstore = open(cdir.path(), Durability::Buffered);
    let value = vec![5u8; VALUE];
    g.bench_function(
        BenchmarkId::new("compact", format!("entities={entities}/value={VALUE}")),
        |b| {
            b.iter_batched(
                || {
                    for i in 0..entities {
                        cstore
                            .put_entity("t", format!("e{i}"), Expect::Any, value.clone())
                            .unwrap()
                            .unwrap();
                    }
                },
                |()| cstore.compact().unwrap(),
                BatchSize::PerIteration,
            )
        },
    );
    drop(cstore);

    // Open + close of an existing store holding `keys` completed records.
    for keys in [1_000u64, 100_000] {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), Durability::Buffered);
        preload_records(&s, keys, RESPONSE);
        s.close().unwrap();
        g.bench_function(
            BenchmarkId::new("open+close", format!("buffered/keys={keys}")),
            |b| {
                b.iter(|| {
                    let s = open(dir.path(), Durability::Buffered);
                    assert!(s.get("bench", "key-0").unwrap().is_some());
                    s.close().unwrap();
                })
            },
        );
    }
    g.finish();
}

fn incr(v: Option<&[u8]>) -> Option<Vec<u8>> {
    let n = v.map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap_or([0; 8])));
    Some((n + 1).to_be_bytes().to_vec())
}

/// Versioned entities: reads, creates, unconditional puts, deletes, uncontended updates.
fn entities(c: &mut Criterion) {
    let mut g = group(c, "entities");
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Buffered);
    let n = AtomicU64::new(0);
    let keys = 10_000u64;
    for size in [VALUE, 4_096] {
        let value = vec![5u8; size];
        for i in 0..keys {
            store
                .put_entity("r", format!("{size}-{i}"), Expect::Absent, value.clone())
                .unwrap()
                .unwrap();
        }
        g.bench_function(
            BenchmarkId::new("get_entity", format!("value={size}/keys={keys}")),
            |b| {
                b.iter(|| {
                    let i = n.fetch_add(1, Ordering::Relaxed) % keys;
                    let v = store
                        .get_entity("r", format!("{size}-{i}"))
                        .unwrap()
                        .unwrap();
                    assert_eq!(v.value.len(), size);
                    v
                })
            },
        );
        // A store of its own, closed afterwards (see `execute/new_key`).
        let wdir = tempfile::tempdir().unwrap();
        let writes = open(wdir.path(), Durability::Buffered);
        g.bench_function(
            BenchmarkId::new("put_entity/create", format!("buffered/value={size}")),
            |b| {
                b.iter(|| {
                    let id = next_key(&n, "c");
                    assert_eq!(
                        writes
                            .put_entity("t", &id, Expect::Absent, value.clone())
                            .unwrap(),
                        Ok(1)
                    );
                })
            },
        );
        writes.close().unwrap();
    }
    let value = vec![5u8; VALUE];
    let sdir = tempfile::tempdir().unwrap();
    let synced = open(sdir.path(), Durability::Synced);
    g.sample_size(20);
    g.bench_function(
        BenchmarkId::new("put_entity/any", format!("synced/value={VALUE}")),
        |b| {
            b.iter(|| {
                synced
                    .put_entity("t", "any", Expect::Any, value.clone())
                    .unwrap()
                    .unwrap()
            })
        },
    );
    g.sample_size(100);
    g.bench_function(
        BenchmarkId::new("delete_entity", format!("buffered/value={VALUE}")),
        |b| {
            b.iter_batched(
                || {
                    let id = next_key(&n, "d");
                    store
                        .put_entity("t", &id, Expect::Absent, value.clone())
                        .unwrap()
                        .unwrap();
                    id
                },
                |id| {
                    assert_eq!(
                        store.delete_entity("t", &id, Expect::Any).unwrap(),
                        Ok(Some(2))
                    )
                },
                BatchSize::SmallInput,
            )
        },
    );
    g.bench_function("update_entity/uncontended/buffered/value=8", |b| {
        b.iter(|| {
            let v = store
                .update_entity("t", "counter", UpdateOptions::default(), incr)
                .unwrap()
                .unwrap();
            assert_eq!(v.value.len(), 8);
            v
        })
    });
    g.finish();
    synced.close().unwrap();
}

/// Consumers: a failed delivery, released for a retry or poisoned.
fn consumers(c: &mut Criterion) {
    let mut g = group(c, "consumer_ops");
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Buffered);
    let n = AtomicU64::new(0);
    for (name, max_attempts) in [("will_retry", 5), ("poisoned", 1)] {
        let opts = ConsumerOptions {
            max_attempts,
            ..ConsumerOptions::default()
        };
        g.bench_function(
            BenchmarkId::new(
                "fail_message",
                format!("{name}/buffered/max_attempts={max_attempts}"),
            ),
            |b| {
                b.iter_batched(
                    || match store.begin("g", next_key(&n, name), opts).unwrap() {
                        Begin::Process(l) => l,
                        other => panic!("expected Process, got {other:?}"),
                    },
                    |l| {
                        let r = store.fail_message(&l, opts).unwrap().unwrap();
                        let expected = if max_attempts == 1 {
                            MessageFailed::Poisoned { attempts: 1 }
                        } else {
                            MessageFailed::WillRetry { attempts: 1 }
                        };
                        assert_eq!(r, expected);
                    },
                    BatchSize::SmallInput,
                )
            },
        );
    }
    g.finish();
}

/// Unique constraints: a reservation bound to a lease, a release, an owner lookup.
fn unique(c: &mut Criterion) {
    let mut g = group(c, "unique_ops");
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Buffered);
    let n = AtomicU64::new(0);
    g.bench_function("reserve_for/new_value/buffered", |b| {
        b.iter_batched(
            || acquire(&store, "bench", &next_key(&n, "rf")),
            |l| {
                let v = n.fetch_add(1, Ordering::Relaxed).to_be_bytes();
                let r = store.reserve_for(&l, "order", &[&v]).unwrap();
                assert_eq!(r, Ok(Reservation::Reserved));
                l
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("release/reserved_value/buffered", |b| {
        b.iter_batched(
            || {
                let v = n.fetch_add(1, Ordering::Relaxed).to_be_bytes();
                let r = store.reserve("email", &[&v], "owner").unwrap();
                assert_eq!(r, Reservation::Reserved);
                v
            },
            |v| {
                assert_eq!(
                    store.release_reservation("email", &[&v], "owner").unwrap(),
                    Released::Released
                )
            },
            BatchSize::SmallInput,
        )
    });
    let values = 10_000u64;
    for i in 0..values {
        let r = store.reserve("user", &[&i.to_be_bytes()], "owner").unwrap();
        assert_eq!(r, Reservation::Reserved);
    }
    g.bench_function(
        BenchmarkId::new("reservation_owner", format!("values={values}")),
        |b| {
            b.iter(|| {
                let i = n.fetch_add(1, Ordering::Relaxed) % values;
                let owner = store
                    .reservation_owner("user", &[&i.to_be_bytes()])
                    .unwrap()
                    .unwrap();
                assert_eq!(owner, b"owner");
                owner
            })
        },
    );
    g.finish();
}

/// Offset watermarks: a committed watermark (blind merge) and a window read.
fn offsets(c: &mut Criterion) {
    let mut g = group(c, "offsets");
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Buffered);
    let w = AtomicU64::new(0);
    g.bench_function("commit_watermark/buffered/partitions=1", |b| {
        b.iter(|| {
            store
                .commit_watermark("g", "t", 0, w.fetch_add(1, Ordering::Relaxed))
                .unwrap()
        })
    });
    // Reads of a compacted window (one stored value, no merge operands to fold).
    let rdir = tempfile::tempdir().unwrap();
    let reads = open(rdir.path(), Durability::Buffered);
    for (partition, gaps) in [(0u32, 0u64), (1, 100)] {
        reads.commit_watermark("g", "t", partition, 1_000).unwrap();
        for k in 0..gaps {
            reads
                .mark_processed("g", "t", partition, 1_002 + 2 * k)
                .unwrap();
        }
    }
    reads.compact().unwrap();
    for (partition, gaps) in [(0u32, 0usize), (1, 100)] {
        g.bench_function(
            BenchmarkId::new("offset_window", format!("compacted/gaps={gaps}")),
            |b| {
                b.iter(|| {
                    let win = reads.offset_window("g", "t", partition).unwrap();
                    assert_eq!(win.watermark(), Some(1_000));
                    assert_eq!(win.out_of_order_len(), gaps);
                    win
                })
            },
        );
    }
    g.finish();
}

fn vector(actors: usize, offset: u64) -> VersionVector {
    let mut vv = VersionVector::new();
    for a in 0..actors {
        let n = a as u64 + offset;
        vv.observe(&format!("replica-{a}"), 1 + n % 5);
    }
    vv
}

/// Causal entities and replica vectors in the store.
fn causal(c: &mut Criterion) {
    let mut g = group(c, "causal");
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Buffered);
    let value = vec![5u8; VALUE];
    for siblings in [1usize, 4] {
        let id = format!("cart-{siblings}");
        for a in 0..siblings {
            // Each write with an empty context is concurrent with the others: all are kept.
            store
                .causal_put(
                    "t",
                    &id,
                    &format!("r{a}"),
                    &VersionVector::new(),
                    value.clone(),
                )
                .unwrap();
        }
        g.bench_function(
            BenchmarkId::new("causal_get", format!("siblings={siblings}/value={VALUE}")),
            |b| {
                b.iter(|| {
                    let s = store.causal_get("t", &id).unwrap();
                    assert_eq!(s.values.len(), siblings);
                    s
                })
            },
        );
    }
    let actors = 3;
    let vv = vector(actors, 0);
    g.bench_function(
        BenchmarkId::new("merge_replica_vector", format!("buffered/actors={actors}")),
        |b| b.iter(|| store.merge_replica_vector("t", "merged", &vv).unwrap()),
    );
    let rdir = tempfile::tempdir().unwrap();
    let reads = open(rdir.path(), Durability::Buffered);
    reads
        .merge_replica_vector("t", "doc", &vector(actors, 0))
        .unwrap();
    reads
        .merge_replica_vector("t", "doc", &vector(actors, 2))
        .unwrap();
    reads.compact().unwrap();
    g.bench_function(
        BenchmarkId::new("replica_vector", format!("compacted/actors={actors}")),
        |b| {
            b.iter(|| {
                let v = reads.replica_vector("t", "doc").unwrap();
                assert_eq!(v.iter().count(), actors);
                v
            })
        },
    );
    g.finish();
}

/// The in-memory version vector operations.
fn version_vector(c: &mut Criterion) {
    let mut g = group(c, "version_vector");
    for actors in [3usize, 16] {
        let base = vector(actors, 0);
        g.bench_function(
            BenchmarkId::new("increment", format!("actors={actors}/existing_actor")),
            |b| {
                let mut vv = base.clone();
                b.iter(|| assert!(vv.increment(black_box("replica-1")) > 0))
            },
        );
        // Concurrent vectors: merging changes some entries of the left one.
        let other = vector(actors, 3);
        assert_eq!(base.compare(&other), Causality::Concurrent);
        g.bench_function(
            BenchmarkId::new("merge", format!("actors={actors}/concurrent")),
            |b| {
                b.iter_batched_ref(
                    || base.clone(),
                    |vv| vv.merge(black_box(&other)),
                    BatchSize::SmallInput,
                )
            },
        );
        g.bench_function(
            BenchmarkId::new("compare", format!("actors={actors}/concurrent")),
            |b| {
                b.iter(|| {
                    assert_eq!(
                        black_box(&base).compare(black_box(&other)),
                        Causality::Concurrent
                    )
                })
            },
        );
    }
    g.finish();
}

/// Keys, fingerprints and entity tags.
fn helpers(c: &mut Criterion) {
    let mut g = group(c, "keys");
    let body64 = vec![9u8; 64];
    g.bench_function("derive_key/parts=3/body=64", |b| {
        let parts: [&[u8]; 3] = [b"refund", b"order-8812", &body64];
        b.iter(|| {
            let k = derive_key(black_box(&parts));
            assert_eq!(k.len(), 64);
            k
        })
    });
    for size in [64usize, 4_096] {
        let body = vec![9u8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(
            BenchmarkId::new("fingerprint", format!("parts=3/body={size}")),
            |b| {
                let parts: [&[u8]; 3] = [b"POST", b"/payments", &body];
                b.iter(|| {
                    let f = fingerprint(black_box(&parts));
                    assert_eq!(f.len(), 32);
                    f
                })
            },
        );
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("mint_key/system_clock", |b| {
        b.iter(|| {
            let k = mint_key(&SystemClock);
            assert_eq!(k.len(), 26);
            k
        })
    });
    g.finish();

    let mut g = group(c, "etag");
    g.bench_function("etag/version=123456", |b| {
        b.iter(|| {
            let t = etag(black_box(123_456));
            assert_eq!(t.len(), 9);
            t
        })
    });
    g.bench_function("parse_etag/version=123456", |b| {
        b.iter(|| assert_eq!(parse_etag(black_box("\"v123456\"")), Some(123_456)))
    });
    g.bench_function("expect_from_headers/if_match", |b| {
        b.iter(|| {
            assert_eq!(
                expect_from_headers(black_box(Some("\"v7\"")), black_box(None)),
                Some(Expect::Version(7))
            )
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    records,
    maintenance,
    entities,
    consumers,
    unique,
    offsets,
    causal,
    version_vector,
    helpers
);
criterion_main!(benches);
