//! The workload both observability benchmarks time: one claim + complete of a new key on an
//! embedded store (Buffered, the fastest path, where any overhead shows most), 32-byte-class
//! fingerprint, 256-byte response.

use std::sync::atomic::{AtomicU64, Ordering};

use idemdb::{Claim, ClaimOptions, Config, Durability, Response};

/// A new store (Buffered, no background sweeper) in a temporary directory, which lives as long
/// as the returned guard.
pub fn fresh_store() -> (tempfile::TempDir, idemdb::Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Config::new(dir.path())
        .durability(Durability::Buffered)
        .sweep_interval(None)
        .open()
        .unwrap();
    (dir, store)
}

/// Claims the next new key (`n` counts them) and completes it; panics on any other outcome, so
/// an error path is never what gets timed.
pub fn claim_complete(store: &idemdb::Store, n: &AtomicU64) {
    let key = n.fetch_add(1, Ordering::Relaxed).to_string();
    match store
        .claim("tenant", &key, b"fingerprint", ClaimOptions::default())
        .unwrap()
    {
        Claim::Acquired(l) => store
            .complete(&l, Response::new(vec![7u8; 256]))
            .unwrap()
            .unwrap(),
        other => panic!("{other:?}"),
    }
}
