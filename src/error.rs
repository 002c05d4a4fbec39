//! Errors. Invariant: an expected outcome of the product (a replay, a key in progress, a mismatch,
//! a lost lease) is never an error; errors are bad input, damaged data or a failing disk, and
//! RocksDB's errors are classified once, in the engine, into the variants below.

use std::fmt;
use std::sync::Arc;

/// The result type of every fallible idemdb call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in idemdb.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected before anything was read or written.
    InvalidInput(InvalidInput),
    /// Stored bytes failed their checksum or could not be decoded. Nothing was replayed from them.
    Corrupted {
        /// What was being read (for example "record" or "meta/format").
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// The directory holds a store of another format version, or something that is not an idemdb
    /// store at all. Nothing was changed on disk.
    IncompatibleFormat {
        /// What was found.
        found: String,
        /// What this build reads and writes.
        expected: u8,
    },
    /// A lease minted by a different store (another directory, or a store that was deleted and
    /// re-created) was passed to this one. Nothing was changed.
    ForeignLease,
    /// The storage engine is busy (write stall, lock contention): the call may be retried.
    Busy(String),
    /// The disk or the operating system failed the operation. `kind` says which way, as far as
    /// the engine's message tells (`StorageFull` for a full disk, `PermissionDenied`, `NotFound`,
    /// `ReadOnlyFilesystem`, `TimedOut`; `Other` when it does not say).
    Io {
        /// The class of the failure, matchable (a full disk is `std::io::ErrorKind::StorageFull`).
        kind: std::io::ErrorKind,
        /// The engine's or the operating system's message.
        message: String,
        /// The operating system's error itself, where idemdb called it (creating a directory);
        /// `None` for RocksDB's, which reports I/O failures as text only.
        source: Option<Cause>,
    },
    /// An optimistic update met a conflict on every one of its attempts.
    Contention {
        /// How many attempts were made.
        attempts: u32,
    },
    /// The engine reported an error that fits no other class.
    Engine(String),
    /// A value could not be encoded into a form that reads back (a bug, or a value past the
    /// decoder's size bound). Nothing was written.
    Encoding {
        /// What was being encoded (for example "record").
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// [`crate::Store::close`] was called while other handles of the store (clones held by other
    /// threads, the HTTP layer, a consumer) were still alive: the database stays open until the
    /// last one is dropped, so the directory cannot be reopened yet.
    InUse {
        /// How many other handles were alive.
        other_handles: usize,
    },
    /// The database could not be reached, or did not answer within the statement timeout
    /// (PostgreSQL backend). Nothing was replayed or acquired from this call: retry it after a
    /// moment (the HTTP layer answers 503 with `Retry-After`). A claim whose answer was lost may
    /// have acquired the key: it stays pending until its lease runs out, then the next claim
    /// takes it over, so the operation never runs twice at once.
    Unavailable {
        /// What failed, as the client or the database said it.
        message: String,
        /// The client's error, when there was one (`None` for a bound that ran out).
        source: Option<Cause>,
    },
    /// The database's idemdb schema is not the version this build uses (PostgreSQL backend).
    /// Nothing was changed.
    SchemaMismatch {
        /// What was found.
        found: String,
        /// The schema version this build reads and writes.
        expected: i32,
    },
    /// The operation is not available on this store's backend (for example a sync call on a
    /// PostgreSQL store, or RocksDB compaction on PostgreSQL). Nothing was changed.
    Unsupported {
        /// The operation.
        operation: &'static str,
        /// Why, and what to use instead.
        hint: &'static str,
    },
    /// The store was opened read-only ([`crate::Config::read_only`]) and this call would write.
    /// Nothing was changed.
    ReadOnly,
    /// The database refused the connection as configured (PostgreSQL backend): TLS that cannot
    /// be agreed or whose certificate does not verify, a wrong user or password, a database that
    /// does not exist, a `pg_hba.conf` that admits no such connection. Not transient: retrying
    /// changes nothing until the URL or [`crate::Config`] is fixed. Nothing was changed.
    ConnectionRejected {
        /// What the client or the server said, and what to check.
        message: String,
        /// The client's error, when there was one.
        source: Option<Cause>,
    },
    /// Opening waited longer than [`crate::Config::migration_lock_timeout`] for the schema's
    /// migration lock (PostgreSQL backend): another instance is applying the schema, or a long
    /// transaction holds a table the migration changes. Retry the open. Nothing was changed.
    MigrationTimeout {
        /// How long it waited.
        waited: std::time::Duration,
    },
    /// The call was made in a way the API does not allow: a SQL transaction used after it
    /// ended, a commit built on another store than the transaction that applies it, a result
    /// column of a type [`crate::SqlValue`] does not hold. Not transient: the calling code
    /// must change. Nothing was changed.
    Misuse {
        /// What was wrong, and what to do instead.
        message: String,
    },
    /// A task of idemdb's did not finish: the blocking pool's thread panicked, or the runtime
    /// shut down under it. What the call did is unknown (a claim may have acquired its key:
    /// its lease then runs out and the next claim takes it over). Not transient; a bug to
    /// report, with the `source()` it carries.
    Internal {
        /// What did not finish.
        message: String,
        /// Why: the task's join error.
        source: Option<Cause>,
    },
}

/// The underlying error an [`Error`] was made from ([`std::error::Error::source`] returns it):
/// the operating system's `std::io::Error`, the PostgreSQL client's error, a task's join
/// error. Cloned cheaply (shared); two causes compare equal when they read the same, so that
/// errors compare by what they say.
#[derive(Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl Cause {
    pub(crate) fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Cause(Arc::new(e))
    }

    /// The underlying error.
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

