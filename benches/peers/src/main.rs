//! Peer comparison: idemdb against bare RocksDB, an in-process `HashMap`, SQLite (WAL), Redis and
//! PostgreSQL on the same workload, printed as one Markdown table.
//!
//! ```text
//! cargo run --release -p idemdb-peers -- [--keys 20000] [--threads 1,4,16] [--synced-keys 2000]
//!                                        [--only idemdb,bare,hashmap,sqlite,redis,postgres]
//!                                        [--paired 15] [--smoke]
//! ```
//!
//! Workload, for N unique keys partitioned across the threads: per key a *claim* (atomic "create
//! if absent" of a pending record holding a 32-byte fingerprint and a lease expiry) followed by a
//! *complete* (store a 256-byte response); then a *replay* pass reading every key's stored
//! response as a duplicate would. Synced rows (fsync per write) use `--synced-keys` keys.
//!
//! After the table, *paired rounds* measure the one-thread ratios the targets are stated in:
//! idemdb Buffered and one peer at a time alternate in `--paired` short rounds (claim+complete of
//! a fresh chunk, then replays of keys drawn from all stored so far), and the median of the
//! per-round ratios is printed. Systems measured minutes apart on a shared machine drift by tens of
//! percent; alternating rounds put the same drift on both sides.
//!
//! Redis (127.0.0.1:6379) is spoken to through the `redis` crate's synchronous connection;
//! PostgreSQL (127.0.0.1:5432, database `test`, user `postgres` or `root`, trust auth) over a
//! blocking socket with the messages of `postgres-protocol` (the `postgres` crate would add a tokio
//! runtime's polling to every operation, measured at 15 to 20 % of a loopback round trip here);
//! SQLite is the bundled library through rusqlite. Every selected system must run: a Redis or
//! PostgreSQL server that cannot be reached within 1 s, or any failed measurement, makes the run
//! exit non-zero naming it (leave a peer out with `--only`). Nothing global is flushed: Redis keys
//! carry a per-run prefix and expire, the PostgreSQL table is per run and dropped at the end.
//!
//! `--smoke` runs a small workload instead (200 keys, 1 thread, every system, 2 paired rounds of a
//! few keys); `./scripts/test` runs it.
//!
//! This is its own workspace member so that the peers' clients are not dependencies of the
//! library's build. Its `librocksdb-sys` (and every dependency of it) resolves to the same
//! features as the library's own build, so RocksDB is compiled once for both:
//! `scripts/check-one-rocksdb` (run by scripts/test) checks it.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use idemdb::{Claim, ClaimOptions, Config, Durability, Lease, Response, Store};
use parking_lot::Mutex;
use postgres_protocol::message::backend::{ErrorResponseBody, Message};
use postgres_protocol::message::frontend::{self, BindError};
use postgres_protocol::IsNull;
use redis::IntoConnectionInfo;

const FP_LEN: usize = 32;
const RESP_LEN: usize = 256;
const LEASE_MS: u64 = 30_000;
const RETENTION_MS: u64 = 86_400_000;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const IO_TIMEOUT: Duration = Duration::from_secs(60);
const REDIS_HOST: &str = "127.0.0.1";
const REDIS_PORT: u16 = 6379;
const REDIS_ADDR: &str = "127.0.0.1:6379";
const PG_HOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const PG_PORT: u16 = 5432;
const PG_ADDR: &str = "127.0.0.1:5432";
const PG_DATABASE: &str = "test";
const PG_USERS: [&str; 2] = ["postgres", "root"];
/// The fingerprint every system stores with a claim (the same for all keys and systems).
const FP: [u8; FP_LEN] = [7u8; FP_LEN];

type R<T> = Result<T, String>;

/// One client of one system; every worker thread owns its own instance.
trait Peer: Send {
    /// Atomically creates a pending record for `key` if absent; `true` if this call created it.
    fn claim(&mut self, key: &str) -> R<bool>;
    /// Stores the response of a key this peer claimed.
    fn complete(&mut self, key: &str, resp: &[u8]) -> R<()>;
    /// Reads the stored response of `key`, as a duplicate request would.
    fn replay(&mut self, key: &str) -> R<Option<Vec<u8>>>;
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

struct Settings {
    keys: usize,
    synced_keys: usize,
    threads: Vec<usize>,
    smoke: bool,
    /// Rounds of the paired one-thread measurement (`--paired`, 0 skips it).
    paired: usize,
    /// Systems to run (`--only idemdb,bare`): a system runs when its id contains one of these;
    /// empty means all.
    only: Vec<String>,
    /// The arguments given after `--` (a `--bench` left from the old `cargo bench` command is
    /// ignored).
    user_args: Vec<String>,
}

impl Settings {
    /// Whether the system (or pairing) with this id runs: `--only` names a part of its id, or is
    /// not given.
    fn selected(&self, id: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| id.contains(o.as_str()))
    }
}

fn parse_args() -> R<Settings> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    // `--smoke`: the workload of `./scripts/test`, every system with a few keys each.
    let smoke = args.iter().any(|a| a == "--smoke");
    let mut s = Settings {
        keys: if smoke { 200 } else { 20_000 },
        synced_keys: if smoke { 200 } else { 2_000 },
        threads: if smoke { vec![1] } else { vec![1, 4, 16] },
        smoke,
        paired: if smoke { 2 } else { 15 },
        only: Vec::new(),
        user_args: args.clone(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        let mut value = |name: &str| -> R<String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let count = |name: &str, v: String| -> R<usize> {
            match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{name}: {v:?} is not a positive integer")),
            }
        };
        match flag {
            "--smoke" => {}
            "--keys" => s.keys = count("--keys", value("--keys")?)?,
            "--synced-keys" => s.synced_keys = count("--synced-keys", value("--synced-keys")?)?,
            "--threads" => {
                s.threads = value("--threads")?
                    .split(',')
                    .map(|t| count("--threads", t.to_string()))
                    .collect::<R<Vec<_>>>()?;
            }
            "--paired" => {
                let v = value("--paired")?;
                s.paired = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("--paired: {v:?} is not a whole number"))?;
            }
            "--only" => {
                s.only = value("--only")?
                    .split(',')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect();
            }
            other => eprintln!("compare: ignoring unknown argument {other:?}"),
        }
    }
    Ok(s)
}

// ---------------------------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------------------------

struct Measured {
    keys: usize,
    write_wall: Duration,
    replay_wall: Duration,
    /// Per-operation latencies in nanoseconds, merged over the threads and sorted.
    write_lat: Vec<u64>,
    replay_lat: Vec<u64>,
}

fn claim_complete(peer: &mut dyn Peer, key: &str, body: &[u8]) -> R<()> {
    if !peer.claim(key)? {
        return Err(format!("the claim of fresh key {key} was refused"));
    }
    peer.complete(key, body)
}

fn replay_one(peer: &mut dyn Peer, key: &str, body: &[u8]) -> R<()> {
    match peer.replay(key)? {
        Some(v) if v == body => Ok(()),
        Some(v) => Err(format!(
            "the replay of {key} returned {} bytes that are not the stored response",
            v.len()
        )),
        None => Err(format!("the replay of {key} found nothing")),
    }
}

