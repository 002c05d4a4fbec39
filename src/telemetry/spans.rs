//! Observability (docs/operating.md): the `tracing` span of each store operation and the
//! `metrics` facade's histograms and gauges (the outcome counters are in `counters.rs`).
//! Invariants: a span never carries key or response bytes unless [`Config::trace_keys`] asks for
//! keys (response bytes never); a tenant appears as [`Config::trace_tenants`] says; hashes are
//! computed only for a span a subscriber enabled; with the features `tracing` and `metrics` off,
//! every item here compiles to nothing.

use crate::config::Common;

/// The hash of `(tenant, key)` that spans carry as `key_hash` (16 hex digits of the SHA-256 of
/// the tenant's length, the tenant and the key), so an operator holding a key can find its spans
/// without the spans holding the key.
pub fn trace_key_hash(tenant: &[u8], key: &[u8]) -> String {
    let len = u16::try_from(tenant.len())
        .unwrap_or(u16::MAX)
        .to_be_bytes();
    short_hash(&[&len, tenant, key])
}

/// 16 hex digits of the SHA-256 of the concatenated parts.
pub(crate) fn short_hash(parts: &[&[u8]]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The tenant as [`Config::trace_tenants`] shows it (`None`: omitted).
#[cfg(feature = "tracing")]
pub(crate) fn tenant_label(how: crate::config::TraceTenants, tenant: &[u8]) -> Option<String> {
    match how {
        crate::config::TraceTenants::Hashed => Some(short_hash(&[tenant])),
        crate::config::TraceTenants::Plain => Some(String::from_utf8_lossy(tenant).into_owned()),
        crate::config::TraceTenants::Omitted => None,
    }
}

/// The store operations that get a span and a latency histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    Claim,
    Begin,
    Complete,
    Fail,
    Renew,
    Checkpoint,
    Commit,
    Reserve,
    Sweep,
}

impl OpKind {
    /// A claim's kind: a request claim, or the begin of a consumer message.
    pub(crate) fn of_claim(ns: crate::format::Namespace) -> OpKind {
        match ns {
            crate::format::Namespace::Requests => OpKind::Claim,
            _ => OpKind::Begin,
        }
    }
}

/// Each operation's name (the `op` label) and, from the same list, the key of its
/// `idemdb_operation_duration_seconds{op}` histogram, built once as a static (the `histogram!`
/// macro would allocate its label list on every call, recorder or not).
macro_rules! op_names {
    ($($variant:ident => $name:literal),* $(,)?) => {
        #[cfg(feature = "metrics")]
        impl OpKind {
            pub(crate) const fn name(self) -> &'static str {
                match self {
                    $(OpKind::$variant => $name,)*
                }
            }

            fn duration_key(self) -> &'static metrics::Key {
                match self {
                    $(OpKind::$variant => {
                        static LABELS: [metrics::Label; 1] =
                            [metrics::Label::from_static_parts("op", $name)];
                        static KEY: metrics::Key = metrics::Key::from_static_parts(
                            "idemdb_operation_duration_seconds",
                            &LABELS,
                        );
                        &KEY
                    })*
                }
            }
        }
    };
}

op_names! {
    Claim => "claim",
    Begin => "begin",
    Complete => "complete",
    Fail => "fail",
    Renew => "renew",
    Checkpoint => "checkpoint",
    Commit => "commit",
    Reserve => "reserve",
    Sweep => "sweep",
}

/// When something started, for an [`Op`] begun after it (`since`); nothing without the features.
/// (Only the async API's embedded claim answers before its span begins.)
#[cfg(feature = "async")]
#[derive(Clone, Copy)]
pub(crate) struct Stamp {
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    at: std::time::Instant,
}

#[cfg(feature = "async")]
impl Stamp {
    #[inline]
    pub(crate) fn now() -> Stamp {
        Stamp {
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            at: std::time::Instant::now(),
        }
    }
}