impl Eq for Cause {}

impl Error {
    /// A short, stable name of the error's kind, as spans and the `idemdb_errors_total` metric
    /// label it (docs/operating.md).
    pub fn class(&self) -> &'static str {
        match self {
            Error::InvalidInput(_) => "invalid_input",
            Error::Corrupted { .. } => "corrupted",
            Error::IncompatibleFormat { .. } => "incompatible_format",
            Error::ForeignLease => "foreign_lease",
            Error::Busy(_) => "busy",
            Error::Io { .. } => "io",
            Error::Contention { .. } => "contention",
            Error::Engine(_) => "engine",
            Error::Encoding { .. } => "encoding",
            Error::InUse { .. } => "in_use",
            Error::Unavailable { .. } => "unavailable",
            Error::SchemaMismatch { .. } => "schema_mismatch",
            Error::Unsupported { .. } => "unsupported",
            Error::ReadOnly => "read_only",
            Error::ConnectionRejected { .. } => "connection_rejected",
            Error::MigrationTimeout { .. } => "migration_timeout",
            Error::Misuse { .. } => "misuse",
            Error::Internal { .. } => "internal",
        }
    }

    /// Whether retrying the same call later can succeed with nothing changed in the
    /// configuration: [`Error::Unavailable`], [`Error::Busy`], [`Error::Contention`] and
    /// [`Error::MigrationTimeout`]. Bad input, damaged data, a configuration the database
    /// rejects ([`Error::ConnectionRejected`]) or a schema of another version are not. The
    /// one rule of transience: every layer of idemdb (the HTTP layer's 503, the fleet's retries)
    /// asks it.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Unavailable { .. }
                | Error::Busy(_)
                | Error::Contention { .. }
                | Error::MigrationTimeout { .. }
        )
    }
}