/// Runs the workload: `keys` keys named `{prefix}-{i}`, key `i` handled by thread `i % threads`.
/// Wall times span a whole phase (all threads start together at a barrier); every operation is
/// timed on its own with `Instant`.
fn measure<P: Peer>(
    make: &dyn Fn() -> R<P>,
    prefix: &str,
    keys: usize,
    threads: usize,
) -> R<Measured> {
    let mut peers = Vec::with_capacity(threads);
    for _ in 0..threads {
        peers.push(make()?);
    }
    let body: Vec<u8> = (0..RESP_LEN).map(|i| (i * 7 % 251) as u8).collect();
    let per_thread: Vec<Vec<String>> = (0..threads)
        .map(|t| {
            (t..keys)
                .step_by(threads)
                .map(|i| format!("{prefix}-{i:08}"))
                .collect()
        })
        .collect();
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = peers
            .into_iter()
            .zip(&per_thread)
            .map(|(mut peer, ks)| {
                let (barrier, body) = (&barrier, &body);
                s.spawn(move || {
                    let mut write = Vec::with_capacity(ks.len());
                    let mut replay = Vec::with_capacity(ks.len());
                    let mut err = None;
                    barrier.wait();
                    for k in ks {
                        let t = Instant::now();
                        if let Err(e) = claim_complete(&mut peer, k, body) {
                            err = Some(e);
                            break;
                        }
                        write.push(t.elapsed().as_nanos() as u64);
                    }
                    barrier.wait();
                    barrier.wait();
                    if err.is_none() {
                        for k in ks {
                            let t = Instant::now();
                            if let Err(e) = replay_one(&mut peer, k, body) {
                                err = Some(e);
                                break;
                            }
                            replay.push(t.elapsed().as_nanos() as u64);
                        }
                    }
                    barrier.wait();
                    drop(peer);
                    (write, replay, err)
                })
            })
            .collect();
        // Each phase's clock starts before the barrier that releases the workers: read after
        // it, the main thread could be scheduled only once the workers had done most of the
        // phase (on two cores it was, and replays at 4 threads showed 164 million a second).
        let t0 = Instant::now();
        barrier.wait();
        barrier.wait();
        let write_wall = t0.elapsed();
        let t1 = Instant::now();
        barrier.wait();
        barrier.wait();
        let replay_wall = t1.elapsed();
        let mut write_lat = Vec::with_capacity(keys);
        let mut replay_lat = Vec::with_capacity(keys);
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok((w, r, e)) => {
                    write_lat.extend(w);
                    replay_lat.extend(r);
                    if first_err.is_none() {
                        first_err = e;
                    }
                }
                Err(_) => first_err = Some("a worker thread panicked".to_string()),
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        write_lat.sort_unstable();
        replay_lat.sort_unstable();
        Ok(Measured {
            keys,
            write_wall,
            replay_wall,
            write_lat,
            replay_lat,
        })
    })
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted.get(rank - 1).copied().unwrap_or(0)
}

/// Peak resident set size of this process so far, in KiB (`VmHWM`). It is cumulative for the
/// whole process: a row shows the peak reached by every system run before it, not its own.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

struct Row {
    order: usize,
    system: String,
    threads: usize,
    keys: usize,
    write_ops: f64,
    write_p50: u64,
    write_p99: u64,
    write_p999: u64,
    replay_ops: f64,
    replay_p50: u64,
    replay_p99: u64,
    rss_kib: Option<u64>,
}

/// Collects rows, failures and notes; runs one system at every thread count.
struct Report {
    rows: Vec<Row>,
    failed: Vec<String>,
    notes: Vec<String>,
    order: usize,
}

impl Report {
    /// Records a system (or one thread count of it) that could not run: the run goes on with the
    /// others, prints what it measured, then exits non-zero naming it.
    fn fail(&mut self, system: &str, reason: impl std::fmt::Display) {
        let line = format!("failed: {system}: {reason}");
        eprintln!("compare: {line}");
        self.failed.push(line);
    }

    /// Measures `system` at each thread count; `setup` runs before each measurement (and may
    /// reset state), `make` builds one peer per thread. Keys are prefixed by `prefix`, the system
    /// index (`self.order`, also its place in the table) and the thread count, so they never
    /// repeat within a run.
    fn run<P: Peer>(
        &mut self,
        system: &str,
        prefix: &str,
        keys: usize,
        threads: &[usize],
        setup: &mut dyn FnMut() -> R<()>,
        make: &dyn Fn() -> R<P>,
    ) {
        for &t in threads {
            eprintln!("compare: {system}, {t} thread(s), {keys} keys");
            let res = setup()
                .and_then(|()| measure(make, &format!("{prefix}-s{}-t{t}", self.order), keys, t));
            match res {
                Ok(m) => self.rows.push(row(self.order, system, t, &m)),
                Err(e) => self.fail(&format!("{system} ({t} threads)"), e),
            }
        }
    }
}

fn row(order: usize, system: &str, threads: usize, m: &Measured) -> Row {
    let ops = |wall: Duration| m.keys as f64 / wall.as_secs_f64().max(1e-9);
    Row {
        order,
        system: system.to_string(),
        threads,
        keys: m.keys,
        write_ops: ops(m.write_wall),
        write_p50: pct(&m.write_lat, 0.50),
        write_p99: pct(&m.write_lat, 0.99),
        write_p999: pct(&m.write_lat, 0.999),
        replay_ops: ops(m.replay_wall),
        replay_p50: pct(&m.replay_lat, 0.50),
        replay_p99: pct(&m.replay_lat, 0.99),
        rss_kib: peak_rss_kib(),
    }
}

// ---------------------------------------------------------------------------------------------
// 1. idemdb
// ---------------------------------------------------------------------------------------------

struct IdemPeer {
    store: Store,
    lease: Option<Lease>,
    /// Claims ask for a durable pending record (`ClaimOptions::durable_pending`): the pending
    /// record is written at the claim, as before issue 17 (two writes per request).
    durable_pending: bool,
}

