//! The settings of a store on PostgreSQL (`Config<OnPostgres>`), as data: what
//! [`Config::postgres`] and its setters record. Invariant: nothing here connects or parses a
//! URL; the PostgreSQL backend (`src/postgres/settings.rs`) reads the URL and these settings when
//! the store opens, and a setter's choice wins over the URL's.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{Common, Config};
use crate::clock::Clock;
use crate::error::{InvalidInput, Result};

/// The settings of a fleet's store in PostgreSQL, the `B` of a [`Config`] made by
/// [`Config::postgres`]; its setters are the methods of `Config<OnPostgres>`.
#[derive(Clone)]
pub struct OnPostgres {
    pub(crate) settings: Settings,
    /// Tests only: the clock a store reads instead of the database's
    /// (`Config::postgres_test_clock`).
    pub(crate) test_clock: Option<Arc<dyn Clock>>,
}

impl std::fmt::Debug for OnPostgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: not shown.
        let s = &self.settings;
        f.debug_struct("OnPostgres")
            .field("pool_size", &s.pool_size)
            .field("buffered_claims", &s.buffered_claims)
            .field("coalescing", &s.coalescing)
            .finish_non_exhaustive()
    }
}

impl Config<OnPostgres> {
    /// A configuration for a store in the PostgreSQL database at `url` (for example
    /// `postgres://app@db.internal:5432/orders`), shared by every instance of a fleet that opens
    /// the same database; with every default. Open it with `Config::open_async`. The shared
    /// settings (lease, retention, their maxima, key, tenant and response limits, the sweep, the
    /// spans) apply as on disk; the embedded store's own settings (durability, cache, write
    /// buffer, lock stripes, the clock) do not exist here: PostgreSQL commits every decision
    /// before answering, and every time comes from the database server's clock.
    ///
    /// The URL is libpq's, in either form (`postgres://user:pw@a:5432,b:5432/db?...` or
    /// `host=a,b dbname=db ...`), with libpq's options: several hosts with
    /// `target_session_attrs=read-write` (after a failover the pool reaches the new primary by
    /// itself), `sslmode` (`disable`, `prefer` (the default), `require`, `verify-ca`,
    /// `verify-full`) and `sslrootcert` (a CA file, or `system`), `options`, `application_name`,
    /// `connect_timeout`; and idemdb's own `statement_mode=unnamed` for a pooler in transaction
    /// mode ([`Config::statement_mode`]). docs/operating.md, "Running on managed PostgreSQL",
    /// says what holds across a failover and through poolers.
    pub fn postgres(url: impl Into<String>) -> Self {
        Config {
            common: Common::default(),
            backend: OnPostgres {
                settings: Settings::new(url.into()),
                test_clock: None,
            },
        }
    }

    /// The most connections the store's pool opens. Default: 16.
    #[must_use]
    pub fn pool_size(mut self, n: usize) -> Self {
        self.backend.settings.pool_size = n;
        self
    }

