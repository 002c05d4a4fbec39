//! The embedded backend: a whole store on RocksDB in local files. Invariant: a `Store` is a cheap
//! handle to one shared [`Core`]; every public operation is a method on it, implemented in the file
//! of its concept, each of which keeps the core's contract (see `core.rs`): `requests`, `entities`,
//! `causal`, `offsets`, `unique`, `commit`, `waits`, `sweep` and `stats`, and the core's own
//! `fences` (and the engine's `engine/group_commit.rs`), the names `src/postgres/` gives the same
//! concepts; and `consumer`, `maintenance` and `inspect`, which have no file of that name there
//! (on PostgreSQL a delivery is a claim `async_store/consumers.rs` makes, compaction, WAL sync
//! and closing are the database server's, and `idemdb inspect --postgres` reads a record with
//! `get`). Only `engine/` names RocksDB.

pub(crate) mod causal;
pub(crate) mod codec;
pub(crate) mod commit;
mod consumer;
pub(crate) mod core;
pub(crate) mod engine;
mod entities;
mod fences;
#[cfg(test)]
mod format_1_bytes_decode_forever;
pub(crate) mod inspect;
mod maintenance;
mod offsets;
mod requests;
pub(crate) mod schema;
mod stats;
pub(crate) mod stripes;
mod sweep;
pub(crate) mod unique;
pub(crate) mod waits;

use std::sync::Arc;

use crate::clock::Millis;
use crate::config::Config;
use crate::embedded::core::Core;
use crate::error::Result;

/// An open idempotency store. Cheap to clone; all clones share one database. Safe to use from
/// any number of threads.
#[derive(Clone)]
pub struct Store {
    pub(crate) core: Arc<Core>,
}

impl Store {
    /// Opens the store described by `cfg` (see [`Config`]).
    pub fn open(cfg: Config) -> Result<Store> {
        let sweep_interval = cfg.common.sweep_interval.filter(|_| !cfg.backend.read_only);
        let store = Store {
            core: Arc::new(Core::open(cfg)?),
        };
        if let Some(every) = sweep_interval {
            store.start_sweeper(every);
        }
        Ok(store)
    }

    /// For a store opened with [`Config::read_only`]: reads what the process that owns the
    /// directory wrote since this store opened or last caught up (RocksDB's catch-up of a
    /// secondary instance). A writable store has nothing to catch up with: `Ok` at once.
    pub fn catch_up(&self) -> Result<()> {
        self.core.engine.catch_up()
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &Config {
        &self.core.cfg
    }

    /// The store's current time: the clock's reading, never earlier than a time the store used
    /// before, in this process or before a restart (see [`crate::Clock`]).
    pub fn now(&self) -> Millis {
        self.core.now()
    }
}

impl Config<crate::config::OnDisk> {
    /// Opens (or creates) the embedded store.
    pub fn open(self) -> Result<Store> {
        Store::open(self)
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.core.cfg.backend.path)
            .field("durability", &self.core.cfg.backend.durability)
            .finish_non_exhaustive()
    }
}
