//! Configuration. Invariant: every limit and default lives here, is validated once in
//! [`Config::validate`] before anything touches the disk, and is documented on its setter.

#[cfg(feature = "postgres")]
pub(crate) mod fleet;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

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

/// How a store is opened. Build one with [`Config::new`], change what you need, then
/// [`Config::open`].
#[derive(Clone)]
pub struct Config {
    pub(crate) path: PathBuf,
    pub(crate) durability: Durability,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) retention: Duration,
    pub(crate) lease: Duration,
    pub(crate) max_retention: Duration,
    pub(crate) max_lease: Duration,
    pub(crate) max_key_len: usize,
    pub(crate) max_tenant_len: usize,
    pub(crate) max_response_bytes: usize,
    pub(crate) max_offset_gaps: usize,
    pub(crate) cache_bytes: usize,
    pub(crate) write_buffer_bytes: usize,
    pub(crate) lock_stripes: usize,
    pub(crate) pending_in_memory: usize,
    pub(crate) duplicate_wait: Duration,
    pub(crate) sweep_interval: Option<Duration>,
    pub(crate) read_only: bool,
    pub(crate) trace_tenants: TraceTenants,
    pub(crate) trace_keys: bool,
    /// Tests and fuzzing only: the in-memory environment holding the database (see
    /// [`Config::in_memory`]); `None` (on disk) for every normal store.
    pub(crate) in_memory: Option<InMemoryEnv>,
    /// Set by [`Config::postgres`]: the store lives in that database, not in `path`.
    #[cfg(feature = "postgres")]
    pub(crate) postgres: Option<fleet::Settings>,
    /// Tests only: a PostgreSQL store reads this configuration's clock instead of the
    /// database's (the conformance suite's manual clock).
    #[cfg(feature = "postgres")]
    pub(crate) postgres_test_clock: bool,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("path", &self.path)
            .field("durability", &self.durability)
            .field("retention", &self.retention)
            .field("lease", &self.lease)
            .field("max_key_len", &self.max_key_len)
            .field("max_tenant_len", &self.max_tenant_len)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// A configuration for the store in directory `path` (created if missing), with every default.
    pub fn new(path: impl AsRef<Path>) -> Self {
        Self {
            path: path.as_ref().to_path_buf(),
            durability: Durability::Synced,
            clock: Arc::new(SystemClock),
            retention: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(30),
            max_retention: Duration::from_secs(400 * 24 * 3600),
            max_lease: Duration::from_secs(24 * 3600),
            max_key_len: 255,
            max_tenant_len: 64,
            max_response_bytes: 1 << 20,
            max_offset_gaps: 10_000,
            cache_bytes: 64 << 20,
            write_buffer_bytes: 64 << 20,
            lock_stripes: 4096,
            pending_in_memory: 65_536,
            duplicate_wait: Duration::ZERO,
            sweep_interval: Some(Duration::from_secs(60)),
            read_only: false,
            trace_tenants: TraceTenants::Hashed,
            trace_keys: false,
            in_memory: None,
            #[cfg(feature = "postgres")]
            postgres: None,
            #[cfg(feature = "postgres")]
            postgres_test_clock: false,
        }
    }

    /// A configuration for a store in the PostgreSQL database at `url` (for example
    /// `postgres://app@db.internal:5432/orders`), shared by every instance of a fleet that opens
    /// the same database; with every default. Open it with [`Config::open_async`]. The
    /// record settings (lease, retention, their maxima, key, tenant and response limits) apply
    /// as on disk; the disk settings (durability, cache, write buffer, lock stripes, in-memory)
    /// do not (PostgreSQL commits every decision before answering); the clock is not used: every
    /// time comes from the database server's clock.
    ///
    /// The URL is libpq's, in either form (`postgres://user:pw@a:5432,b:5432/db?...` or
    /// `host=a,b dbname=db ...`), with libpq's options: several hosts with
    /// `target_session_attrs=read-write` (after a failover the pool reaches the new primary by
    /// itself), `sslmode` (`disable`, `prefer` (the default), `require`, `verify-ca`,
    /// `verify-full`) and `sslrootcert` (a CA file, or `system`), `options`, `application_name`,
    /// `connect_timeout`; and idemdb's own `statement_mode=unnamed` for a pooler in transaction
    /// mode ([`Config::statement_mode`]). docs/operating.md, "Running on managed PostgreSQL",
    /// says what holds across a failover and through poolers.
    #[cfg(feature = "postgres")]
    pub fn postgres(url: impl Into<String>) -> Self {
        let mut cfg = Self::new("");
        cfg.postgres = Some(fleet::Settings::new(url.into()));
        cfg
    }

    /// PostgreSQL only: the most connections the store's pool opens. Default: 16.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn pool_size(mut self, n: usize) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.pool_size = n;
        }
        self
    }

    /// PostgreSQL only: how long to wait for a connection (for a free one in the pool, or to
    /// connect to one host: TCP, TLS, authentication and the read-write check together; a
    /// multi-host URL tries the next host after it) before a call fails with
    /// [`crate::Error::Unavailable`]. Default: 5 s.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.connect_timeout = d;
        }
        self
    }

    /// PostgreSQL only: the longest a statement may run (the server's `statement_timeout`; the
    /// client gives up one second later) before the call fails with
    /// [`crate::Error::Unavailable`]. Default: 5 s.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn statement_timeout(mut self, d: Duration) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.statement_timeout = d;
        }
        self
    }

    /// PostgreSQL only: how connections are encrypted and what is verified (libpq's `sslmode`).
    /// Default: the URL's `sslmode`, else [`crate::TlsMode::Prefer`] (TLS when the server
    /// offers it, nothing verified, as libpq). A verifying mode needs [`Config::tls_roots`] or
    /// the URL's `sslrootcert`; a certificate that does not verify fails the open with
    /// [`crate::Error::ConnectionRejected`].
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn tls(mut self, mode: crate::TlsMode) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.tls_mode = Some(mode);
        }
        self
    }

    /// PostgreSQL only: the certificates that [`crate::TlsMode::VerifyCa`] and
    /// [`crate::TlsMode::VerifyFull`] (and `Require`, which then verifies the chain, as libpq
    /// does) trust: a PEM file (a managed service's CA bundle) or the system's roots. Default:
    /// the URL's `sslrootcert` (`system` for the system's roots), else none.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn tls_roots(mut self, roots: crate::TlsRoots) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.tls_roots = Some(roots);
        }
        self
    }

    /// PostgreSQL only: whether concurrent calls go to the database as one statement. Claims (of
    /// new keys, and replays) and lease ends (completions, terminal failures, releases) that
    /// arrive while [`Config::coalesce_in_flight`] statements of their kind are in flight (or
    /// that would wait for the pool) are sent together when one ends, as one statement over
    /// arrays: one transaction and one WAL flush for all of them, each call with its own row's
    /// answer (docs/design.md, "Coalesced statements"). A call that finds fewer statements in
    /// flight goes at once, alone: coalescing never waits for a batch to fill. Measured on a
    /// 2-core machine (docs/benchmarks.md, "Coalesced statements"): even with one statement per
    /// call up to 16 concurrent callers (up to 9 % slower behind the HTTP layer at 16
    /// connections), 2x and more at 64 callers over a pool of 24; so it is not yet the default.
    /// Default: off.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn coalescing(mut self, on: bool) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.coalescing = on;
        }
        self
    }

    /// PostgreSQL only: whether a claim that inserts a new key's pending row commits without
    /// waiting for its WAL flush (`synchronous_commit` off for that transaction alone). The
    /// completion's commit, which waits for its flush, makes the claim durable with it (both are
    /// in the one WAL, the claim first): one flushed commit per request instead of two, as the
    /// embedded store writes once per request (docs/design.md, "One WAL flush per request";
    /// measured in docs/benchmarks.md). Fencing tokens stay unique and increasing: a buffered
    /// claim takes one from a block the store drew with a flushed commit. What it gives up: if
    /// the database server crashes (or fails over) within moments of a claim, before anything
    /// flushed it, the pending row is lost while its holder may still be running; the holder's
    /// completion is then refused (`LeaseLost::Gone`), and a retry acquires the key and runs the
    /// operation again. Leave it off where an operation must never run twice even then; claims
    /// with [`crate::ClaimOptions::durable_pending`] and consumer messages always wait for
    /// their flush. Default: off.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn buffered_claims(mut self, on: bool) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.buffered_claims = on;
        }
        self
    }

    /// PostgreSQL only: where the store's one listening connection connects, the one through
    /// which claims that wait for a lease to end ([`crate::ClaimOptions::wait`]) are woken by
    /// `LISTEN/NOTIFY` from any instance. It is opened at the first wait and kept while the store
    /// lives. A pooler in transaction mode (PgBouncer, Supavisor's port 6543, RDS Proxy) cannot
    /// carry `LISTEN`: give a URL that reaches the server directly or through a session-mode
    /// pooler. Without notifications a waiting claim still ends, at the lease's end or at its
    /// bound. Default: the store's URL.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.listen_url = Some(url.into());
        }
        self
    }

    /// PostgreSQL only: the most calls one coalesced statement carries, and about the most
    /// bytes of their values (keys, fingerprints, responses; a call larger than `bytes` goes
    /// alone). Default: 128 calls, 1 MiB.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn coalesce_limits(mut self, calls: usize, bytes: usize) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.coalesce_limits.rows = calls;
            p.coalesce_limits.bytes = bytes;
        }
        self
    }

    /// PostgreSQL only, with [`Config::coalescing`]: how many statements of one kind (claims,
    /// lease ends) may be in flight before further calls of that kind queue for the next
    /// coalesced statement. A call goes at once, alone, while fewer are in flight and the pool
    /// has a connection for it; at the limit it joins the queue, which goes as one statement
    /// when a statement of its kind ends. Default: 4.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn coalesce_in_flight(mut self, statements: usize) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.coalesce_limits.in_flight = statements;
        }
        self
    }

    /// PostgreSQL only: named prepared statements ([`crate::StatementMode::Prepared`]), or none
    /// ([`crate::StatementMode::Unnamed`]: for PgBouncer in transaction mode before 1.21 or
    /// without `max_prepared_statements`, Supavisor in transaction mode, RDS Proxy without
    /// pinning). Default: the URL's `statement_mode`, else `Prepared`.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn statement_mode(mut self, mode: crate::StatementMode) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.statement_mode = Some(mode);
        }
        self
    }

    /// PostgreSQL only: the `synchronous_commit` of the store's sessions, so that completions
    /// (and every other write) wait for synchronous standbys as the application asks
    /// ([`crate::SynchronousCommit::RemoteApply`]: applied on them before the call returns).
    /// Default: none set (the server's, or the role's, setting; PostgreSQL's own default is
    /// `on`). Sent as a startup option: through a pooler that drops startup options, set it on
    /// the role instead (`ALTER ROLE ... SET synchronous_commit = ...`).
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn synchronous_commit(mut self, level: crate::SynchronousCommit) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.synchronous_commit = Some(level);
        }
        self
    }

    /// PostgreSQL only: how long opening waits for the schema's migration lock while another
    /// instance applies a migration, before it fails with [`crate::Error::MigrationTimeout`].
    /// The lock belongs to the schema (stores in other schemas never wait for it), and a store
    /// whose schema is already current takes no lock at all. Default: 60 s.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn migration_lock_timeout(mut self, d: Duration) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.migration_lock_timeout = d;
        }
        self
    }

    /// PostgreSQL only: whether opening applies the schema migrations this build needs (in a
    /// transaction under an advisory lock, so instances opening together apply each once).
    /// Default: `true`. With `false`, opening checks the schema version and fails with
    /// [`crate::Error::SchemaMismatch`] unless `idemdb migrate --postgres URL` ran.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn migrate_on_open(mut self, yes: bool) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.migrate = yes;
        }
        self
    }

    /// PostgreSQL only: keep finished records (completed or terminally failed) in this
    /// instance's memory, up to `max_bytes` (keys, fingerprints, responses), so that a retry
    /// landing on this instance is answered without a database round trip. Pending records are
    /// never kept; an entry is never served at or past its record's expiry (by the database's
    /// clock, estimated from the answer that filled it), nor longer than
    /// [`Config::replay_tier_max_age`] after it was filled: a record forgotten through another
    /// instance may still be replayed here for that long (one forgotten through this store, not
    /// at all). The oldest entries leave first when the budget is full. Default: 0 (no tier).
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn replay_tier(mut self, max_bytes: usize) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.tier_bytes = max_bytes;
        }
        self
    }

    /// PostgreSQL only: the longest an entry of the replay tier ([`Config::replay_tier`]) is
    /// served after it was filled, which bounds how long a record forgotten through another
    /// instance can still be replayed by this one. Default: 60 s.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn replay_tier_max_age(mut self, d: Duration) -> Self {
        if let Some(p) = self.postgres.as_mut() {
            p.tier_max_age = d;
        }
        self
    }

    /// Tests only, not part of the stable API: a PostgreSQL store reads this configuration's
    /// clock instead of the database's, so a manual clock can drive it.
    #[cfg(all(feature = "postgres", feature = "__internal"))]
    #[doc(hidden)]
    #[must_use]
    pub fn postgres_test_clock(mut self) -> Self {
        self.postgres_test_clock = true;
        self
    }

    /// Durability of acknowledged writes. Default: [`Durability::Synced`], because a payment that
    /// was acknowledged as done and then charged again after a power cut is the failure this
    /// library exists to prevent; choose [`Durability::Buffered`] where a process crash is the only
    /// failure you must survive.
    #[must_use]
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }

    /// The clock used for leases and expiry. Default: [`SystemClock`]. Tests use
    /// [`crate::ManualClock`].
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// How long a record is kept after it is claimed, unless a claim says otherwise. Default: 24 h.
    #[must_use]
    pub fn retention(mut self, d: Duration) -> Self {
        self.retention = d;
        self
    }

    /// How long a claim's lease lasts before another caller may take the key over. Default: 30 s.
    #[must_use]
    pub fn lease(mut self, d: Duration) -> Self {
        self.lease = d;
        self
    }

    /// The longest retention a claim may ask for. Default: 400 days.
    #[must_use]
    pub fn max_retention(mut self, d: Duration) -> Self {
        self.max_retention = d;
        self
    }

    /// The longest lease (or renewal) a caller may ask for. Default: 24 h.
    #[must_use]
    pub fn max_lease(mut self, d: Duration) -> Self {
        self.max_lease = d;
        self
    }

    /// Longest idempotency key, in bytes (1..=4096). Default: 255, as Stripe.
    #[must_use]
    pub fn max_key_len(mut self, n: usize) -> Self {
        self.max_key_len = n;
        self
    }

    /// Longest tenant, in bytes (1..=4096). Default: 64.
    #[must_use]
    pub fn max_tenant_len(mut self, n: usize) -> Self {
        self.max_tenant_len = n;
        self
    }

    /// Largest stored response, failure or checkpoint (body plus metadata, counted as stored:
    /// see [`crate::Response::size`]), entity value, and whole causal entity (every sibling) or
    /// merged replica vector, in bytes (1..=64 MiB). Default: 1 MiB.
    #[must_use]
    pub fn max_response_bytes(mut self, n: usize) -> Self {
        self.max_response_bytes = n;
        self
    }

    /// Most processed offsets an offset window keeps above its watermark (out of order), per
    /// partition (1..=1,000,000). A [`Store::mark_processed`](crate::Store::mark_processed) past it is refused with
    /// [`crate::InvalidInput::LimitReached`]: commit a watermark or process the missing offsets
    /// first. Each mark reads the window, so a large window costs every mark. Default: 10,000.
    #[must_use]
    pub fn max_offset_gaps(mut self, n: usize) -> Self {
        self.max_offset_gaps = n;
        self
    }

    /// Size of the block cache shared by every column family. Default: 64 MiB.
    #[must_use]
    pub fn cache_bytes(mut self, n: usize) -> Self {
        self.cache_bytes = n;
        self
    }

    /// Size of one memtable of the `records` and `versions` column families (the `expiry` index
    /// gets a quarter of it; `meta` and `default` 4 MiB each), at least 1 MiB. Default: 64 MiB.
    #[must_use]
    pub fn write_buffer_bytes(mut self, n: usize) -> Self {
        self.write_buffer_bytes = n;
        self
    }

    /// Number of lock stripes that serialise decisions per key (a power of two, 1..=1<<20).
    /// Default: 4096.
    #[must_use]
    pub fn lock_stripes(mut self, n: usize) -> Self {
        self.lock_stripes = n;
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
        self.read_only = yes;
        self
    }

    /// How tenants appear in the `tracing` spans of store operations (feature `tracing`,
    /// docs/operating.md): tenants can be personal data (the HTTP layer's tenant is the caller's
    /// principal), so by default only a hash of each appears. Default:
    /// [`TraceTenants::Hashed`](crate::TraceTenants::Hashed).
    #[must_use]
    pub fn trace_tenants(mut self, how: TraceTenants) -> Self {
        self.trace_tenants = how;
        self
    }

    /// Whether the spans of store operations carry the key itself (lossy UTF-8) beside its hash.
    /// Keys can be personal or secret (a payment reference, an email), so they never appear
    /// unless asked for here; response bytes never appear at all. Default: `false`.
    #[must_use]
    pub fn trace_keys(mut self, yes: bool) -> Self {
        self.trace_keys = yes;
        self
    }

    /// How many pending records the embedded store may keep in memory only (docs/design.md,
    /// "In-memory pending records"). A claim that acquires writes nothing to disk while there is
    /// room: its pending record lives in this process until the holder completes, fails or
    /// checkpoints it (one durable write per request), and a crash loses it, which only makes
    /// the key claimable at once after the restart (the operation never completed). Past the cap
    /// a claim writes its pending record durably, as `ClaimOptions::durable_pending` asks, and
    /// never refuses. `0`: every pending record is durable. Consumer messages are always
    /// durable. The PostgreSQL backend keeps every record in the database and ignores this.
    /// The cap is checked without a lock shared by all keys, so claims running at the same moment
    /// may pass it by one each; `Stats::pending_in_memory` counts them. Default: 65,536 (a few MiB).
    #[must_use]
    pub fn pending_in_memory(mut self, n: usize) -> Self {
        self.pending_in_memory = n;
        self
    }

    /// How long [`Store::execute`](crate::Store::execute) waits for a duplicate running in this process to finish before
    /// answering "in progress". Default: zero (answer at once).
    #[must_use]
    pub fn duplicate_wait(mut self, d: Duration) -> Self {
        self.duplicate_wait = d;
        self
    }

    /// How often a background thread sweeps expired records, or `None` for never (call
    /// [`Store::sweep`](crate::Store::sweep) yourself). Default: every 60 s. On PostgreSQL it is a task on the tokio
    /// runtime that opened the store, deleting batches of 1,000 expired rows until fewer are
    /// left, until the last handle of the store is dropped.
    #[must_use]
    pub fn sweep_interval(mut self, d: Option<Duration>) -> Self {
        self.sweep_interval = d;
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
        self.in_memory = Some(InMemoryEnv(std::sync::Arc::new(env.0.clone())));
        self
    }

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

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(InvalidInput::Config(m).into());
        #[cfg(feature = "postgres")]
        if let Some(p) = &self.postgres {
            if !(1..=1024).contains(&p.pool_size) {
                return bad(format!("pool_size {} is not in 1..=1024", p.pool_size));
            }
            let l = p.coalesce_limits;
            if !(1..=1024).contains(&l.in_flight) {
                return bad(format!(
                    "coalesce_in_flight {} is not in 1..=1024",
                    l.in_flight
                ));
            }
            if !(1..=10_000).contains(&l.rows) || !(1..=64 << 20).contains(&l.bytes) {
                return bad(format!(
                    "coalesce_limits ({} calls, {} bytes) must be 1..=10000 calls and \
                     1..=64 MiB",
                    l.rows, l.bytes
                ));
            }
            if p.connect_timeout.is_zero()
                || p.statement_timeout.is_zero()
                || p.migration_lock_timeout.is_zero()
            {
                return bad(
                    "connect_timeout, statement_timeout and migration_lock_timeout must be \
                     positive"
                        .into(),
                );
            }
        }
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
        if !self.lock_stripes.is_power_of_two() || self.lock_stripes > 1 << 20 {
            return bad(format!(
                "lock_stripes {} is not a power of two up to 1<<20",
                self.lock_stripes
            ));
        }
        if self.max_lease.is_zero() || self.max_retention.is_zero() {
            return bad("max_lease and max_retention must be positive".into());
        }
        if self.max_retention > Duration::from_secs(100 * 365 * 24 * 3600) {
            return bad("max_retention over 100 years".into());
        }
        if self.write_buffer_bytes < 1 << 20 {
            return bad("write_buffer_bytes under 1 MiB".into());
        }
        crate::record::check_duration("lease", self.lease, self.max_lease)?;
        crate::record::check_duration("retention", self.retention, self.max_retention)?;
        if self.lease > self.retention {
            return bad("the default lease is longer than the default retention".into());
        }
        Ok(())
    }
}

/// The in-memory environment of [`Config::in_memory`], opaque to the shared floor: the embedded
/// backend keeps its engine's environment inside and takes it back out when the store opens.
#[derive(Clone)]
pub(crate) struct InMemoryEnv(pub(crate) Arc<dyn std::any::Any + Send + Sync>);

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