impl Peer for IdemPeer {
    fn claim(&mut self, key: &str) -> R<bool> {
        let opts = ClaimOptions::default().durable_pending(self.durable_pending);
        match self
            .store
            .claim("bench", key, FP, opts)
            .map_err(|e| e.to_string())?
        {
            Claim::Acquired(lease) => {
                self.lease = Some(lease);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn complete(&mut self, key: &str, resp: &[u8]) -> R<()> {
        let lease = self
            .lease
            .take()
            .filter(|l| l.key() == key.as_bytes())
            .ok_or_else(|| format!("no lease held for {key}"))?;
        self.store
            .complete(&lease, Response::new(resp.to_vec()))
            .map_err(|e| e.to_string())?
            .map_err(|lost| format!("lease of {key} lost: {lost:?}"))
    }

    /// A duplicate's replay through the borrowed path (`Store::replay_with`), copying the body
    /// out as the bare point read does; a claim would answer the same (`Claim::Completed`), with
    /// the response copied into an owned value.
    fn replay(&mut self, key: &str) -> R<Option<Vec<u8>>> {
        match self
            .store
            .replay_with("bench", key, FP, |v| v.body().to_vec())
            .map_err(|e| e.to_string())?
        {
            Some(body) => Ok(Some(body)),
            None => Err(format!("expected a replay of {key}, found none")),
        }
    }
}

fn run_idemdb(
    rep: &mut Report,
    s: &Settings,
    durability: Durability,
    durable_pending: bool,
    prefix: &str,
) {
    let (name, keys) = match (durability, durable_pending) {
        (Durability::Synced, false) => ("idemdb Synced", s.synced_keys),
        (Durability::Synced, true) => ("idemdb Synced, durable pending", s.synced_keys),
        (_, false) => ("idemdb Buffered", s.keys),
        (_, true) => ("idemdb Buffered, durable pending", s.keys),
    };
    // A fresh store for each thread count, opened in `setup`, shared by that run's peers.
    let store: Mutex<Option<(Store, tempfile::TempDir)>> = Mutex::new(None);
    let mut setup = || -> R<()> {
        let mut slot = store.lock();
        *slot = None; // Close the previous store before opening the next.
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let st = Config::new(dir.path())
            .durability(durability)
            .sweep_interval(None)
            .open()
            .map_err(|e| e.to_string())?;
        *slot = Some((st, dir));
        Ok(())
    };
    let make = || -> R<IdemPeer> {
        let slot = store.lock();
        let (st, _) = slot.as_ref().ok_or("no store open")?;
        Ok(IdemPeer {
            store: st.clone(),
            lease: None,
            durable_pending,
        })
    };
    rep.run(name, prefix, keys, &s.threads, &mut setup, &make);
    drop(store);
}

// ---------------------------------------------------------------------------------------------
// 2. Bare RocksDB: the floor idemdb builds on (same column-family options as benches/records.rs).
// ---------------------------------------------------------------------------------------------

fn bare_rocksdb(dir: &std::path::Path) -> R<rocksdb::DB> {
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
        rocksdb::ColumnFamilyDescriptor::new("records", cf),
        rocksdb::ColumnFamilyDescriptor::new("expiry", o.clone()),
    ];
    rocksdb::DB::open_cf_descriptors(&o, dir, cfs).map_err(|e| e.to_string())
}

/// Claim = get (must be absent) + one batch of two puts (the record and an expiry-index entry);
/// no per-key lock, which is safe here only because keys are partitioned across threads.
struct RocksPeer<'a> {
    db: &'a rocksdb::DB,
    rec: &'a rocksdb::ColumnFamily,
    idx: &'a rocksdb::ColumnFamily,
    wo: rocksdb::WriteOptions,
    ro: rocksdb::ReadOptions,
    value: Vec<u8>,
}

impl<'a> RocksPeer<'a> {
    /// A peer on `db` (opened by [`bare_rocksdb`]), syncing every write if `synced`.
    fn new(db: &'a rocksdb::DB, synced: bool) -> R<RocksPeer<'a>> {
        let mut wo = rocksdb::WriteOptions::default();
        wo.set_sync(synced);
        Ok(RocksPeer {
            db,
            rec: db.cf_handle("records").ok_or("no records cf")?,
            idx: db.cf_handle("expiry").ok_or("no expiry cf")?,
            wo,
            ro: rocksdb::ReadOptions::default(),
            value: Vec::with_capacity(1 + FP_LEN + RESP_LEN),
        })
    }
}

impl Peer for RocksPeer<'_> {
    fn claim(&mut self, key: &str) -> R<bool> {
        let e = |e: rocksdb::Error| e.to_string();
        if self
            .db
            .get_pinned_cf_opt(self.rec, key, &self.ro)
            .map_err(e)?
            .is_some()
        {
            return Ok(false);
        }
        let now = now_ms();
        self.value.clear();
        self.value.push(b'P');
        self.value.extend_from_slice(&FP);
        self.value
            .extend_from_slice(&(now + LEASE_MS).to_be_bytes());
        let mut index_key = (now + RETENTION_MS).to_be_bytes().to_vec();
        index_key.extend_from_slice(key.as_bytes());
        let mut batch = rocksdb::WriteBatch::default();
        batch.put_cf(self.rec, key, &self.value);
        batch.put_cf(self.idx, index_key, b"");
        self.db.write_opt(batch, &self.wo).map_err(e)?;
        Ok(true)
    }

    fn complete(&mut self, key: &str, resp: &[u8]) -> R<()> {
        self.value.clear();
        self.value.push(b'D');
        self.value.extend_from_slice(&FP);
        self.value.extend_from_slice(resp);
        self.db
            .put_cf_opt(self.rec, key, &self.value, &self.wo)
            .map_err(|e| e.to_string())
    }

