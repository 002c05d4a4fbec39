//! The statistics of an embedded store: this process's outcome counters with RocksDB's estimates
//! of what the store holds, and exact counts for tests and operators (the PostgreSQL
//! counterpart is `postgres/stats.rs`). Invariants: reading them changes no record; the sizes
//! are RocksDB's estimates, never a walk of the data, except `physical_counts`, which walks it
//! (O(n)); with the feature `metrics`, every `stats` call also sets the store's gauges.

use crate::embedded::engine::{Cf, EngineProperty};
use crate::embedded::Store;
use crate::error::Result;
use crate::format;
use crate::telemetry::counters::Stats;

impl Store {
    /// Outcome counters and RocksDB's estimates. With the feature `metrics`, also sets the
    /// store's gauges (docs/operating.md).
    pub fn stats(&self) -> Result<Stats> {
        let s = self.stats_in()?;
        crate::telemetry::spans::publish_gauges(&s);
        Ok(s)
    }

    fn stats_in(&self) -> Result<Stats> {
        let e = &self.core.engine;
        let mut counters = self.core.metrics.snapshot();
        counters.compaction_dropped = e.filtered(Cf::Records);
        let mut live_sst_bytes = 0;
        let mut memtable_bytes = 0;
        for cf in Cf::ALL {
            live_sst_bytes += e.int_property(cf, EngineProperty::LiveSstBytes)?;
            memtable_bytes += e.int_property(cf, EngineProperty::MemtableBytes)?;
        }
        Ok(Stats {
            counters,
            estimated_records: e.int_property(Cf::Records, EngineProperty::EstimatedKeys)?,
            estimated_index_entries: e.int_property(Cf::Expiry, EngineProperty::EstimatedKeys)?,
            live_sst_bytes,
            memtable_bytes,
            pending_in_memory: self.core.stripes.volatile_count() as u64,
            sweep_lag_ms: self.sweep_lag()?,
        })
    }

    /// How far past its expiry the oldest expired record not yet swept is (0: none), from the
    /// first entry of the expiry index at or after where the last sweep stopped.
    fn sweep_lag(&self) -> Result<u64> {
        let from = self.core.sweep_from.lock().clone();
        let now = self.now();
        let mut oldest = None;
        self.core.engine.scan(Cf::Expiry, &from, None, |k, _| {
            oldest = format::split_index_key(k).map(|(t, _)| t);
            false
        })?;
        Ok(oldest.map_or(0, |t| now.saturating_sub(t)))
    }

    /// Counts the records physically present (expired or not) by iterating the records column
    /// family, and the index entries. For tests and operators; O(n).
    pub fn physical_counts(&self) -> Result<(u64, u64)> {
        let count = |cf| -> Result<u64> {
            let mut n = 0;
            self.core.engine.scan(cf, &[], None, |_, _| {
                n += 1;
                true
            })?;
            Ok(n)
        };
        Ok((count(Cf::Records)?, count(Cf::Expiry)?))
    }
}
