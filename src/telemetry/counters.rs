//! Outcome counters. Invariant: every public call that decides an outcome bumps exactly the
//! counter named for it; counters only go up and are per process (they start at zero on open).

use std::sync::atomic::{AtomicU64, Ordering};

/// One outcome counter: its count since open, and the `metrics` facade counter (feature
/// `metrics`) it also increments, named in the `idemdb_..._total` style with its labels
/// (docs/operating.md lists them all).
pub(crate) struct Count {
    n: AtomicU64,
    metric: &'static str,
    labels: &'static [(&'static str, &'static str)],
    /// The facade's key, built on the first increment and kept: the `counter!` macro would build
    /// it (a heap-allocated label list) on every increment, recorder or not.
    #[cfg(feature = "metrics")]
    key: std::sync::OnceLock<metrics::Key>,
}

/// The metadata of every metric idemdb publishes (what the facade's macros would give it).
#[cfg(feature = "metrics")]
pub(crate) static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new("idemdb", metrics::Level::INFO, Some(module_path!()));

impl Count {
    pub(crate) const fn new(
        metric: &'static str,
        labels: &'static [(&'static str, &'static str)],
    ) -> Self {
        Count {
            n: AtomicU64::new(0),
            metric,
            labels,
            #[cfg(feature = "metrics")]
            key: std::sync::OnceLock::new(),
        }
    }

    /// The value of its first label (the outcome it counts), or its name.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn label(&self) -> &'static str {
        self.labels.first().map_or(self.metric, |l| l.1)
    }

    pub(crate) fn load(&self) -> u64 {
        self.n.load(Ordering::Relaxed)
    }

    pub(crate) fn add(&self, by: u64) {
        self.n.fetch_add(by, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        {
            let key = self
                .key
                .get_or_init(|| metrics::Key::from_parts(self.metric, self.labels));
            metrics::with_recorder(|r| r.register_counter(key, &METADATA)).increment(by);
        }
    }
}

macro_rules! counters {
    ($($name:ident: $metric:literal $([$($k:literal = $v:literal),*])?, $doc:literal),* $(,)?) => {
        pub(crate) struct Metrics { $(pub(crate) $name: Count,)* }

        impl Default for Metrics {
            fn default() -> Self {
                Metrics { $($name: Count::new($metric, &[$($(($k, $v)),*)?]),)* }
            }
        }

        /// A snapshot of the outcome counters since the store was opened.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Counters { $(#[doc = $doc] pub $name: u64,)* }

        impl Metrics {
            pub(crate) fn snapshot(&self) -> Counters {
                Counters { $($name: self.$name.load(),)* }
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
    acquired: "idemdb_claims_total" ["outcome" = "acquired"],
        "Claims that acquired a key (including takeovers).",
    replayed: "idemdb_claims_total" ["outcome" = "replayed"],
        "Claims that replayed a completed or terminally failed result.",
    in_progress: "idemdb_claims_total" ["outcome" = "in_progress"],
        "Claims that found a live lease held by someone else.",
    mismatch: "idemdb_claims_total" ["outcome" = "mismatch"],
        "Claims whose fingerprint differed from the stored one.",
    takeover: "idemdb_takeovers_total", "Claims that took over an expired lease.",
    lease_lost: "idemdb_lease_lost_total",
        "Lease-holder calls refused because the lease was no longer current.",
    expired: "idemdb_expired_reads_total",
        "Reads that met a record past its expiry and treated it as absent.",
    completed: "idemdb_lease_ends_total" ["outcome" = "completed"],
        "Leases completed with a response.",
    failed_retryable: "idemdb_lease_ends_total" ["outcome" = "released"],
        "Leases failed and released for a retry.",
    failed_terminal: "idemdb_lease_ends_total" ["outcome" = "failed"],
        "Leases failed with a stored terminal failure.",
    renewed: "idemdb_renewals_total", "Lease renewals.",
    checkpointed: "idemdb_checkpoints_total", "Recovery points stored.",
    forgotten: "idemdb_removed_total" ["by" = "operator"], "Records deleted by an operator.",
    swept: "idemdb_removed_total" ["by" = "sweep"], "Expired records deleted by a sweep.",
    compaction_dropped: "idemdb_removed_total" ["by" = "compaction"],
        "Expired records dropped by the compaction filter.",
}

impl Metrics {
    pub(crate) fn bump(c: &Count) {
        c.add(1);
    }

    /// Counts a claim's outcome (a backend that decides claims elsewhere: PostgreSQL).
    #[cfg(feature = "postgres")]
    pub(crate) fn count_claim(&self, claim: &crate::record::Claim) {
        use crate::record::Claim;
        match claim {
            Claim::Acquired(l) => {
                Metrics::bump(&self.acquired);
                if l.takeover {
                    Metrics::bump(&self.takeover);
                }
            }
            Claim::Completed(_) | Claim::Failed(_) => Metrics::bump(&self.replayed),
            Claim::InProgress { .. } => Metrics::bump(&self.in_progress),
            Claim::Mismatch => Metrics::bump(&self.mismatch),
        }
    }
}

impl Counters {
    /// Leases this process acquired that it has not ended: claims acquired less completions,
    /// failures and lease-holder calls refused as lost (at zero at least). A lease abandoned by
    /// its handler (it never completes nor fails) stays counted, so a count that keeps climbing
    /// means handlers that never finish (the `idemdb_leases_outstanding` gauge).
    pub fn leases_outstanding(&self) -> u64 {
        self.acquired.saturating_sub(
            self.completed
                .saturating_add(self.failed_retryable)
                .saturating_add(self.failed_terminal)
                .saturating_add(self.lease_lost),
        )
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
    /// How far the oldest expired record not yet swept is past its expiry, in milliseconds (0:
    /// nothing expired waits), read from the start of the expiry index. A value that keeps
    /// growing means the sweep falls behind (the `idemdb_sweep_lag_seconds` gauge).
    pub sweep_lag_ms: u64,
}
