//! The settings of a store on PostgreSQL, as data: what [`Config::postgres`](crate::Config::postgres)
//! and its setters record. Invariant: nothing here connects or parses a URL; the PostgreSQL
//! backend (`src/postgres/settings.rs`) reads the URL and these settings when the store opens,
//! and a setter's choice wins over the URL's.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{InvalidInput, Result};

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

/// Connection settings of a store on PostgreSQL (see [`crate::Config::postgres`]).
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
            // Off: a claim lost in a server crash or a failover while its holder lives lets a
            // retry run the operation again (docs/design.md, "One WAL flush per request").
            buffered_claims: false,
            // Off until it is never slower (docs/benchmarks.md, "Coalesced statements").
            coalescing: false,
            coalesce_limits: CoalesceLimits {
                rows: 128,
                bytes: 1 << 20,
                // Statements of a kind in flight before calls queue (measured against 2 and the
                // whole pool: docs/benchmarks.md, "Coalesced statements, second part").
                in_flight: 4,
            },
            listen_url: None,
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
