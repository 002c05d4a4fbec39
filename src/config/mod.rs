//! Configuration, one builder per backend. Invariants:
//! - a setting exists only where a backend reads it: [`Config::new`] gives a `Config<OnDisk>` (the
//!   embedded store's settings: `embedded.rs`), [`Config::postgres`] a `Config<OnPostgres>` (the
//!   fleet's: `fleet.rs`), and the settings both backends read are on every `Config<B>` (here,
//!   in `Common`), so a setting a backend would ignore does not compile;
//! - every limit and default lives in these three files, is validated once (`validate`) before
//!   anything touches the disk or the network, and is documented on its setter.

mod embedded;
#[cfg(feature = "postgres")]
pub(crate) mod fleet;

use std::time::Duration;

pub use embedded::{Durability, OnDisk};
#[cfg(feature = "postgres")]
pub use fleet::OnPostgres;

use crate::error::{InvalidInput, Result};

/// How a store is opened: the settings both backends read, and those of its backend (`B`):
/// [`OnDisk`] for the embedded store ([`Config::new`], opened with [`Config::open`] or
/// `Config::open_async`), `OnPostgres` for a fleet's store in PostgreSQL (`Config::postgres`,
/// feature `postgres`, opened with `Config::open_async`). Build one, change what you need, open
/// it; a setting of the other backend does not exist on it.
///
/// The embedded store has no pool, and a store on PostgreSQL no durability setting (the
/// database commits every decision before answering): neither compiles.
///
/// ```compile_fail
/// let cfg = idemdb::Config::new("/var/lib/idem").pool_size(8);
/// ```
///
/// ```compile_fail
/// # #[cfg(feature = "postgres")]
/// let cfg = idemdb::Config::postgres("postgres://app@db/orders")
///     .durability(idemdb::Durability::Buffered);
/// # #[cfg(not(feature = "postgres"))]
/// # compile_error!("needs the postgres feature");
/// ```
#[derive(Clone)]
pub struct Config<B = OnDisk> {
    pub(crate) common: Common,
    pub(crate) backend: B,
}

/// The settings both backends read: record limits and defaults, the sweep, what spans show.
#[derive(Clone)]
pub(crate) struct Common {
    pub(crate) retention: Duration,
    pub(crate) lease: Duration,
    pub(crate) max_retention: Duration,
    pub(crate) max_lease: Duration,
    pub(crate) max_key_len: usize,
    pub(crate) max_tenant_len: usize,
    pub(crate) max_response_bytes: usize,
    pub(crate) max_offset_gaps: usize,
    pub(crate) sweep_interval: Option<Duration>,
    pub(crate) trace_tenants: TraceTenants,
    pub(crate) trace_keys: bool,
}

impl Default for Common {
    fn default() -> Self {
        Common {
            retention: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(30),
            max_retention: Duration::from_secs(400 * 24 * 3600),
            max_lease: Duration::from_secs(24 * 3600),
            max_key_len: 255,
            max_tenant_len: 64,
            max_response_bytes: 1 << 20,
            max_offset_gaps: 10_000,
            sweep_interval: Some(Duration::from_secs(60)),
            trace_tenants: TraceTenants::Hashed,
            trace_keys: false,
        }
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for Config<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.common;
        f.debug_struct("Config")
            .field("backend", &self.backend)
            .field("retention", &c.retention)
            .field("lease", &c.lease)
            .field("max_key_len", &c.max_key_len)
            .field("max_tenant_len", &c.max_tenant_len)
            .field("max_response_bytes", &c.max_response_bytes)
            .finish_non_exhaustive()
    }
}

/// The settings both backends read.
impl<B> Config<B> {
    /// How long a record is kept after it is claimed, unless a claim says otherwise. Default: 24 h.
    #[must_use]
    pub fn retention(mut self, d: Duration) -> Self {
        self.common.retention = d;
        self
    }

    /// How long a claim's lease lasts before another caller may take the key over. Default: 30 s.
    #[must_use]
    pub fn lease(mut self, d: Duration) -> Self {
        self.common.lease = d;
        self
    }

    /// The longest retention a claim may ask for. Default: 400 days.
    #[must_use]
    pub fn max_retention(mut self, d: Duration) -> Self {
        self.common.max_retention = d;
        self
    }

    /// The longest lease (or renewal) a caller may ask for. Default: 24 h.
    #[must_use]
    pub fn max_lease(mut self, d: Duration) -> Self {
        self.common.max_lease = d;
        self
    }

    /// Longest idempotency key, in bytes (1..=4096). Default: 255, as Stripe.
    #[must_use]
    pub fn max_key_len(mut self, n: usize) -> Self {
        self.common.max_key_len = n;
        self
    }

    /// Longest tenant, in bytes (1..=4096). Default: 64.
    #[must_use]
    pub fn max_tenant_len(mut self, n: usize) -> Self {
        self.common.max_tenant_len = n;
        self
    }

    /// Largest stored response, failure or checkpoint (body plus metadata, counted as stored:
    /// see [`crate::Response::size`]), entity value, and whole causal entity (every sibling) or
    /// merged replica vector, in bytes (1..=64 MiB). Default: 1 MiB.
    #[must_use]
    pub fn max_response_bytes(mut self, n: usize) -> Self {
        self.common.max_response_bytes = n;
        self
    }

