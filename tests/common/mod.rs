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
