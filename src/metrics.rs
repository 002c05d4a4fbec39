//! Outcome counters. Invariant: every public call that decides an outcome bumps exactly the
//! counter named for it; counters only go up and are per process (they start at zero on open).

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($name:ident: $doc:literal),* $(,)?) => {
        #[derive(Default)]
        pub(crate) struct Metrics { $(pub(crate) $name: AtomicU64,)* }

        /// A snapshot of the outcome counters since the store was opened.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Counters { $(#[doc = $doc] pub $name: u64,)* }

        impl Metrics {
            pub(crate) fn snapshot(&self) -> Counters {
                Counters { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }

        impl Counters {
            /// (name, value) pairs, for printing.
            pub fn pairs(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters! {
    acquired: "Claims that acquired a key (including takeovers).",
    replayed: "Claims that replayed a completed or terminally failed result.",
    in_progress: "Claims that found a live lease held by someone else.",
    mismatch: "Claims whose fingerprint differed from the stored one.",
    takeover: "Claims that took over an expired lease.",
    lease_lost: "Lease-holder calls refused because the lease was no longer current.",
    expired: "Reads that met a record past its expiry and treated it as absent.",
    completed: "Leases completed with a response.",
    failed_retryable: "Leases failed and released for a retry.",
    failed_terminal: "Leases failed with a stored terminal failure.",
    renewed: "Lease renewals.",
    checkpointed: "Recovery points stored.",
    forgotten: "Records deleted by an operator.",
    swept: "Expired records deleted by a sweep.",
    compaction_dropped: "Expired records dropped by the compaction filter.",
}

impl Metrics {
    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counters plus RocksDB's own estimates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Outcome counters since open.
    pub counters: Counters,
    /// RocksDB's estimate of the number of keys in the records column family (it counts expired
    /// records not yet dropped, and may be off after deletes).
    pub estimated_records: u64,
    /// RocksDB's estimate of the number of expiry-index entries.
    pub estimated_index_entries: u64,
    /// Bytes of live SST files over all column families.
    pub live_sst_bytes: u64,
    /// Bytes held in memtables over all column families.
    pub memtable_bytes: u64,
    /// Pending records held in memory only (claims that wrote nothing yet, docs/design.md
    /// "In-memory pending records"), against [`crate::Config::pending_in_memory`].
    pub pending_in_memory: u64,
}