    fn replay(&mut self, key: &str) -> R<Option<Vec<u8>>> {
        let v = self
            .db
            .get_pinned_cf_opt(self.rec, key, &self.ro)
            .map_err(|e| e.to_string())?;
        Ok(v.and_then(|v| v.get(1 + FP_LEN..).map(<[u8]>::to_vec)))
    }
}

fn run_bare_rocksdb(rep: &mut Report, s: &Settings, synced: bool, prefix: &str) {
    let (name, keys) = if synced {
        ("bare RocksDB synced", s.synced_keys)
    } else {
        ("bare RocksDB buffered", s.keys)
    };
    let order = rep.order;
    for &t in &s.threads {
        eprintln!("compare: {name}, {t} thread(s), {keys} keys");
        let res = tempfile::tempdir()
            .map_err(|e| e.to_string())
            .and_then(|dir| {
                let db = bare_rocksdb(dir.path())?;
                let make = || RocksPeer::new(&db, synced);
                measure(&make, &format!("{prefix}-s{order}-t{t}"), keys, t)
            });
        match res {
            Ok(m) => rep.rows.push(row(order, name, t, &m)),
            Err(e) => rep.fail(&format!("{name} ({t} threads)"), e),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. In-process HashMap behind a mutex: the upper bound (no durability, no I/O).
// ---------------------------------------------------------------------------------------------

enum MemRecord {
    Pending { fp: [u8; FP_LEN], lease_until: u64 },
    Done { fp: [u8; FP_LEN], resp: Vec<u8> },
}

struct MemPeer {
    map: Arc<Mutex<HashMap<String, MemRecord>>>,
}

impl Peer for MemPeer {
    fn claim(&mut self, key: &str) -> R<bool> {
        let now = now_ms();
        let mut map = self.map.lock();
        match map.get_mut(key) {
            // An expired lease is taken over, as idemdb does.
            Some(MemRecord::Pending { fp, lease_until }) if *lease_until <= now && *fp == FP => {
                *lease_until = now + LEASE_MS;
                Ok(true)
            }
            Some(_) => Ok(false),
            None => {
                map.insert(
                    key.to_string(),
                    MemRecord::Pending {
                        fp: FP,
                        lease_until: now + LEASE_MS,
                    },
                );
                Ok(true)
            }
        }
    }

    fn complete(&mut self, key: &str, resp: &[u8]) -> R<()> {
        let mut map = self.map.lock();
        match map.get_mut(key) {
            Some(r @ MemRecord::Pending { .. }) => {
                *r = MemRecord::Done {
                    fp: FP,
                    resp: resp.to_vec(),
                };
                Ok(())
            }
            _ => Err(format!("{key} is not pending")),
        }
    }

    fn replay(&mut self, key: &str) -> R<Option<Vec<u8>>> {
        match self.map.lock().get(key) {
            Some(MemRecord::Done { fp, resp }) if *fp == FP => Ok(Some(resp.clone())),
            _ => Ok(None),
        }
    }
}

fn run_hashmap(rep: &mut Report, s: &Settings, prefix: &str) {
    let map = Arc::new(Mutex::new(HashMap::new()));
    let mut setup = || -> R<()> {
        map.lock().clear();
        Ok(())
    };
    let make = || -> R<MemPeer> {
        Ok(MemPeer {
            map: Arc::clone(&map),
        })
    };
    let name = "HashMap+Mutex (in-process)";
    rep.run(name, prefix, s.keys, &s.threads, &mut setup, &make);
}

// ---------------------------------------------------------------------------------------------
// 4. SQLite in WAL mode: the common single-file embedded choice (rusqlite, bundled SQLite).
// ---------------------------------------------------------------------------------------------

struct SqlitePeer {
    conn: rusqlite::Connection,
}

fn sqlite_err(e: rusqlite::Error) -> String {
    format!("sqlite: {e}")
}

impl SqlitePeer {
    /// A connection to the shared database file in WAL mode. `synchronous=NORMAL` is SQLite's
    /// recommended WAL setting: commits survive a process crash, not a power loss (like idemdb
    /// Buffered).
    fn open(path: &std::path::Path) -> R<SqlitePeer> {
        let conn = rusqlite::Connection::open(path).map_err(sqlite_err)?;
        conn.busy_timeout(Duration::from_secs(60))
            .map_err(sqlite_err)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
             CREATE TABLE IF NOT EXISTS idem (
                 key TEXT PRIMARY KEY, fp BLOB NOT NULL, status INTEGER NOT NULL,
                 lease_until INTEGER NOT NULL, expires_at INTEGER NOT NULL, resp BLOB
             ) WITHOUT ROWID;",
        )
        .map_err(sqlite_err)?;
        Ok(SqlitePeer { conn })
    }
}

impl Peer for SqlitePeer {
    fn claim(&mut self, key: &str) -> R<bool> {
        let now = now_ms() as i64;
        let mut st = self
            .conn
            .prepare_cached(
                "INSERT INTO idem (key, fp, status, lease_until, expires_at) VALUES (?1, ?2, 0, ?3, ?4)
                 ON CONFLICT (key) DO NOTHING",
            )
            .map_err(sqlite_err)?;
        let n = st
            .execute(rusqlite::params![
                key,
                &FP[..],
                now + LEASE_MS as i64,
                now + RETENTION_MS as i64
            ])
            .map_err(sqlite_err)?;
        Ok(n == 1)
    }

    fn complete(&mut self, key: &str, resp: &[u8]) -> R<()> {
        let mut st = self
            .conn
            .prepare_cached("UPDATE idem SET status = 1, resp = ?2 WHERE key = ?1 AND status = 0")
            .map_err(sqlite_err)?;
        match st
            .execute(rusqlite::params![key, resp])
            .map_err(sqlite_err)?
        {
            1 => Ok(()),
            _ => Err(format!("{key} is not pending")),
        }
    }

    fn replay(&mut self, key: &str) -> R<Option<Vec<u8>>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT resp FROM idem WHERE key = ?1 AND fp = ?2 AND status = 1")
            .map_err(sqlite_err)?;
        let mut rows = st
            .query(rusqlite::params![key, &FP[..]])
            .map_err(sqlite_err)?;
        match rows.next().map_err(sqlite_err)? {
            Some(row) => Ok(Some(row.get(0).map_err(sqlite_err)?)),
            None => Ok(None),
        }
    }
}

fn run_sqlite(rep: &mut Report, s: &Settings, prefix: &str) {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return rep.fail("SQLite", e),
    };
    let path = dir.path().join("idem.sqlite");
    let make = || SqlitePeer::open(&path);
    let mut setup = || -> R<()> { Ok(()) };
    rep.run(
        "SQLite WAL synchronous=NORMAL",
        prefix,
        s.keys,
        &s.threads,
        &mut setup,
        &make,
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Redis through the `redis` crate's synchronous connection: RESP2, one connection per thread,
//    one command in flight.
// ---------------------------------------------------------------------------------------------

fn redis_err(e: redis::RedisError) -> String {
    format!("Redis at {REDIS_ADDR}: {e}")
}

/// A connection with TCP_NODELAY and the I/O timeouts. Nothing is sent on connecting but a PING
/// (no `CLIENT SETINFO`); the server must answer it.
fn redis_connect() -> R<redis::Connection> {
    let info = redis::ConnectionAddr::Tcp(REDIS_HOST.to_string(), REDIS_PORT)
        .into_connection_info()
        .map_err(redis_err)?
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true))
        .set_redis_settings(redis::RedisConnectionInfo::default().set_skip_set_lib_name());
    let mut c = redis::Client::open(info)
        .and_then(|client| client.get_connection_with_timeout(CONNECT_TIMEOUT))
        .map_err(|e| format!("cannot connect to Redis at {REDIS_ADDR} within 1 s: {e}"))?;
    c.set_read_timeout(Some(IO_TIMEOUT)).map_err(redis_err)?;
    c.set_write_timeout(Some(IO_TIMEOUT)).map_err(redis_err)?;
    let pong: String = redis::cmd("PING").query(&mut c).map_err(redis_err)?;
    if pong == "PONG" {
        Ok(c)
    } else {
        Err(format!("Redis at {REDIS_ADDR}: PING answered {pong:?}"))
    }
}

/// `CONFIG GET name`, for the notes; `None` if refused (CONFIG may be disabled).
fn redis_config_get(c: &mut redis::Connection, name: &str) -> Option<String> {
    let pair: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(c).ok()?;
    pair.into_iter().nth(1)
}

/// Records are `P` + fingerprint + lease expiry (pending) or `D` + fingerprint + response (done).
/// Claim is `SET key P.. NX PX lease`, complete `SET key D.. XX PX retention`, replay `GET key`:
/// one command and one round trip each.
struct RedisPeer {
    c: redis::Connection,
    value: Vec<u8>,
}

impl RedisPeer {
    fn connect() -> R<RedisPeer> {
        Ok(RedisPeer {
            c: redis_connect()?,
            value: Vec::with_capacity(1 + FP_LEN + RESP_LEN),
        })
    }
}

impl Peer for RedisPeer {
    fn claim(&mut self, key: &str) -> R<bool> {
        self.value.clear();
        self.value.push(b'P');
        self.value.extend_from_slice(&FP);
        self.value
            .extend_from_slice(&(now_ms() + LEASE_MS).to_be_bytes());
        let reply: redis::Value = redis::cmd("SET")
            .arg(key)
            .arg(&self.value[..])
            .arg("NX")
            .arg("PX")
            .arg(LEASE_MS)
            .query(&mut self.c)
            .map_err(redis_err)?;
        match reply {
            redis::Value::Okay => Ok(true),
            redis::Value::Nil => Ok(false),
            other => Err(format!("SET NX answered {other:?}")),
        }
    }

    fn complete(&mut self, key: &str, resp: &[u8]) -> R<()> {
        self.value.clear();
        self.value.push(b'D');
        self.value.extend_from_slice(&FP);
        self.value.extend_from_slice(resp);
        let reply: redis::Value = redis::cmd("SET")
            .arg(key)
            .arg(&self.value[..])
            .arg("XX")
            .arg("PX")
            .arg(RETENTION_MS)
            .query(&mut self.c)
            .map_err(redis_err)?;
        match reply {
            redis::Value::Okay => Ok(()),
            redis::Value::Nil => Err(format!("{key} vanished before completion")),
            other => Err(format!("SET XX answered {other:?}")),
        }
    }

