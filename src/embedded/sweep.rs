//! The sweep: deleting expired records through the expiry index, and the background sweeper
//! thread that runs it every `Config::sweep_interval` (the PostgreSQL counterpart is
//! `postgres/sweep.rs`). Invariants: a sweep deletes a record only through its current index
//! entry and only once it expired; sweeps run one at a time and resume where the last one
//! stopped; the sweeper holds the store only while it sweeps (a weak handle otherwise), so it
//! never keeps a dropped store open.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::embedded::core::Core;
use crate::embedded::engine::Cf;
use crate::embedded::{codec, Store};
use crate::error::Result;
use crate::format;
use crate::telemetry::spans::{Op, OpKind};

impl Store {
    /// Deletes up to `limit` expired records, oldest expiry first, with their index entries, and
    /// drops stale index entries met on the way. Returns how many records were deleted. A record
    /// whose expiry was extended is never deleted by its old index entry.
    pub fn sweep(&self, limit: usize) -> Result<usize> {
        if limit == 0 {
            return Ok(0);
        }
        let op = Op::unkeyed(OpKind::Sweep);
        let swept = self.sweep_in(limit);
        if let Ok(n) = &swept {
            op.count(*n as u64);
        }
        op.end_with(swept, |_| "swept")
    }

    fn sweep_in(&self, limit: usize) -> Result<usize> {
        self.core.engine.check_writable()?;
        // Every entry a sweep visits is deleted, so the next sweep starts where this one stopped
        // instead of walking the deletions again until compaction drops them (the cost grew with
        // every sweep before). An entry written below that point later would have expired before
        // it was written; the compaction filter still drops it.
        let mut from = self.core.sweep_from.lock();
        let now = self.now();
        let upper = format::index_bound(now.saturating_add(1));
        let mut entries = Vec::new();
        self.core
            .engine
            .scan(Cf::Expiry, &from, Some(&upper), |k, _| {
                entries.push(k.to_vec());
                entries.len() < limit
            })?;
        let mut swept = 0;
        for entry in &entries {
            let mut batch = self.core.engine.batch();
            batch.delete(Cf::Expiry, entry);
            if let Some((_, rkey)) = format::split_index_key(entry) {
                let mut stripe = self.core.lock(rkey);
                // Only the record's index slot matters: read it from a borrowed view. A key whose
                // current record is in memory keeps the expired stored record below it: the
                // in-memory record's own write replaces it (and a sweep counts only records that
                // stopped existing).
                let slot = if stripe.volatile(rkey).is_some() {
                    None
                } else {
                    self.core.engine.get_with(Cf::Records, rkey, |v| {
                        v.and_then(|b| codec::decode_record_view(b).ok())
                            .map(|rec| rec.index_slot())
                    })?
                };
                if let Some((expires_at, fence)) = slot {
                    let is_current = format::index_key(expires_at, fence, rkey) == *entry;
                    if is_current && expires_at <= now {
                        stripe.forget(rkey);
                        batch.delete(Cf::Records, rkey);
                        swept += 1;
                    }
                }
                // Deletes of expired data need no sync: if lost, the record is still expired.
                self.core.engine.write_buffered(batch)?;
            } else {
                self.core.engine.write_buffered(batch)?;
            }
            from.clone_from(entry);
        }
        drop(from);
        // Expired in-memory records give their memory and their room under the cap back (they
        // read as absent already; what is stored below one expired no later than it did).
        self.core.stripes.drop_expired_volatile(now);
        self.core.metrics.swept.add(swept as u64);
        Ok(swept)
    }

    pub(crate) fn start_sweeper(&self, every: Duration) {
        let (tx, rx) = mpsc::channel::<()>();
        let weak: Weak<Core> = Arc::downgrade(&self.core);
        let handle = std::thread::Builder::new()
            .name("idemdb-sweeper".into())
            .spawn(move || loop {
                match rx.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let Some(inner) = weak.upgrade() else { return };
                let store = Store { core: inner };
                // A failed sweep is retried next time; expired records stay invisible meanwhile.
                while matches!(store.sweep(10_000), Ok(n) if n == 10_000) {}
                // Keeps the gauges current between the application's own `stats` calls.
                if cfg!(feature = "metrics") {
                    let _ = store.stats();
                }
            });
        if let Ok(h) = handle {
            *self.core.sweeper.lock() = Some((tx, h));
        }
    }

    pub(crate) fn stop_sweeper(&self) {
        self.core.stop_sweeper();
    }
}