    /// How long to wait for a connection (for a free one in the pool, or to
    /// connect to one host: TCP, TLS, authentication and the read-write check together; a
    /// multi-host URL tries the next host after it) before a call fails with
    /// [`crate::Error::Unavailable`]. Default: 5 s.
    #[must_use]
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.backend.settings.connect_timeout = d;
        self
    }

    /// The longest a statement may run (the server's `statement_timeout`; the
    /// client gives up one second later) before the call fails with
    /// [`crate::Error::Unavailable`]. Default: 5 s.
    #[must_use]
    pub fn statement_timeout(mut self, d: Duration) -> Self {
        self.backend.settings.statement_timeout = d;
        self
    }

    /// How connections are encrypted and what is verified (libpq's `sslmode`).
    /// Default: the URL's `sslmode`, else [`crate::TlsMode::Prefer`] (TLS when the server
    /// offers it, nothing verified, as libpq). A verifying mode needs [`Config::tls_roots`] or
    /// the URL's `sslrootcert`; a certificate that does not verify fails the open with
    /// [`crate::Error::ConnectionRejected`].
    #[must_use]
    pub fn tls(mut self, mode: crate::TlsMode) -> Self {
        self.backend.settings.tls_mode = Some(mode);
        self
    }

    /// The certificates that [`crate::TlsMode::VerifyCa`] and
    /// [`crate::TlsMode::VerifyFull`] (and `Require`, which then verifies the chain, as libpq
    /// does) trust: a PEM file (a managed service's CA bundle) or the system's roots. Default:
    /// the URL's `sslrootcert` (`system` for the system's roots), else none.
    #[must_use]
    pub fn tls_roots(mut self, roots: crate::TlsRoots) -> Self {
        self.backend.settings.tls_roots = Some(roots);
        self
    }

    /// Whether concurrent calls go to the database as one statement when the
    /// pool has no connection for them. Claims (of new keys, and replays) and lease ends
    /// (completions, terminal failures, releases) that would wait for the pool are queued
    /// instead and sent together when a statement of their kind ends, as one statement over
    /// arrays: one transaction and one WAL flush for all of them, each call with its own row's
    /// answer (docs/design.md, "Coalesced statements"). A call for which the pool has a
    /// connection goes at once, alone, as without coalescing: coalescing never waits for a batch
    /// to fill, and never sends fewer statements than the pool could run at once (a multi-core
    /// server runs them in parallel; measured in docs/benchmarks.md, "Coalescing only when the
    /// pool is exhausted"). Turn it on when an instance runs more concurrent calls than its pool
    /// has connections. Default: off.
    #[must_use]
    pub fn coalescing(mut self, on: bool) -> Self {
        self.backend.settings.coalescing = on;
        self
    }

    /// Whether a claim that inserts a new key's pending row commits without
    /// waiting for its WAL flush (`synchronous_commit` off for that transaction alone). On (the
    /// default): the completion's commit, which waits for its flush (and for synchronous
    /// standbys), makes the claim durable with it (both are in the one WAL, the claim first):
    /// one flushed commit per request instead of two, as the embedded store writes once per
    /// request (docs/design.md, "One WAL flush per request"; measured in docs/benchmarks.md).
    /// Fencing tokens stay unique and increasing: a buffered claim takes one from a block the
    /// store drew with a flushed commit.
    ///
    /// What each mode guarantees when the database server crashes or fails over
    /// (docs/operating.md, "What replication guarantees"):
    /// - on (buffered): a claim answered in the moments before the crash that no later commit
    ///   had flushed yet (under load, the next flushed commit of any session; otherwise the WAL
    ///   writer within `3 x wal_writer_delay`) is lost while its holder may still be running.
    ///   The holder's completion is then refused (`LeaseLost::Gone`; `TakenOver` or
    ///   `Finished` once a retry claimed the key), and a retry acquires the key afresh and runs
    ///   the operation again. Every acknowledged completion is kept (under synchronous replication, across a
    ///   failover too);
    /// - off (flushed): a claim is flushed (and replicated to synchronous standbys) before it
    ///   answers, so across a crash or a synchronous failover a retry waits for the holder and
    ///   the holder's completion, asked again, succeeds: an operation runs at most once. Each
    ///   request costs two flushed commits.
    ///
    /// Turn it off where an operation must never run twice even after a database crash (a
    /// downstream that is neither idempotent nor reconciled). Claims with
    /// [`crate::ClaimOptions::durable_pending`] and consumer messages wait for their flush in
    /// either mode.
    #[must_use]
    pub fn buffered_claims(mut self, on: bool) -> Self {
        self.backend.settings.buffered_claims = on;
        self
    }

    /// How fast the background sweeper reads the request table, in pages (8 KiB each at
    /// PostgreSQL's default block size) a second. No index orders the rows by expiry, so a sweep
    /// reads the whole table once (a lap); the sweeper spreads its lap over half of
    /// [`Config::sweep_interval`], but never reads faster than this, so a large table's lap takes
    /// longer than the interval and its expired rows stay longer (they read as absent meanwhile).
    /// One instance walks a lap at a time (another takes over a lap whose cursor stopped moving),
    /// so this bounds the fleet's reading, not each instance's. Default: 1,000 pages a second
    /// (8 MiB/s): measured, a lap over 11.2 million rows (4.8 GB, 619,000 pages) costs the server
    /// about 6 s of CPU, so at this rate about 1 % of a core, and the lap takes about 10 minutes
    /// (docs/operating.md, "Table size and vacuum"). Refused outside `1..=1_000_000`.
    #[must_use]
    pub fn sweep_pages_per_second(mut self, pages: u32) -> Self {
        self.backend.settings.sweep_pages_per_second = pages;
        self
    }

    /// Where the store's one listening connection connects, the one through
    /// which claims that wait for a lease to end ([`crate::ClaimOptions::wait`]) are woken by
    /// `LISTEN/NOTIFY` from any instance. It is opened at the first wait and kept while the store
    /// lives. A pooler in transaction mode (PgBouncer, Supavisor's port 6543, RDS Proxy) cannot
    /// carry `LISTEN`: give a URL that reaches the server directly or through a session-mode
    /// pooler. Without notifications a waiting claim still ends, at the lease's end or at its
    /// bound. Default: the store's URL.
    #[must_use]
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.backend.settings.listen_url = Some(url.into());
        self
    }

    /// The most calls one coalesced statement carries, and about the most
    /// bytes of their values (keys, fingerprints, responses; a call larger than `bytes` goes
    /// alone). Default: 128 calls, 1 MiB.
    #[must_use]
    pub fn coalesce_limits(mut self, calls: usize, bytes: usize) -> Self {
        let p = &mut self.backend.settings;
        p.coalesce_limits.rows = calls;
        p.coalesce_limits.bytes = bytes;
        self
    }

    /// With [`Config::coalescing`]: how many coalesced statements of one kind
    /// (claims, lease ends) may be in flight at once, each sending the calls queued while the
    /// pool had no connection for them. Default: 4.
    #[must_use]
    pub fn coalesce_in_flight(mut self, statements: usize) -> Self {
        self.backend.settings.coalesce_limits.in_flight = statements;
        self
    }

    /// Named prepared statements ([`crate::StatementMode::Prepared`]), or none
    /// ([`crate::StatementMode::Unnamed`]: for PgBouncer in transaction mode before 1.21 or
    /// without `max_prepared_statements`, Supavisor in transaction mode, RDS Proxy without
    /// pinning). Default: the URL's `statement_mode`, else `Prepared`.
    #[must_use]
    pub fn statement_mode(mut self, mode: crate::StatementMode) -> Self {
        self.backend.settings.statement_mode = Some(mode);
        self
    }

    /// The `synchronous_commit` of the store's sessions, so that completions
    /// (and every other write) wait for synchronous standbys as the application asks
    /// ([`crate::SynchronousCommit::RemoteApply`]: applied on them before the call returns).
    /// Default: none set (the server's, or the role's, setting; PostgreSQL's own default is
    /// `on`). Sent as a startup option: through a pooler that drops startup options, set it on
    /// the role instead (`ALTER ROLE ... SET synchronous_commit = ...`).
    #[must_use]
    pub fn synchronous_commit(mut self, level: crate::SynchronousCommit) -> Self {
        self.backend.settings.synchronous_commit = Some(level);
        self
    }

    /// How long opening waits for the schema's migration lock while another
    /// instance applies a migration, before it fails with [`crate::Error::MigrationTimeout`].
    /// The lock belongs to the schema (stores in other schemas never wait for it), and a store
    /// whose schema is already current takes no lock at all. Default: 60 s.
    #[must_use]
    pub fn migration_lock_timeout(mut self, d: Duration) -> Self {
        self.backend.settings.migration_lock_timeout = d;
        self
    }

    /// Whether opening applies the schema migrations this build needs (in a
    /// transaction under an advisory lock, so instances opening together apply each once).
    /// Default: `true`. With `false`, opening checks the schema version and fails with
    /// [`crate::Error::SchemaMismatch`] unless `idemdb migrate --postgres URL` ran.
    #[must_use]
    pub fn migrate_on_open(mut self, yes: bool) -> Self {
        self.backend.settings.migrate = yes;
        self
    }

    /// Keep finished records (completed or terminally failed) in this
    /// instance's memory, up to `max_bytes` (keys, fingerprints, responses), so that a retry
    /// landing on this instance is answered without a database round trip. Pending records are
    /// never kept; an entry is never served at or past its record's expiry (by the database's
    /// clock, estimated from the answer that filled it), nor longer than
    /// [`Config::replay_tier_max_age`] after it was filled: a record forgotten through another
    /// instance may still be replayed here for that long (one forgotten through this store, not
    /// at all). The oldest entries leave first when the budget is full. Default: 0 (no tier).
    #[must_use]
    pub fn replay_tier(mut self, max_bytes: usize) -> Self {
        self.backend.settings.tier_bytes = max_bytes;
        self
    }

    /// The longest an entry of the replay tier ([`Config::replay_tier`]) is
    /// served after it was filled, which bounds how long a record forgotten through another
    /// instance can still be replayed by this one. Default: 60 s.
    #[must_use]
    pub fn replay_tier_max_age(mut self, d: Duration) -> Self {
        self.backend.settings.tier_max_age = d;
        self
    }

    /// Tests only, not part of the stable API: the store reads `clock` instead of the
    /// database's clock, so a manual clock can drive it.
    #[cfg(feature = "__internal")]
    #[doc(hidden)]
    #[must_use]
    pub fn postgres_test_clock(mut self, clock: impl Clock) -> Self {
        self.backend.test_clock = Some(Arc::new(clock));
        self
    }

    /// Refuses settings out of their ranges, the shared ones first.
    pub(crate) fn validate(&self) -> Result<()> {
        self.common.validate()?;
        let bad = |m: String| Err(InvalidInput::Config(m).into());
        let p = &self.backend.settings;
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
        if !(1..=1_000_000).contains(&p.sweep_pages_per_second) {
            return bad(format!(
                "sweep_pages_per_second {} is not in 1..=1000000",
                p.sweep_pages_per_second
            ));
        }
        if p.connect_timeout.is_zero()
            || p.statement_timeout.is_zero()
            || p.migration_lock_timeout.is_zero()
        {
            return bad(
                "connect_timeout, statement_timeout and migration_lock_timeout must be positive"
                    .into(),
            );
        }
        Ok(())
    }
}

