//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use idemdb::{Claim, ClaimOptions, Config, Durability, Lease, ManualClock, Store};

/// A store in `dir` on a manual clock, buffered, with no background sweeper.
pub fn open(dir: &Path, clock: &ManualClock) -> Store {
    config(dir, clock).open().expect("open store")
}

pub fn config(dir: &Path, clock: &ManualClock) -> Config {
    Config::new(dir)
        .clock(clock.clone())
        .durability(Durability::Buffered)
        .sweep_interval(None)
        .lease(Duration::from_secs(10))
        .retention(Duration::from_secs(3600))
}

pub fn acquire(store: &Store, tenant: &str, key: &str, fp: &[u8]) -> Lease {
    match store
        .claim(tenant, key, fp, ClaimOptions::default())
        .expect("claim")
    {
        Claim::Acquired(l) => l,
        other => panic!("expected to acquire {tenant}/{key}, got {other:?}"),
    }
}

/// As [`acquire`], with a durable pending record (`ClaimOptions::durable_pending`): for tests
/// that look at what is on disk, or reopen the store, while the lease is held.
pub fn acquire_durable(store: &Store, tenant: &str, key: &str, fp: &[u8]) -> Lease {
    match store
        .claim(
            tenant,
            key,
            fp,
            ClaimOptions::default().durable_pending(true),
        )
        .expect("claim")
    {
        Claim::Acquired(l) => l,
        other => panic!("expected to acquire {tenant}/{key}, got {other:?}"),
    }
}

/// The typed invalid-input error of `r`, or a panic saying what came instead.
pub fn invalid<T: std::fmt::Debug>(r: idemdb::Result<T>) -> idemdb::InvalidInput {
    match r {
        Err(idemdb::Error::InvalidInput(i)) => i,
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

/// A xorshift generator seeded from the wall clock, for random kill moments.
pub struct Xorshift(pub u64);

impl Xorshift {
    pub fn from_clock() -> Self {
        use idemdb::Clock;
        Xorshift(idemdb::SystemClock.now_millis() | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Re-executes this test binary to run the ignored test `child` with `envs`, its stdout piped.
/// `child` is the test's full name within the binary, module path included (for a test in module
/// `m` of a grouped binary: `m::child`); a name that is not an ignored test of this binary panics
/// here, instead of starting children that run no test at all.
pub fn spawn_child(child: &str, envs: &[(&str, String)]) -> std::process::Child {
    assert_ignored_test_exists(child);
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("test binary"));
    cmd.args([
        "--exact",
        child,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn child")
}

/// Panics unless this test binary lists `name` among its ignored tests (checked once per name).
fn assert_ignored_test_exists(name: &str) {
    static FOUND: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut found = FOUND
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if found.iter().any(|f| f == name) {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--list", "--exact", name, "--ignored"])
        .output()
        .expect("list the tests of this binary");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.lines().any(|l| l == format!("{name}: test")),
        "no ignored test named {name:?} in this binary; it lists:\n{listed}"
    );
    found.push(name.to_owned());
}

/// Collects the child's `ACK <a> <b>` lines until its stdout closes.
pub fn read_acks(child: &mut std::process::Child) -> std::thread::JoinHandle<Vec<(u64, u64)>> {
    let lines = read_lines(child);
    std::thread::spawn(move || {
        lines
            .join()
            .expect("reader")
            .into_iter()
            .filter(|(kind, ..)| kind == "ACK")
            .map(|(_, a, b)| (a, b))
            .collect()
    })
}

/// Every `KIND a b` line the child prints (two numbers after a word), until it exits.
pub fn read_lines(
    child: &mut std::process::Child,
) -> std::thread::JoinHandle<Vec<(String, u64, u64)>> {
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| {
                let mut p = l.split(' ');
                let kind = p.next()?.to_string();
                Some((kind, p.next()?.parse().ok()?, p.next()?.parse().ok()?))
            })
            .collect()
    })
}

/// SIGKILLs the child after a random pause of `min_ms..min_ms + spread_ms`.
pub fn kill_after_random_pause(
    child: &mut std::process::Child,
    rng: &mut Xorshift,
    min_ms: u64,
    spread_ms: u64,
) {
    std::thread::sleep(Duration::from_millis(min_ms + rng.next() % spread_ms));
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
}

/// A u64 stored as 8 big-endian bytes (the crash tests' balances and counters).
pub fn be_u64(v: &[u8]) -> u64 {
    u64::from_be_bytes(v.try_into().expect("8 bytes"))
}

/// The store in `dir` as the crash tests' children and parents open it: synced, system clock.
pub fn open_synced(dir: &str) -> Store {
    Config::new(dir)
        .durability(Durability::Synced)
        .sweep_interval(None)
        .open()
        .expect("open store")
}

/// Opens a store's directory with plain RocksDB, for tests that damage or inspect what is on disk.
/// The column families get the store's merge operators (through `idemdb::__internal`): without
/// them RocksDB's WAL recovery stops at the first merge record (the fence reservation) and drops
/// every write after it.
#[allow(dead_code)]
pub fn raw_open(dir: &Path) -> rocksdb::DB {
    let o = rocksdb::Options::default();
    let cfs = rocksdb::DB::list_cf(&o, dir).expect("list column families");
    let descriptors = cfs.iter().map(|name| {
        let mut co = rocksdb::Options::default();
        match name.as_str() {
            "meta" => co.set_merge_operator_associative("idemdb.max_u64", |_, e, ops| {
                let ops: Vec<&[u8]> = ops.iter().collect();
                Some(idemdb::__internal::max_u64_merge(e, &ops))
            }),
            "versions" => {
                co.set_merge_operator_associative("idemdb.versions_merge", |k, e, ops| {
                    let ops: Vec<&[u8]> = ops.iter().collect();
                    Some(idemdb::__internal::versions_merge(k, e, &ops))
                })
            }
            _ => {}
        }
        rocksdb::ColumnFamilyDescriptor::new(name, co)
    });
    rocksdb::DB::open_cf_descriptors(&o, dir, descriptors).expect("open with plain RocksDB")
}