    fn replay(&mut self, key: &str) -> R<Option<Vec<u8>>> {
        let value: Option<Vec<u8>> = redis::cmd("GET")
            .arg(key)
            .query(&mut self.c)
            .map_err(redis_err)?;
        match value {
            None => Ok(None),
            Some(v) if v.first() == Some(&b'D') => Ok(v.get(1 + FP_LEN..).map(<[u8]>::to_vec)),
            Some(_) => Err(format!("{key} is not completed")),
        }
    }
}

fn run_redis(rep: &mut Report, s: &Settings, prefix: &str) {
    let name = "Redis (RESP, no pipelining)";
    let mut admin = match redis_connect() {
        Ok(c) => c,
        Err(e) => return rep.fail(name, e),
    };
    let aof = redis_config_get(&mut admin, "appendonly");
    let fsync = redis_config_get(&mut admin, "appendfsync");
    let version = redis::cmd("INFO")
        .arg("server")
        .query::<String>(&mut admin)
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
        });
    rep.notes.push(format!(
        "Redis {} at {REDIS_ADDR}: appendonly={}, appendfsync={} (keys expire; nothing is deleted)",
        version.as_deref().unwrap_or("?"),
        aof.as_deref().unwrap_or("?"),
        fsync.as_deref().unwrap_or("?"),
    ));
    let redis_prefix = format!("idemdb-compare:{prefix}");
    rep.run(
        name,
        &redis_prefix,
        s.keys,
        &s.threads,
        &mut || Ok(()),
        &RedisPeer::connect,
    );
    // Check that the keys expire (nothing global is flushed or deleted).
    if let Some(t) = s.threads.first() {
        let key = format!("{redis_prefix}-s{}-t{t}-{:08}", rep.order, 0);
        let ttl = match redis::cmd("PTTL").arg(&key).query::<i64>(&mut admin) {
            Ok(ms) if ms > 0 => format!("{:.1} h left", ms as f64 / 3.6e6),
            Ok(ms) => format!("PTTL {ms} (no expiry?)"),
            Err(e) => redis_err(e),
        };
        rep.notes
            .push(format!("Redis TTL of a completed key: {ttl}"));
    }
}

// ---------------------------------------------------------------------------------------------
// 6. PostgreSQL: the v3 protocol's messages encoded and parsed by `postgres-protocol` (the
//    rust-postgres family's codec), over a blocking socket. Trust auth, extended protocol: every
//    operation is one Bind (text parameters, binary results) + Execute + Sync of a prepared
//    statement in one write, then its reply up to ReadyForQuery: one round trip.
// ---------------------------------------------------------------------------------------------

fn io(e: std::io::Error) -> String {
    format!("I/O error with PostgreSQL at {PG_ADDR}: {e}")
}

struct Pg {
    sock: TcpStream,
    out: BytesMut,
    inp: BytesMut,
    chunk: Vec<u8>,
}

/// The rows (columns may be NULL) and the command tag of one statement.
struct PgResult {
    rows: Vec<Vec<Option<Vec<u8>>>>,
    tag: String,
}

/// The fields of an ErrorResponse as `SEVERITY SQLSTATE: message`.
fn pg_error(body: &ErrorResponseBody) -> String {
    let (mut sev, mut code, mut text) = (String::new(), String::new(), String::new());
    let mut fields = body.fields();
    while let Ok(Some(field)) = fields.next() {
        let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
        match field.type_() {
            b'S' => sev = value,
            b'C' => code = value,
            b'M' => text = value,
            _ => {}
        }
    }
    format!("PostgreSQL {sev} {code}: {text}")
}

fn hex_bytea(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.clear();
    out.extend_from_slice(b"\\x");
    for b in bytes {
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 15) as usize]);
    }
}

impl Pg {
    fn connect(user: &str) -> R<Pg> {
        let addr = SocketAddr::new(PG_HOST, PG_PORT);
        let sock = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .map_err(|e| format!("cannot connect to PostgreSQL at {PG_ADDR} within 1 s: {e}"))?;
        sock.set_nodelay(true).map_err(io)?;
        sock.set_read_timeout(Some(IO_TIMEOUT)).map_err(io)?;
        sock.set_write_timeout(Some(IO_TIMEOUT)).map_err(io)?;
        let mut c = Pg {
            sock,
            out: BytesMut::with_capacity(1024),
            inp: BytesMut::with_capacity(16 << 10),
            chunk: vec![0; 16 << 10],
        };
        frontend::startup_message(
            [
                ("user", user),
                ("database", PG_DATABASE),
                ("application_name", "idemdb-compare"),
                ("client_encoding", "UTF8"),
            ],
            &mut c.out,
        )
        .map_err(io)?;
        c.flush()?;
        loop {
            match c.read_msg()? {
                Message::AuthenticationOk => {}
                Message::ErrorResponse(body) => return Err(pg_error(&body)),
                Message::ReadyForQuery(_) => return Ok(c),
                Message::AuthenticationCleartextPassword
                | Message::AuthenticationMd5Password(_)
                | Message::AuthenticationSasl(_)
                | Message::AuthenticationGss
                | Message::AuthenticationKerberosV5
                | Message::AuthenticationScmCredential
                | Message::AuthenticationSspi => {
                    return Err(format!(
                        "PostgreSQL at {PG_ADDR} asks user {user} for a password; only trust is \
                         supported"
                    ))
                }
                _ => {} // ParameterStatus, BackendKeyData, NoticeResponse
            }
        }
    }

    /// Connects as the first of `PG_USERS` that is accepted.
    fn connect_any() -> R<(Pg, &'static str)> {
        let mut errs = Vec::new();
        for user in PG_USERS {
            match Pg::connect(user) {
                Ok(c) => return Ok((c, user)),
                Err(e) if e.starts_with("cannot connect") => return Err(e),
                Err(e) => errs.push(format!("user {user}: {e}")),
            }
        }
        Err(errs.join("; "))
    }

    fn flush(&mut self) -> R<()> {
        self.sock.write_all(&self.out).map_err(io)?;
        self.out.clear();
        Ok(())
    }

    /// The next backend message, reading from the socket as needed.
    fn read_msg(&mut self) -> R<Message> {
        loop {
            if let Some(m) = Message::parse(&mut self.inp).map_err(io)? {
                return Ok(m);
            }
            let n = self.sock.read(&mut self.chunk).map_err(io)?;
            let read = self.chunk.get(..n).filter(|r| !r.is_empty());
            let read =
                read.ok_or_else(|| format!("PostgreSQL at {PG_ADDR} closed the connection"))?;
            self.inp.extend_from_slice(read);
        }
    }

    /// Reads messages up to ReadyForQuery, collecting rows and the last command tag; an
    /// ErrorResponse is returned as the error once the backend is ready again.
    fn read_result(&mut self) -> R<PgResult> {
        let mut res = PgResult {
            rows: Vec::new(),
            tag: String::new(),
        };
        let mut err = None;
        loop {
            match self.read_msg()? {
                Message::DataRow(body) => {
                    let mut row = Vec::new();
                    let mut ranges = body.ranges();
                    while let Some(range) = ranges.next().map_err(io)? {
                        row.push(match range {
                            None => None,
                            Some(r) => {
                                Some(body.buffer().get(r).ok_or("truncated DataRow")?.to_vec())
                            }
                        });
                    }
                    res.rows.push(row);
                }
                Message::CommandComplete(body) => res.tag = body.tag().map_err(io)?.to_string(),
                Message::ErrorResponse(body) => err = Some(pg_error(&body)),
                Message::ReadyForQuery(_) => return err.map_or(Ok(res), Err),
                _ => {} // ParseComplete, BindComplete, RowDescription, NoData, notices...
            }
        }
    }

    /// A simple-protocol query (text results).
    fn simple(&mut self, sql: &str) -> R<PgResult> {
        frontend::query(sql, &mut self.out).map_err(io)?;
        self.flush()?;
        self.read_result()
    }

    /// Parses a named prepared statement (parameter types inferred by the server).
    fn prepare(&mut self, name: &str, sql: &str) -> R<()> {
        frontend::parse(name, sql, std::iter::empty(), &mut self.out).map_err(io)?;
        frontend::sync(&mut self.out);
        self.flush()?;
        self.read_result().map(drop)
    }