/// One store operation in flight: its span (feature `tracing`) and its start (for the span's
/// `duration_us` and the `idemdb_operation_duration_seconds` histogram). End it with
/// [`Op::end`] or [`Op::end_with`]; dropped unended (an early return), it records nothing more.
#[must_use]
pub(crate) struct Op {
    #[cfg(feature = "metrics")]
    kind: OpKind,
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    start: std::time::Instant,
    #[cfg(feature = "tracing")]
    span: tracing::Span,
}

/// A span per operation, each with its own name (a span's name is fixed where it is written).
#[cfg(feature = "tracing")]
macro_rules! op_span {
    ($kind:expr, $($name:literal => $variant:ident),* $(,)?) => {
        match $kind {
            $(OpKind::$variant => tracing::debug_span!(
                target: "idemdb",
                $name,
                tenant = tracing::field::Empty,
                key_hash = tracing::field::Empty,
                key = tracing::field::Empty,
                outcome = tracing::field::Empty,
                fence = tracing::field::Empty,
                count = tracing::field::Empty,
                error = tracing::field::Empty,
                duration_us = tracing::field::Empty,
            ),)*
        }
    };
}

impl Op {
    /// Starts an operation on the key `key` of `tenant` (for a consumer message: the group and
    /// the message id; for a reservation: the index and the encoded value).
    #[inline]
    pub(crate) fn start(kind: OpKind, cfg: &Common, tenant: &[u8], key: &[u8]) -> Op {
        let op = Op::unkeyed(kind);
        #[cfg(feature = "tracing")]
        if !op.span.is_disabled() {
            if let Some(t) = tenant_label(cfg.trace_tenants, tenant) {
                op.span.record("tenant", t.as_str());
            }
            op.span
                .record("key_hash", trace_key_hash(tenant, key).as_str());
            if cfg.trace_keys {
                op.span.record("key", String::from_utf8_lossy(key).as_ref());
            }
        }
        #[cfg(not(feature = "tracing"))]
        let _ = (cfg, tenant, key);
        op
    }

    /// Starts a lease holder's call: the lease's key, with its fencing token.
    #[inline]
    pub(crate) fn held(kind: OpKind, cfg: &Common, lease: &crate::record::Lease) -> Op {
        let op = Op::start(kind, cfg, lease.tenant(), lease.key());
        op.fence(lease.fence());
        op
    }

    /// Starts an operation on no single key (a sweep, a commit).
    #[inline]
    pub(crate) fn unkeyed(kind: OpKind) -> Op {
        #[cfg(not(any(feature = "tracing", feature = "metrics")))]
        let _ = kind;
        Op {
            #[cfg(feature = "metrics")]
            kind,
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            start: std::time::Instant::now(),
            #[cfg(feature = "tracing")]
            span: op_span!(kind,
                "idemdb.claim" => Claim,
                "idemdb.begin" => Begin,
                "idemdb.complete" => Complete,
                "idemdb.fail" => Fail,
                "idemdb.renew" => Renew,
                "idemdb.checkpoint" => Checkpoint,
                "idemdb.commit" => Commit,
                "idemdb.reserve" => Reserve,
                "idemdb.sweep" => Sweep,
            ),
        }
    }

    /// Counts the operation's duration from `stamp` (an answer given before its span began).
    #[cfg(feature = "async")]
    #[inline]
    pub(crate) fn since(self, stamp: Stamp) -> Op {
        #[cfg(any(feature = "tracing", feature = "metrics"))]
        let op = Op {
            start: stamp.at,
            ..self
        };
        #[cfg(not(any(feature = "tracing", feature = "metrics")))]
        let op = {
            let _ = stamp;
            self
        };
        op
    }

    /// Records the fencing token the operation acquired or held.
    #[inline]
    pub(crate) fn fence(&self, fence: u64) {
        #[cfg(feature = "tracing")]
        self.span.record("fence", fence);
        #[cfg(not(feature = "tracing"))]
        let _ = fence;
    }

    /// Records a count (how many records a sweep deleted, how many operations a commit held).
    #[inline]
    pub(crate) fn count(&self, n: u64) {
        #[cfg(feature = "tracing")]
        self.span.record("count", n);
        #[cfg(not(feature = "tracing"))]
        let _ = n;
    }

