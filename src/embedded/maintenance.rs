//! Maintenance: compaction, WAL sync and closing (the sweep is `sweep.rs`, the statistics
//! `stats.rs`). Invariants: a store closes only from its last handle, with its sweeper stopped
//! and its WAL synced first, so the directory can be reopened as soon as `close` returns `Ok`
//! (from any other handle, nothing closes and the sweeper keeps running); a compaction drops
//! only what the compaction filter says expired by the store's time, read just before it.

use std::sync::Arc;

use crate::embedded::Store;
use crate::error::{Error, Result};

impl Store {
    /// Flushes memtables and compacts every column family fully, so the compaction filter drops
    /// every record expired by now. Slow on large stores; for tests and maintenance windows.
    pub fn compact(&self) -> Result<()> {
        self.now();
        self.core.engine.compact_all()
    }

    /// Syncs the write-ahead log: with [`crate::Durability::Buffered`], everything acknowledged
    /// before this call now survives power loss.
    pub fn sync(&self) -> Result<()> {
        self.core.engine.sync_wal()
    }

    /// Stops the background sweeper, syncs the WAL and closes the database, so that the directory
    /// can be reopened as soon as this returns `Ok`. Dropping the last handle does the same
    /// without reporting errors. If other handles of this store are alive (clones held by other
    /// threads, the HTTP layer, a consumer), nothing is closed: this handle is dropped, the
    /// others keep working, and the call returns [`Error::InUse`]; the database closes when the
    /// last of them is dropped.
    pub fn close(self) -> Result<()> {
        // The sweeper holds the store only while it sweeps: stop it first so it is not counted.
        self.stop_sweeper();
        let other_handles = Arc::strong_count(&self.core) - 1;
        if other_handles > 0 {
            if let Some(every) = self.core.cfg.common.sweep_interval {
                self.start_sweeper(every);
            }
            return Err(Error::InUse { other_handles });
        }
        self.core.engine.sync_wal()?;
        drop(self);
        Ok(())
    }
}