    /// Bind (text parameters, binary results) + Execute + Sync of a prepared statement, sent in
    /// one write; then waits for ReadyForQuery.
    fn exec(&mut self, stmt: &str, params: &[&[u8]]) -> R<PgResult> {
        let bound = frontend::bind(
            "", // unnamed portal
            stmt,
            std::iter::empty(), // no format codes: every parameter in text format
            params.iter().copied(),
            |p, out| {
                out.extend_from_slice(p);
                Ok(IsNull::No)
            },
            [1], // one result format code: binary, for every column
            &mut self.out,
        );
        if let Err(e) = bound {
            return Err(match e {
                BindError::Conversion(e) => format!("PostgreSQL parameter: {e}"),
                BindError::Serialization(e) => io(e),
            });
        }
        frontend::execute("", 0, &mut self.out).map_err(io)?;
        frontend::sync(&mut self.out);
        self.flush()?;
        self.read_result()
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.out.clear();
        frontend::terminate(&mut self.out);
        let _ = self.sock.write_all(&self.out);
    }
}

struct PgPeer {
    c: Pg,
    fp_hex: Vec<u8>,
    hex: Vec<u8>,
}

impl PgPeer {
    fn connect(user: &str, table: &str, sync_commit: bool) -> R<PgPeer> {
        let mut c = Pg::connect(user)?;
        let on = if sync_commit { "on" } else { "off" };
        c.simple(&format!("SET synchronous_commit = {on}"))?;
        c.prepare(
            "claim",
            &format!(
                "INSERT INTO {table} (k, status, fp, lease_until) VALUES ($1, 'pending', $2, $3) \
                 ON CONFLICT DO NOTHING RETURNING k"
            ),
        )?;
        c.prepare(
            "complete",
            &format!(
                "UPDATE {table} SET status = 'done', resp = $2 WHERE k = $1 AND status = 'pending'"
            ),
        )?;
        c.prepare("replay", &format!("SELECT resp FROM {table} WHERE k = $1"))?;
        let mut fp_hex = Vec::new();
        hex_bytea(&mut fp_hex, &FP);
        Ok(PgPeer {
            c,
            fp_hex,
            hex: Vec::with_capacity(2 + 2 * RESP_LEN),
        })
    }
}

impl Peer for PgPeer {
    fn claim(&mut self, key: &str) -> R<bool> {
        let until = (now_ms() + LEASE_MS).to_string();
        let res = self
            .c
            .exec("claim", &[key.as_bytes(), &self.fp_hex, until.as_bytes()])?;
        Ok(res.rows.len() == 1)
    }

    fn complete(&mut self, key: &str, resp: &[u8]) -> R<()> {
        hex_bytea(&mut self.hex, resp);
        let res = self.c.exec("complete", &[key.as_bytes(), &self.hex])?;
        if res.tag == "UPDATE 1" {
            Ok(())
        } else {
            Err(format!("completing {key} answered {:?}", res.tag))
        }
    }

    fn replay(&mut self, key: &str) -> R<Option<Vec<u8>>> {
        let res = self.c.exec("replay", &[key.as_bytes()])?;
        Ok(res
            .rows
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next())
            .flatten())
    }
}