/// How a PostgreSQL store sends its statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StatementMode {
    /// Named prepared statements, prepared once per connection and cached (the fastest; needs a
    /// direct connection, a session-mode pooler, or PgBouncer 1.21+ with
    /// `max_prepared_statements`).
    #[default]
    Prepared,
    /// No named prepared statements: every statement is sent unnamed with its parameter types
    /// (one round trip, as a prepared one), so that idemdb runs through a pooler in transaction
    /// mode (PgBouncer before 1.21, or without `max_prepared_statements`; Supavisor's port 6543;
    /// RDS Proxy without pinning). URL: `statement_mode=unnamed`.
    Unnamed,
}

/// How long a PostgreSQL store's commits wait for standbys (the server's `synchronous_commit`,
/// set for the store's sessions). See docs/operating.md, "Running on managed PostgreSQL", for
/// what each guarantees across a failover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SynchronousCommit {
    /// `on`: the commit is flushed locally and, with synchronous standbys configured
    /// (`synchronous_standby_names`), on them.
    On,
    /// `remote_apply`: as `On`, and applied on the synchronous standbys (visible there to
    /// readers) before the store answers.
    RemoteApply,
    /// `remote_write`: written, not yet flushed, by the synchronous standbys.
    RemoteWrite,
    /// `local`: flushed locally only, never waiting for a standby.
    Local,
}