    /// Ends the operation with its outcome.
    #[inline]
    pub(crate) fn end(self, outcome: &'static str) {
        #[cfg(any(feature = "tracing", feature = "metrics"))]
        {
            let took = self.start.elapsed();
            #[cfg(feature = "tracing")]
            if !self.span.is_disabled() {
                self.span.record("outcome", outcome);
                self.span.record(
                    "duration_us",
                    u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
                );
            }
            #[cfg(feature = "metrics")]
            metrics::with_recorder(|r| {
                r.register_histogram(
                    self.kind.duration_key(),
                    &crate::telemetry::counters::METADATA,
                )
            })
            .record(took.as_secs_f64());
            #[cfg(not(feature = "tracing"))]
            let _ = outcome;
        }
        #[cfg(not(any(feature = "tracing", feature = "metrics")))]
        let _ = outcome;
    }

    /// Ends the operation with the outcome `outcome` names for a result, or, for an error,
    /// `"error"` with the error's class in the span and `idemdb_errors_total{op, class}`
    /// counted. Hands the result back.
    #[inline]
    pub(crate) fn end_with<T>(
        self,
        r: crate::error::Result<T>,
        outcome: impl FnOnce(&T) -> &'static str,
    ) -> crate::error::Result<T> {
        match &r {
            Ok(v) => self.end(outcome(v)),
            Err(e) => {
                let class = e.class();
                #[cfg(feature = "tracing")]
                self.span.record("error", class);
                #[cfg(feature = "metrics")]
                metrics::counter!("idemdb_errors_total", "op" => self.kind.name(), "class" => class)
                    .increment(1);
                #[cfg(not(any(feature = "tracing", feature = "metrics")))]
                let _ = class;
                self.end("error");
            }
        }
        r
    }
}

/// The outcome of a lease holder's call: `ok` if it applied, `"lease_lost"` if the lease was no
/// longer current.
pub(crate) fn lease_outcome<T>(
    ok: &'static str,
) -> impl FnOnce(&std::result::Result<T, crate::record::LeaseLost>) -> &'static str {
    move |r| if r.is_ok() { ok } else { "lease_lost" }
}

/// Publishes the store's gauges (feature `metrics`): set on every [`crate::Store::stats`] call and
/// after every pass of the background sweeper, so a store that runs its sweeper (the default, every
/// 60 s) keeps them current without anyone asking.
pub(crate) fn publish_gauges(s: &crate::telemetry::counters::Stats) {
    #[cfg(feature = "metrics")]
    {
        // Gauges are f64: u64 values past 2^53 lose their low bits, far beyond any store here.
        #[allow(clippy::cast_precision_loss)]
        let f = |v: u64| v as f64;
        let c = &s.counters;
        metrics::gauge!("idemdb_records_estimated").set(f(s.estimated_records));
        metrics::gauge!("idemdb_disk_bytes").set(f(s.live_sst_bytes));
        metrics::gauge!("idemdb_memtable_bytes").set(f(s.memtable_bytes));
        metrics::gauge!("idemdb_pending_in_memory").set(f(s.pending_in_memory));
        metrics::gauge!("idemdb_leases_outstanding").set(f(c.leases_outstanding()));
        metrics::gauge!("idemdb_sweep_lag_seconds").set(f(s.sweep_lag_ms) / 1000.0);
        // Counted by RocksDB's compaction filter, not by a call of ours: published here.
        metrics::counter!("idemdb_removed_total", "by" => "compaction")
            .absolute(c.compaction_dropped);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = s;
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::OpKind;

    /// Each operation's histogram key carries its own name as the `op` label.
    #[test]
    fn duration_keys_are_labelled_with_their_operation() {
        use OpKind::*;
        for k in [
            Claim, Begin, Complete, Fail, Renew, Checkpoint, Commit, Reserve, Sweep,
        ] {
            let key = k.duration_key();
            assert_eq!(key.name(), "idemdb_operation_duration_seconds");
            let labels: Vec<_> = key.labels().map(|l| (l.key(), l.value())).collect();
            assert_eq!(labels, [("op", k.name())]);
        }
    }
}