    /// Most processed offsets an offset window keeps above its watermark (out of order), per
    /// partition (1..=1,000,000). A [`Store::mark_processed`](crate::Store::mark_processed) past it is refused with
    /// [`crate::InvalidInput::LimitReached`]: commit a watermark or process the missing offsets
    /// first. Each mark reads the window, so a large window costs every mark. Default: 10,000.
    #[must_use]
    pub fn max_offset_gaps(mut self, n: usize) -> Self {
        self.common.max_offset_gaps = n;
        self
    }

    /// How tenants appear in the `tracing` spans of store operations (feature `tracing`,
    /// docs/operating.md): tenants can be personal data (the HTTP layer's tenant is the caller's
    /// principal), so by default only a hash of each appears. Default:
    /// [`TraceTenants::Hashed`](crate::TraceTenants::Hashed).
    #[must_use]
    pub fn trace_tenants(mut self, how: TraceTenants) -> Self {
        self.common.trace_tenants = how;
        self
    }

    /// Whether the spans of store operations carry the key itself (lossy UTF-8) beside its hash.
    /// Keys can be personal or secret (a payment reference, an email), so they never appear
    /// unless asked for here; response bytes never appear at all. Default: `false`.
    #[must_use]
    pub fn trace_keys(mut self, yes: bool) -> Self {
        self.common.trace_keys = yes;
        self
    }

    /// How often a background thread sweeps expired records, or `None` for never (call
    /// [`Store::sweep`](crate::Store::sweep) yourself). Default: every 60 s. On PostgreSQL it is a task on the tokio
    /// runtime that opened the store, until the last handle of the store is dropped: no index
    /// orders the rows by expiry, so a sweep reads the whole request table once (a lap, spread
    /// over half the interval, shared by every instance: a fleet reads the table about once per
    /// interval), deleting the expired rows it passes. The interval is thus how often the table
    /// is read, and how long past its expiry a row may stay (it reads as absent meanwhile):
    /// docs/operating.md, "Table size and vacuum", says what a lap costs.
    #[must_use]
    pub fn sweep_interval(mut self, d: Option<Duration>) -> Self {
        self.common.sweep_interval = d;
        self
    }
}

impl Common {
    /// Refuses an empty or too long tenant or key.
    pub(crate) fn check_names(&self, tenant: &[u8], key: &[u8]) -> Result<()> {
        for (field, v, max) in [
            ("tenant", tenant, self.max_tenant_len),
            ("key", key, self.max_key_len),
        ] {
            if v.is_empty() {
                return Err(InvalidInput::Empty { field }.into());
            }
            if v.len() > max {
                return Err(InvalidInput::TooLong {
                    field,
                    len: v.len(),
                    max,
                }
                .into());
            }
        }
        Ok(())
    }

    /// Refuses a response, failure or checkpoint of `len` bytes over `max_response_bytes`.
    pub(crate) fn check_size(&self, what: &'static str, len: usize) -> Result<()> {
        let max = self.max_response_bytes;
        if len > max {
            return Err(InvalidInput::TooLarge { what, len, max }.into());
        }
        Ok(())
    }

    /// Refuses a value of `len` encoded bytes that would pass the store's value limit
    /// (`max_response_bytes`) with [`InvalidInput::LimitReached`].
    pub(crate) fn check_bounded(
        &self,
        what: &'static str,
        len: usize,
        hint: &'static str,
    ) -> Result<()> {
        let limit = self.max_response_bytes;
        if len > limit {
            return Err(InvalidInput::LimitReached { what, limit, hint }.into());
        }
        Ok(())
    }

    /// Refuses limits out of their ranges and defaults past their maxima.
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(InvalidInput::Config(m).into());
        if !(1..=4096).contains(&self.max_key_len) {
            return bad(format!(
                "max_key_len {} is not in 1..=4096",
                self.max_key_len
            ));
        }
        if !(1..=4096).contains(&self.max_tenant_len) {
            return bad(format!(
                "max_tenant_len {} is not in 1..=4096",
                self.max_tenant_len
            ));
        }
        if !(1..=64 << 20).contains(&self.max_response_bytes) {
            return bad(format!(
                "max_response_bytes {} is not in 1..=64 MiB",
                self.max_response_bytes
            ));
        }
        if !(1..=1_000_000).contains(&self.max_offset_gaps) {
            return bad(format!(
                "max_offset_gaps {} is not in 1..=1,000,000",
                self.max_offset_gaps
            ));
        }
        if self.max_lease.is_zero() || self.max_retention.is_zero() {
            return bad("max_lease and max_retention must be positive".into());
        }
        if self.max_retention > Duration::from_secs(100 * 365 * 24 * 3600) {
            return bad("max_retention over 100 years".into());
        }
        crate::record::check_duration("lease", self.lease, self.max_lease)?;
        crate::record::check_duration("retention", self.retention, self.max_retention)?;
        if self.lease > self.retention {
            return bad("the default lease is longer than the default retention".into());
        }
        Ok(())
    }
}
/// How tenants appear in the spans of store operations (see [`Config::trace_tenants`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TraceTenants {
    /// A hash of the tenant (16 hex digits of its SHA-256): spans of one tenant can be grouped
    /// without naming it. A hash of a guessable tenant can be reversed by trying candidates; use
    /// [`TraceTenants::Omitted`] where that matters.
    #[default]
    Hashed,
    /// The tenant itself (lossy UTF-8).
    Plain,
    /// No tenant field at all.
    Omitted,
}