impl SynchronousCommit {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SynchronousCommit::On => "on",
            SynchronousCommit::RemoteApply => "remote_apply",
            SynchronousCommit::RemoteWrite => "remote_write",
            SynchronousCommit::Local => "local",
        }
    }
}

/// Connection settings of a store on PostgreSQL (see [`Config::postgres`]).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) url: String,
    pub(crate) pool_size: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) statement_timeout: Duration,
    pub(crate) migrate: bool,
    /// How long opening waits for another instance's schema migration.
    pub(crate) migration_lock_timeout: Duration,
    /// The local replay tier's byte budget (0: none) and the longest an entry is served.
    pub(crate) tier_bytes: usize,
    pub(crate) tier_max_age: Duration,
    /// Setters' choices, over the URL's.
    pub(crate) tls_mode: Option<TlsMode>,
    pub(crate) tls_roots: Option<TlsRoots>,
    pub(crate) statement_mode: Option<StatementMode>,
    pub(crate) synchronous_commit: Option<SynchronousCommit>,
    /// A new key's claim commits without waiting for its WAL flush (`Config::buffered_claims`).
    pub(crate) buffered_claims: bool,
    /// Concurrent claims and lease ends coalesced into one statement, and the caps on one.
    pub(crate) coalescing: bool,
    pub(crate) coalesce_limits: CoalesceLimits,
    /// Where waiting claims' listening connection connects (`None`: `url`).
    pub(crate) listen_url: Option<String>,
    /// The background sweeper's reading rate (`Config::sweep_pages_per_second`).
    pub(crate) sweep_pages_per_second: u32,
}

