//! The embedded store's own settings (`Config<OnDisk>`): where the store lives on disk, when a
//! write is safe, the engine's memory, lock stripes, in-memory pending records. Invariant: only
//! the embedded backend reads them; nothing here touches the disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{Common, Config};
use crate::clock::{Clock, SystemClock};
use crate::error::{InvalidInput, Result};

/// When an acknowledged write is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// The write-ahead log is synced to the device before a call returns: an acknowledged claim or
    /// completion survives power loss. Concurrent synced writers share one sync (group commit).
    Synced,
    /// The write reaches the operating system before a call returns: it survives a crash of the
    /// process (kill -9) but not of the machine.
    Buffered,
}

/// The embedded store's own settings, the `B` of a [`Config`] made by [`Config::new`]; its
/// setters are the methods of `Config<OnDisk>`.
#[derive(Clone)]
pub struct OnDisk {
    pub(crate) path: PathBuf,
    pub(crate) durability: Durability,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) cache_bytes: usize,
    pub(crate) write_buffer_bytes: usize,
    pub(crate) lock_stripes: usize,
    pub(crate) pending_in_memory: usize,
    pub(crate) duplicate_wait: Duration,
    pub(crate) read_only: bool,
    /// Tests and fuzzing only: the in-memory environment holding the database (see
    /// [`Config::in_memory`]); `None` (on disk) for every normal store.
    pub(crate) in_memory: Option<InMemoryEnv>,
}

impl std::fmt::Debug for OnDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnDisk")
            .field("path", &self.path)
            .field("durability", &self.durability)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// The in-memory environment of [`Config::in_memory`], opaque to the shared floor: the embedded
/// backend keeps its engine's environment inside and takes it back out when the store opens.
#[derive(Clone)]
pub(crate) struct InMemoryEnv(pub(crate) Arc<dyn std::any::Any + Send + Sync>);

impl Config<OnDisk> {
    /// A configuration for the embedded store in directory `path` (created if missing), with
    /// every default. Open it with [`Config::open`] (or `Config::open_async`, feature `async`).
    pub fn new(path: impl AsRef<Path>) -> Self {
        Config {
            common: Common::default(),
            backend: OnDisk {
                path: path.as_ref().to_path_buf(),
                durability: Durability::Synced,
                clock: Arc::new(SystemClock),
                cache_bytes: 64 << 20,
                write_buffer_bytes: 64 << 20,
                lock_stripes: 4096,
                pending_in_memory: 65_536,
                duplicate_wait: Duration::ZERO,
                read_only: false,
                in_memory: None,
            },
        }
    }

    /// Durability of acknowledged writes. Default: [`Durability::Synced`], because a payment that
    /// was acknowledged as done and then charged again after a power cut is the failure this
    /// library exists to prevent; choose [`Durability::Buffered`] where a process crash is the only
    /// failure you must survive.
    #[must_use]
    pub fn durability(mut self, d: Durability) -> Self {
        self.backend.durability = d;
        self
    }

    /// The clock used for leases and expiry. Default: [`SystemClock`]. Tests use
    /// [`crate::ManualClock`].
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.backend.clock = Arc::new(clock);
        self
    }

    /// Size of the block cache shared by every column family. Default: 64 MiB.
    #[must_use]
    pub fn cache_bytes(mut self, n: usize) -> Self {
        self.backend.cache_bytes = n;
        self
    }

    /// Size of one memtable of the `records` and `versions` column families (the `expiry` index
    /// gets a quarter of it; `meta` and `default` 4 MiB each), at least 1 MiB. Default: 64 MiB.
    #[must_use]
    pub fn write_buffer_bytes(mut self, n: usize) -> Self {
        self.backend.write_buffer_bytes = n;
        self
    }

    /// Number of lock stripes that serialise decisions per key (a power of two, 1..=1<<20).
    /// Default: 4096.
    #[must_use]
    pub fn lock_stripes(mut self, n: usize) -> Self {
        self.backend.lock_stripes = n;
        self
    }

    /// Opens the embedded store read-only, as a follower of the directory that another process
    /// may hold open and keep writing (a RocksDB secondary instance, with its own scratch
    /// directory under the system's temporary directory, removed on close). It reads what the
    /// writer had written when it opened, and more after each [`crate::Store::catch_up`]; every
    /// call that would write (claims included) returns [`crate::Error::ReadOnly`]; it runs no
    /// background sweep and never writes to the directory. `idemdb inspect` and `idemdb stats`
    /// open stores this way. A directory that holds no store is refused, not created.
    /// Default: `false`.
    #[must_use]
    pub fn read_only(mut self, yes: bool) -> Self {
        self.backend.read_only = yes;
        self
    }

    /// How many pending records the embedded store may keep in memory only (docs/design.md,
    /// "In-memory pending records"). A claim that acquires writes nothing to disk while there is
    /// room: its pending record lives in this process until the holder completes, fails or
    /// checkpoints it (one durable write per request), and a crash loses it, which only makes
    /// the key claimable at once after the restart (the operation never completed). Past the cap
    /// a claim writes its pending record durably, as `ClaimOptions::durable_pending` asks, and
    /// never refuses. `0`: every pending record is durable. Consumer messages are always
    /// durable. (A store on PostgreSQL keeps every record in the database: it has no such setting.)
    /// The cap is checked without a lock shared by all keys, so claims running at the same moment
    /// may pass it by one each; `Stats::pending_in_memory` counts them. Default: 65,536 (a few MiB).
    #[must_use]
    pub fn pending_in_memory(mut self, n: usize) -> Self {
        self.backend.pending_in_memory = n;
        self
    }

    /// How long [`Store::execute`](crate::Store::execute) waits for a duplicate running in this process to finish before
    /// answering "in progress". Default: zero (answer at once).
    #[must_use]
    pub fn duplicate_wait(mut self, d: Duration) -> Self {
        self.backend.duplicate_wait = d;
        self
    }

    /// Tests and fuzzing only, not part of the stable API: keep the database in the in-memory
    /// environment `env` instead of on disk. The path then names the database inside `env`; a
    /// store reopened at the same path with the same `env` (or a clone) finds its records again.
    /// Nothing of the database is written to disk, but opening still creates the directory `path`
    /// if it is missing (as for a store on disk): give an existing one.
    #[cfg(feature = "__internal")]
    #[doc(hidden)]
    #[must_use]
    pub fn in_memory(mut self, env: &crate::__internal::InMemory) -> Self {
        self.backend.in_memory = Some(InMemoryEnv(Arc::new(env.0.clone())));
        self
    }

    /// Refuses settings out of their ranges, the shared ones first.
    pub(crate) fn validate(&self) -> Result<()> {
        self.common.validate()?;
        let bad = |m: String| Err(InvalidInput::Config(m).into());
        let d = &self.backend;
        if !d.lock_stripes.is_power_of_two() || d.lock_stripes > 1 << 20 {
            return bad(format!(
                "lock_stripes {} is not a power of two up to 1<<20",
                d.lock_stripes
            ));
        }
        if d.write_buffer_bytes < 1 << 20 {
            return bad("write_buffer_bytes under 1 MiB".into());
        }
        Ok(())
    }
}