/// Which argument was rejected, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidInput {
    /// A tenant or key was empty. `field` names which.
    Empty {
        /// "tenant" or "key".
        field: &'static str,
    },
    /// A tenant or key was longer than the configured limit.
    TooLong {
        /// "tenant" or "key".
        field: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A response, failure or checkpoint was larger than the configured limit.
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size in bytes.
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A duration was zero or beyond the configured maximum.
    Duration {
        /// Which duration ("lease", "retention", "renewal").
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// A configuration value was out of range.
    Config(String),
    /// The write would take a bounded value past its bound (an offset window's out-of-order
    /// offsets, a causal entity's siblings, a replica vector's size). Nothing was written.
    LimitReached {
        /// What would grow too large.
        what: &'static str,
        /// The bound.
        limit: usize,
        /// What to do about it.
        hint: &'static str,
    },
    /// A commit names the same entity, reservation or lease twice. Nothing was written.
    NamedTwice,
    /// A text value (a response's metadata, a checkpoint's phase) held a NUL byte, which
    /// PostgreSQL's text cannot store; refused on both backends alike. Nothing was written.
    NulByte {
        /// Which value.
        what: &'static str,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidInput(i) => write!(f, "invalid input: {i}"),
            Error::Corrupted { what, reason } => write!(
                f,
                "corrupted {what}: {reason}; the value was not used and nothing was changed. \
                 Restore it from a backup, or remove it (`idemdb forget`, `idemdb forget \
                 --consumer`, `Store::causal_delete`) if it cannot be recovered"
            ),
            Error::IncompatibleFormat { found, expected } => write!(
                f,
                "incompatible store: found {found}, this build reads format version {expected}; \
                 open the directory with the idemdb version that wrote it"
            ),
            Error::ForeignLease => write!(
                f,
                "this lease was issued by a different store; pass leases only to the store that issued them"
            ),
            Error::Busy(m) => write!(f, "storage engine busy, retry the call: {m}"),
            Error::Io { kind, message, .. } => write!(
                f,
                "I/O error ({kind}; check disk space and permissions): {message}"
            ),
            Error::Contention { attempts } => write!(
                f,
                "gave up after {attempts} attempts, each conflicting with a concurrent writer; \
                 retry later or raise UpdateOptions::max_attempts"
            ),
            Error::Engine(m) => write!(f, "storage engine error: {m}"),
            Error::Encoding { what, reason } => write!(
                f,
                "could not encode the {what}: {reason}; nothing was written"
            ),
            Error::InUse { other_handles } => write!(
                f,
                "{other_handles} other handle(s) of this store are still alive (clones held by \
                 other threads, the HTTP layer or a consumer); the database closes when the last \
                 one is dropped: drop them, then close"
            ),
            Error::Unavailable { message, .. } => write!(
                f,
                "the database is unavailable ({message}); nothing was decided by this call: \
                 retry after a moment"
            ),
            Error::SchemaMismatch { found, expected } => write!(
                f,
                "the database's idemdb schema is not the one this build uses: found {found}, \
                 expected version {expected}; run `idemdb migrate --postgres URL` (or open with \
                 Config::migrate_on_open(true))"
            ),
            Error::Unsupported { operation, hint } => {
                write!(f, "{operation} is not available on this store: {hint}")
            }
            Error::ReadOnly => write!(
                f,
                "this store was opened read-only (Config::read_only, as `idemdb inspect` and \
                 `idemdb stats` open it) and the call would write; nothing was changed: open it \
                 writable, in the process that owns the directory"
            ),
            Error::ConnectionRejected { message, .. } => write!(
                f,
                "the database rejected the connection as configured ({message}); this is not \
                 transient: fix the URL or the Config (sslmode, sslrootcert, user, password, \
                 database) and open again"
            ),
            Error::MigrationTimeout { waited } => write!(
                f,
                "waited {waited:?} for the schema's migration lock: another instance is \
                 applying the schema, or a long transaction holds a table it changes; retry the \
                 open (Config::migration_lock_timeout bounds the wait)"
            ),
            Error::Misuse { message } => write!(f, "not allowed: {message}"),
            Error::Internal { message, .. } => write!(
                f,
                "an idemdb task did not finish ({message}); what the call did is unknown. \
                 This is a bug: please report it with this error's source"
            ),
        }
    }
}