/// The caps on coalescing: calls and bytes of their values per statement, and statements of one
/// kind in flight at once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CoalesceLimits {
    pub(crate) rows: usize,
    pub(crate) bytes: usize,
    pub(crate) in_flight: usize,
}

impl Settings {
    pub(crate) fn new(url: String) -> Self {
        Settings {
            url,
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
            migrate: true,
            migration_lock_timeout: Duration::from_secs(60),
            tier_bytes: 0,
            tier_max_age: Duration::from_secs(60),
            tls_mode: None,
            tls_roots: None,
            statement_mode: None,
            synchronous_commit: None,
            // On: one flushed commit per request, as the embedded store (docs/design.md, "One
            // WAL flush per request"); off is the setting for operations that must never run
            // twice, even after a database crash.
            buffered_claims: true,
            // Off: it helps only an instance with more concurrent calls than connections.
            coalescing: false,
            coalesce_limits: CoalesceLimits {
                rows: 128,
                bytes: 1 << 20,
                // Coalesced statements of a kind in flight at once.
                in_flight: 4,
            },
            listen_url: None,
            sweep_pages_per_second: 1_000,
        }
    }
}

/// How a PostgreSQL store encrypts its connections and what it verifies (libpq's `sslmode`).
/// Set it in the URL (`?sslmode=verify-full&sslrootcert=/etc/ssl/rds-ca.pem`) or with
/// [`crate::Config::tls`]; the setter wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsMode {
    /// Plain TCP, never TLS.
    Disable,
    /// TLS when the server offers it, plain otherwise; nothing verified (libpq's default).
    Prefer,
    /// TLS or no connection; the chain verified only when roots are given.
    Require,
    /// TLS, the server's certificate chain verified against the roots.
    VerifyCa,
    /// TLS, the chain verified and the certificate naming the host connected to.
    VerifyFull,
}

impl TlsMode {
    /// The mode as libpq spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }

    pub(crate) fn parse(s: &str) -> Result<TlsMode> {
        Ok(match s {
            "disable" => TlsMode::Disable,
            // libpq's `allow` tries plain first; TLS when offered is the safer reading of it.
            "allow" | "prefer" => TlsMode::Prefer,
            "require" => TlsMode::Require,
            "verify-ca" => TlsMode::VerifyCa,
            "verify-full" => TlsMode::VerifyFull,
            other => {
                return Err(InvalidInput::Config(format!(
                    "sslmode={other:?} is not one of disable, allow, prefer, require, verify-ca, \
                     verify-full"
                ))
                .into())
            }
        })
    }
}

/// The certificates a verifying [`TlsMode`] trusts (libpq's `sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsRoots {
    /// The PEM certificates in this file (a CA bundle, as managed services publish them).
    File(PathBuf),
    /// The operating system's trusted roots (`sslrootcert=system`). As in libpq, they make
    /// [`TlsMode::VerifyFull`] the mode when none is set, and a weaker mode with them is refused
    /// at open ([`crate::InvalidInput::Config`]).
    System,
}