fn run_postgres(rep: &mut Report, s: &Settings, prefix: &str, sync_commit: bool) {
    let (name, keys) = if sync_commit {
        ("PostgreSQL synchronous_commit=on", s.synced_keys)
    } else {
        ("PostgreSQL synchronous_commit=off", s.keys)
    };
    let (mut admin, user) = match Pg::connect_any() {
        Ok(c) => c,
        Err(e) => return rep.fail(name, e),
    };
    let table = format!("idem_bench_{prefix}");
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {table} \
         (k text primary key, status text, fp bytea, lease_until bigint, resp bytea)"
    );
    if let Err(e) = admin.simple(&create) {
        return rep.fail(name, e);
    }
    if !sync_commit {
        let show = |c: &mut Pg, what: &str| -> String {
            c.simple(&format!("SHOW {what}"))
                .ok()
                .and_then(|r| r.rows.into_iter().next())
                .and_then(|r| r.into_iter().next().flatten())
                .map_or("?".into(), |v| String::from_utf8_lossy(&v).into_owned())
        };
        let version = show(&mut admin, "server_version");
        let fsync = show(&mut admin, "fsync");
        rep.notes.push(format!(
            "PostgreSQL {version} at {PG_ADDR}: user {user}, fsync={fsync}, table {table} (dropped at the end)"
        ));
    }
    let admin = Mutex::new(admin);
    let mut setup = || -> R<()> { admin.lock().simple(&format!("TRUNCATE {table}")).map(drop) };
    let make = || PgPeer::connect(user, &table, sync_commit);
    rep.run(name, prefix, keys, &s.threads, &mut setup, &make);
    let dropped = admin
        .into_inner()
        .simple(&format!("DROP TABLE IF EXISTS {table}"));
    if let Err(e) = dropped {
        rep.notes.push(format!("could not drop {table}: {e}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Paired rounds: idemdb Buffered and one peer, one thread, alternating in short rounds
// ---------------------------------------------------------------------------------------------

/// Per round: (idemdb ops/s, peer ops/s) of claim+complete and of replay.
struct Rounds {
    write: Vec<(f64, f64)>,
    replay: Vec<(f64, f64)>,
}

/// The rounds of one pairing.
struct Paired {
    me: &'static str,
    peer: &'static str,
    keys_idemdb: usize,
    keys_peer: usize,
    rounds: Rounds,
}

/// Rate of `op` over `keys`, in operations per second.
fn rate(keys: &[String], mut op: impl FnMut(&str) -> R<()>) -> R<f64> {
    let t = Instant::now();
    for k in keys {
        op(k)?;
    }
    Ok(keys.len() as f64 / t.elapsed().as_secs_f64().max(1e-9))
}

/// The ratios, idemdb / peer, of `rounds` rounds on one thread. A round claims and completes a
/// fresh chunk of keys on each system, then replays as many keys drawn from every key that
/// system has stored so far (the same draw for both, so later rounds also read flushed tables).
/// The two systems alternate which goes first, so the drift of a shared, noisy machine falls on
/// both alike: the median of the per-round ratios is much steadier than the ratio of two separate
/// runs.
fn pair_rounds(
    me: &mut dyn Peer,
    peer: &mut dyn Peer,
    (chunk_me, chunk_peer): (usize, usize),
    rounds: usize,
    prefix: &str,
) -> R<Rounds> {
    let body: Vec<u8> = (0..RESP_LEN).map(|i| (i * 7 % 251) as u8).collect();
    let name = |side: &str, i: usize| format!("{prefix}-{side}-{i:08}");
    let (mut write, mut replay) = (Vec::new(), Vec::new());
    let mut draw = 0x9e37_79b9_7f4a_7c15_u64;
    for r in 0..rounds {
        let fresh = |side: &str, chunk: usize| -> Vec<String> {
            (r * chunk..(r + 1) * chunk)
                .map(|i| name(side, i))
                .collect()
        };
        let (keys_me, keys_peer) = (fresh("m", chunk_me), fresh("p", chunk_peer));
        // The same positions, scaled to each system's key count, for the replay sample.
        let mut sample = |chunk: usize, stored: usize| -> Vec<usize> {
            (0..chunk)
                .map(|_| {
                    draw ^= draw << 13;
                    draw ^= draw >> 7;
                    draw ^= draw << 17;
                    (draw % stored as u64) as usize
                })
                .collect()
        };
        let at_me = sample(chunk_me, (r + 1) * chunk_me);
        let at_peer = sample(chunk_peer, (r + 1) * chunk_peer);
        let old_me: Vec<String> = at_me.iter().map(|&i| name("m", i)).collect();
        let old_peer: Vec<String> = at_peer.iter().map(|&i| name("p", i)).collect();
        let w =
            |p: &mut dyn Peer, keys: &[String]| rate(keys, |k| claim_complete(&mut *p, k, &body));
        let (wm, wp) = if r % 2 == 0 {
            let a = w(me, &keys_me)?;
            (a, w(peer, &keys_peer)?)
        } else {
            let b = w(peer, &keys_peer)?;
            (w(me, &keys_me)?, b)
        };
        let rp = |p: &mut dyn Peer, keys: &[String]| rate(keys, |k| replay_one(&mut *p, k, &body));
        let (rm, rpp) = if r % 2 == 0 {
            let a = rp(me, &old_me)?;
            (a, rp(peer, &old_peer)?)
        } else {
            let b = rp(peer, &old_peer)?;
            (rp(me, &old_me)?, b)
        };
        write.push((wm, wp));
        replay.push((rm, rpp));
    }
    Ok(Rounds { write, replay })
}

fn idemdb_store(durability: Durability, durable_pending: bool) -> R<(IdemPeer, tempfile::TempDir)> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = Config::new(dir.path())
        .durability(durability)
        .sweep_interval(None)
        .open()
        .map_err(|e| e.to_string())?;
    Ok((
        IdemPeer {
            store,
            lease: None,
            durable_pending,
        },
        dir,
    ))
}

/// Runs the pairings selected by `--only`, each against a fresh idemdb store: Buffered against
/// bare RocksDB, SQLite, Redis and PostgreSQL with synchronous_commit=off; Synced against bare
/// RocksDB synced.
fn run_paired(s: &Settings, prefix: &str) -> (Vec<Paired>, Vec<String>) {
    let (mut out, mut failed) = (Vec::new(), Vec::new());
    let rounds = s.paired;
    let selected = |id: &str| s.selected(id);
    // Keys per round: about 0.1 s of work for each system on a 2-core machine.
    let chunk_me = if s.smoke { 20 } else { 5_000 };
    let net = if s.smoke { 10 } else { 400 };
    let synced = if s.smoke { 10 } else { 150 };
    let mut pair_with = |(durability, durable_pending): (Durability, bool),
                         peer_name: &'static str,
                         (chunk_me, chunk_peer): (usize, usize),
                         run: &mut dyn FnMut(&mut dyn Peer) -> R<Rounds>| {
        let me = match (durability, durable_pending) {
            (Durability::Synced, false) => "idemdb Synced",
            (Durability::Synced, true) => "idemdb Synced, durable pending",
            (_, false) => "idemdb Buffered",
            (_, true) => "idemdb Buffered, durable pending",
        };
        eprintln!("compare: paired rounds, {me} and {peer_name}");
        let res = idemdb_store(durability, durable_pending).and_then(|(mut me, _dir)| run(&mut me));
        match res {
            Ok(r) => out.push(Paired {
                me,
                peer: peer_name,
                keys_idemdb: chunk_me,
                keys_peer: chunk_peer,
                rounds: r,
            }),
            Err(e) => {
                eprintln!("compare: failed: paired {peer_name}: {e}");
                failed.push(format!("failed: paired {peer_name}: {e}"));
            }
        }
    };
    let tag = |what: &str| format!("{prefix}-paired-{what}");
    // Against bare RocksDB, buffered and synced, each with pending records kept in memory (the
    // default) and with durable pending records (two writes per request, as before issue 17), so
    // that the cost of asking for them is measured in the same run.
    for (id, durability, durable, synced_peer, chunk) in [
        (
            "bare-buffered",
            Durability::Buffered,
            false,
            false,
            chunk_me,
        ),
        ("bare-synced", Durability::Synced, false, true, synced),
        (
            "bare-buffered-durable",
            Durability::Buffered,
            true,
            false,
            chunk_me,
        ),
        (
            "bare-synced-durable",
            Durability::Synced,
            true,
            true,
            synced,
        ),
    ] {
        if !selected(id) {
            continue;
        }
        let peer_name = if synced_peer {
            "bare RocksDB synced"
        } else {
            "bare RocksDB buffered"
        };
        pair_with(
            (durability, durable),
            peer_name,
            (chunk, chunk),
            &mut |me| {
                let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
                let db = bare_rocksdb(dir.path())?;
                let mut peer = RocksPeer::new(&db, synced_peer)?;
                pair_rounds(me, &mut peer, (chunk, chunk), rounds, &tag(id))
            },
        );
    }
    if selected("sqlite") {
        let chunk = chunk_me / 2;
        pair_with(
            (Durability::Buffered, false),
            "SQLite WAL synchronous=NORMAL",
            (chunk_me, chunk),
            &mut |me| {
                let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
                let mut peer = SqlitePeer::open(&dir.path().join("idem.sqlite"))?;
                pair_rounds(me, &mut peer, (chunk_me, chunk), rounds, &tag("sqlite"))
            },
        );
    }
    if selected("redis") {
        pair_with(
            (Durability::Buffered, false),
            "Redis (RESP, no pipelining)",
            (chunk_me, net),
            &mut |me| {
                let mut peer = RedisPeer::connect()?;
                let keys = format!("idemdb-compare:{}", tag("redis"));
                pair_rounds(me, &mut peer, (chunk_me, net), rounds, &keys)
            },
        );
    }
    if selected("postgres-async") {
        pair_with(
            (Durability::Buffered, false),
            "PostgreSQL synchronous_commit=off",
            (chunk_me, net),
            &mut |me| {
                let (mut admin, user) = Pg::connect_any()?;
                let table = format!("idem_bench_{prefix}_paired");
                admin.simple(&format!(
                    "CREATE TABLE IF NOT EXISTS {table} \
                     (k text primary key, status text, fp bytea, lease_until bigint, resp bytea)"
                ))?;
                let res = PgPeer::connect(user, &table, false).and_then(|mut peer| {
                    pair_rounds(me, &mut peer, (chunk_me, net), rounds, &tag("pg"))
                });
                admin.simple(&format!("DROP TABLE IF EXISTS {table}"))?;
                res
            },
        );
    }
    (out, failed)
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn print_paired(paired: &[Paired], failed: &[String]) {
    if paired.is_empty() && failed.is_empty() {
        return;
    }
    println!();
    println!(
        "Paired rounds, 1 thread: idemdb / peer (above 1 = idemdb faster), median of the \
         per-round ratios, with the lowest and highest round:"
    );
    println!();
    println!(
        "| idemdb | peer | rounds | keys per round (idemdb / peer) | claim+complete ratio | ops/s (idemdb / peer) | replay ratio | ops/s (idemdb / peer) |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|");
    let cells = |pairs: &[(f64, f64)]| {
        let ratios: Vec<f64> = pairs.iter().map(|(a, b)| a / b).collect();
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let me: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let peer: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        format!(
            "{:.2}x ({lo:.2}–{hi:.2}) | {} / {}",
            median(&ratios),
            fmt_ops(median(&me)),
            fmt_ops(median(&peer))
        )
    };
    for p in paired {
        println!(
            "| {} | {} | {} | {} / {} | {} | {} |",
            p.me,
            p.peer,
            p.rounds.write.len(),
            p.keys_idemdb,
            p.keys_peer,
            cells(&p.rounds.write),
            cells(&p.rounds.replay)
        );
    }
    for line in failed {
        println!("{line}");
    }
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

fn fmt_ops(x: f64) -> String {
    let s = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn fmt_lat(ns: u64) -> String {
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}

fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".into(), |k| k.trim().to_string());
    format!("nproc {nproc}, CPU {cpu}, Linux {kernel}")
}

fn command(s: &Settings) -> String {
    let mut c = "cargo run --release -p idemdb-peers".to_string();
    if !s.user_args.is_empty() {
        c.push_str(" -- ");
        c.push_str(&s.user_args.join(" "));
    }
    c
}

fn print_report(rep: &mut Report, s: &Settings) {
    rep.rows.sort_by_key(|r| (r.threads, r.order));
    println!(
        "Machine: {}. Command: `{}` (keys {}, synced keys {}, threads {:?}; data on {}).",
        machine(),
        command(s),
        s.keys,
        s.synced_keys,
        s.threads,
        std::env::temp_dir().display(),
    );
    println!();
    println!(
        "| system | threads | claim+complete ops/s | p50 | p99 | p99.9 | replay ops/s | replay p50 | replay p99 | peak RSS¹ |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for r in &rep.rows {
        let group = rep.rows.iter().filter(|o| o.threads == r.threads);
        let best_w = group.clone().map(|o| o.write_ops).fold(0.0, f64::max);
        let best_r = group.map(|o| o.replay_ops).fold(0.0, f64::max);
        let bold = |x: f64, best: f64| {
            if x >= best {
                format!("**{}**", fmt_ops(x))
            } else {
                fmt_ops(x)
            }
        };
        let system = if r.keys == s.keys {
            r.system.clone()
        } else {
            format!("{} [{} keys]", r.system, r.keys)
        };
        println!(
            "| {system} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.threads,
            bold(r.write_ops, best_w),
            fmt_lat(r.write_p50),
            fmt_lat(r.write_p99),
            fmt_lat(r.write_p999),
            bold(r.replay_ops, best_r),
            fmt_lat(r.replay_p50),
            fmt_lat(r.replay_p99),
            r.rss_kib
                .map_or("?".into(), |k| format!("{:.0} MiB", k as f64 / 1024.0)),
        );
    }
    println!();
    println!(
        "¹ Peak RSS (VmHWM) of this process right after the row ran. It is cumulative for the \
         process, not per system: systems run one after another in the order of the rows within \
         a thread-count group, each at every thread count, so a value includes every system run \
         before it. Redis and PostgreSQL memory lives in their servers and is not counted. \
         Rows marked [N keys] ran --synced-keys keys. Bold: best ops/s per thread count."
    );
    for line in &rep.failed {
        println!("{line}");
    }
    println!();
    let find = |sys: &str| rep.rows.iter().find(|r| r.threads == 1 && r.system == sys);
    match find("idemdb Buffered") {
        None => println!("Ratios: n/a (no 1-thread idemdb Buffered row)"),
        Some(me) => {
            println!("Ratios, 1 thread, idemdb Buffered / peer (above 1 = idemdb faster):");
            for peer in [
                "bare RocksDB buffered",
                "Redis (RESP, no pipelining)",
                "PostgreSQL synchronous_commit=off",
                "SQLite WAL synchronous=NORMAL",
                "HashMap+Mutex (in-process)",
            ] {
                match find(peer) {
                    Some(p) => println!(
                        "- claim+complete vs {peer}: {:.2}x ({} vs {} ops/s)",
                        me.write_ops / p.write_ops,
                        fmt_ops(me.write_ops),
                        fmt_ops(p.write_ops)
                    ),
                    None => println!("- claim+complete vs {peer}: n/a (skipped)"),
                }
            }
            match find("bare RocksDB buffered") {
                Some(p) => println!(
                    "- replay vs bare RocksDB read (get_pinned): {:.2}x ({} vs {} ops/s)",
                    me.replay_ops / p.replay_ops,
                    fmt_ops(me.replay_ops),
                    fmt_ops(p.replay_ops)
                ),
                None => println!("- replay vs bare RocksDB read: n/a (skipped)"),
            }
        }
    }
    for n in &rep.notes {
        println!("Note: {n}");
    }
}

fn run_id() -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("r{:012x}", h.finish() & 0xffff_ffff_ffff)
}

fn main() {
    let s = match parse_args() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("compare: {e}");
            std::process::exit(2);
        }
    };
    // A selected network peer that cannot be reached fails the run now, naming it, rather than
    // after minutes of measurements (and never passes by being skipped).
    let mut unreachable = Vec::new();
    if s.selected("redis") {
        unreachable.extend(redis_connect().err());
    }
    if s.selected("postgres-async") || s.selected("postgres-sync") {
        unreachable.extend(Pg::connect_any().err());
    }
    if !unreachable.is_empty() {
        for e in &unreachable {
            eprintln!("compare: {e}");
        }
        eprintln!(
            "compare: a selected peer cannot be reached. Start it, or leave it out with --only \
             (systems: idemdb-buffered, idemdb-synced, bare-buffered, bare-synced, hashmap, \
             sqlite, redis, postgres-async, postgres-sync)"
        );
        std::process::exit(1);
    }
    let prefix = run_id();
    let mut rep = Report {
        rows: Vec::new(),
        failed: Vec::new(),
        notes: Vec::new(),
        order: 0,
    };
    // `rep.order` is each system's place in the table (rows are grouped by thread count).
    let started = Instant::now();
    // Each system's id (for `--only`) and its runner, in table order.
    type Runner<'a> = Box<dyn FnMut(&mut Report) + 'a>;
    let systems: Vec<(&str, Runner<'_>)> = vec![
        (
            "idemdb-buffered",
            Box::new(|r| run_idemdb(r, &s, Durability::Buffered, false, &prefix)),
        ),
        (
            "idemdb-synced",
            Box::new(|r| run_idemdb(r, &s, Durability::Synced, false, &prefix)),
        ),
        (
            "idemdb-durable-buffered",
            Box::new(|r| run_idemdb(r, &s, Durability::Buffered, true, &prefix)),
        ),
        (
            "idemdb-durable-synced",
            Box::new(|r| run_idemdb(r, &s, Durability::Synced, true, &prefix)),
        ),
        (
            "bare-buffered",
            Box::new(|r| run_bare_rocksdb(r, &s, false, &prefix)),
        ),
        (
            "bare-synced",
            Box::new(|r| run_bare_rocksdb(r, &s, true, &prefix)),
        ),
        ("hashmap", Box::new(|r| run_hashmap(r, &s, &prefix))),
        ("sqlite", Box::new(|r| run_sqlite(r, &s, &prefix))),
        ("redis", Box::new(|r| run_redis(r, &s, &prefix))),
        (
            "postgres-async",
            Box::new(|r| run_postgres(r, &s, &prefix, false)),
        ),
        (
            "postgres-sync",
            Box::new(|r| run_postgres(r, &s, &prefix, true)),
        ),
    ];
    for (i, (id, mut run)) in systems.into_iter().enumerate() {
        if s.selected(id) {
            rep.order = i + 1;
            run(&mut rep);
        }
    }
    rep.notes.push(format!(
        "total run time {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let (paired, paired_failed) = if s.paired > 0 {
        run_paired(&s, &prefix)
    } else {
        (Vec::new(), Vec::new())
    };
    print_report(&mut rep, &s);
    print_paired(&paired, &paired_failed);
    let failed = rep.failed.len() + paired_failed.len();
    if failed > 0 {
        eprintln!("compare: {failed} measurement(s) failed (the `failed:` lines above)");
        std::process::exit(1);
    }
}