impl fmt::Display for InvalidInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidInput::Empty { field } => write!(f, "the {field} must not be empty"),
            InvalidInput::TooLong { field, len, max } => write!(
                f,
                "the {field} is {len} bytes, over the limit of {max} (Config::max_{field}_len)"
            ),
            InvalidInput::TooLarge { what, len, max } => {
                let limit = if *what == "fingerprint" {
                    "MAX_FINGERPRINT_LEN"
                } else {
                    "Config::max_response_bytes"
                };
                write!(
                    f,
                    "the {what} is {len} bytes, over the limit of {max} ({limit})"
                )
            }
            InvalidInput::Duration { what, reason } => write!(f, "the {what} duration {reason}"),
            InvalidInput::Config(m) => write!(f, "configuration: {m}"),
            InvalidInput::LimitReached { what, limit, hint } => {
                write!(f, "the {what} would pass its limit of {limit}; {hint}")
            }
            InvalidInput::NamedTwice => write!(
                f,
                "the commit names the same entity, reservation or lease twice: name each once"
            ),
            InvalidInput::NulByte { what } => write!(
                f,
                "the {what} contains a NUL byte (\\0), which a store on PostgreSQL cannot keep \
                 as text: leave it out or encode it (hex, base64)"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::InvalidInput(i) => Some(i),
            Error::Io { source, .. }
            | Error::Unavailable { source, .. }
            | Error::ConnectionRejected { source, .. }
            | Error::Internal { source, .. } => source
                .as_ref()
                .map(|c| c.get() as &(dyn std::error::Error + 'static)),
            _ => None,
        }
    }
}

impl std::error::Error for InvalidInput {}

impl Error {
    /// The database is unavailable, as `message` says (no underlying error).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn unavailable(message: impl Into<String>) -> Error {
        Error::Unavailable {
            message: message.into(),
            source: None,
        }
    }

    /// A task of idemdb's that did not finish (`what`), with its join error.
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    pub(crate) fn internal(
        what: impl Into<String>,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::Internal {
            message: what.into(),
            source: Some(Cause::new(e)),
        }
    }

    /// The call was made in a way the API does not allow.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn misuse(message: impl Into<String>) -> Error {
        Error::Misuse {
            message: message.into(),
        }
    }

    /// This error with `e` as its source, where its variant keeps one (the others are
    /// returned as they are).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn with_source(
        mut self,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        match &mut self {
            Error::Io { source, .. }
            | Error::Unavailable { source, .. }
            | Error::ConnectionRejected { source, .. }
            | Error::Internal { source, .. } => *source = Some(Cause::new(e)),
            _ => {}
        }
        self
    }
}

/// An I/O error of the operating system, kept whole: its kind, its message, and itself as the
/// source.
pub(crate) fn io(context: impl fmt::Display, e: std::io::Error) -> Error {
    Error::Io {
        kind: e.kind(),
        message: format!("{context}: {e}"),
        source: Some(Cause::new(e)),
    }
}

impl From<InvalidInput> for Error {
    fn from(i: InvalidInput) -> Self {
        Error::InvalidInput(i)
    }
}

pub(crate) fn corrupted(what: &'static str, reason: impl Into<String>) -> Error {
    Error::Corrupted {
        what,
        reason: reason.into(),
    }
}

/// An I/O error from a message, classified by what the message says (RocksDB reports I/O
/// failures as text: `IO error: No space left on device`, `... Permission denied`).
pub(crate) fn io_from_message(message: String) -> Error {
    use std::io::ErrorKind as K;
    let m = message.to_ascii_lowercase();
    let kind = if m.contains("no space left") || m.contains("nospace") || m.contains("disk full") {
        K::StorageFull
    } else if m.contains("permission denied") || m.contains("operation not permitted") {
        K::PermissionDenied
    } else if m.contains("no such file") {
        K::NotFound
    } else if m.contains("read-only file system") {
        K::ReadOnlyFilesystem
    } else if m.contains("timed out") {
        K::TimedOut
    } else {
        K::Other
    };
    Error::Io {
        kind,
        message,
        source: None,
    }
}

pub(crate) fn encoding(what: &'static str, reason: impl Into<String>) -> Error {
    Error::Encoding {
        what,
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_keep_a_matchable_kind() {
        let full = io_from_message("IO error: No space left on device: While appending".into());
        assert!(matches!(
            full,
            Error::Io {
                kind: std::io::ErrorKind::StorageFull,
                ..
            }
        ));
        let denied = io_from_message("IO error: While open a file: /x: Permission denied".into());
        assert!(matches!(
            denied,
            Error::Io {
                kind: std::io::ErrorKind::PermissionDenied,
                ..
            }
        ));
        assert!(matches!(
            io_from_message("IO error: something else".into()),
            Error::Io {
                kind: std::io::ErrorKind::Other,
                ..
            }
        ));
    }
}
