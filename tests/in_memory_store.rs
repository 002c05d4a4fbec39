//! The in-memory environment of the tests and fuzz targets (`idemdb::__internal::InMemory`).
//! Invariant checked: a store opened in memory keeps its records across a reopen with the same
//! handle (or a clone), shares nothing with another handle, and writes nothing to disk.

use std::time::Duration;

use idemdb::__internal::InMemory;
use idemdb::{Claim, ClaimOptions, Config, Durability, Expect, RecordState, Reservation, Response};

fn open(dir: &std::path::Path, mem: &InMemory, durability: Durability) -> idemdb::Store {
    Config::new(dir)
        .durability(durability)
        .sweep_interval(None)
        .write_buffer_bytes(1 << 20)
        .cache_bytes(1 << 20)
        .in_memory(mem)
        .open()
        .unwrap()
}

/// Every entry under `dir`, recursively (nothing, for a store kept in memory).
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            found.extend(files_under(&p));
        }
        found.push(p);
    }
    found
}

#[test]
fn in_memory_store_survives_reopen_and_leaves_nothing_on_disk() {
    for durability in [Durability::Synced, Durability::Buffered] {
        let dir = tempfile::tempdir().unwrap();
        let mem = InMemory::new().unwrap();
        let receipt = Response::new(b"charged".to_vec()).with_status(201);
        let fence = {
            let store = open(dir.path(), &mem, durability);
            let Claim::Acquired(lease) = store
                .claim("acme", "k1", b"fp", ClaimOptions::default())
                .unwrap()
            else {
                panic!("a new key is acquired")
            };
            store.complete(&lease, receipt.clone()).unwrap().unwrap();
            store
                .put_entity("acme", "balance", Expect::Absent, b"100".to_vec())
                .unwrap()
                .unwrap();
            assert_eq!(
                store.reserve("email", &[b"a@x"], "user-1").unwrap(),
                Reservation::Reserved
            );
            // Flushed and compacted into table files, so the reopen reads tables as well as the
            // write-ahead log of what follows.
            store.compact().unwrap();
            store
                .put_entity("acme", "balance", Expect::Version(1), b"90".to_vec())
                .unwrap()
                .unwrap();
            lease.fence()
        };
        assert_eq!(files_under(dir.path()), Vec::<std::path::PathBuf>::new());

        // Reopened with a clone of the handle: everything is there, and tokens keep increasing.
        let store = open(dir.path(), &mem.clone(), durability);
        let info = store
            .get("acme", "k1")
            .unwrap()
            .expect("the record survives");
        match info.state {
            RecordState::Completed(replay) => assert_eq!(replay.response, receipt),
            other => panic!("expected the completion, got {other:?}"),
        }
        match store
            .claim("acme", "k1", b"fp", ClaimOptions::default())
            .unwrap()
        {
            Claim::Completed(replay) => assert_eq!(replay.response, receipt),
            other => panic!("expected a replay, got {other:?}"),
        }
        let balance = store.get_entity("acme", "balance").unwrap().unwrap();
        assert_eq!((balance.version, balance.value), (2, b"90".to_vec()));
        assert_eq!(
            store.reservation_owner("email", &[b"a@x"]).unwrap(),
            Some(b"user-1".to_vec())
        );
        let Claim::Acquired(next) = store
            .claim(
                "acme",
                "k2",
                b"fp",
                ClaimOptions::default().lease(Duration::from_secs(5)),
            )
            .unwrap()
        else {
            panic!("a new key is acquired")
        };
        assert!(next.fence() > fence, "{} <= {fence}", next.fence());
        drop(store);

        // Another handle at the same path is another, empty, environment.
        let other = open(dir.path(), &InMemory::new().unwrap(), durability);
        assert_eq!(other.get("acme", "k1").unwrap(), None);
        assert_eq!(other.get_entity("acme", "balance").unwrap(), None);
        drop(other);

        assert_eq!(files_under(dir.path()), Vec::<std::path::PathBuf>::new());
    }
}
