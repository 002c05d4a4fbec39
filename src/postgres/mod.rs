//! The PostgreSQL backend: request idempotency records shared by every instance of a fleet.
//! Invariants:
//! - every decision is made by the database in one statement, so in one transaction (a claim's
//!   `INSERT ... ON CONFLICT DO NOTHING`, or for a row that looks acquirable the `idemdb_claim`
//!   function, whose `UPDATE ... WHERE acquirable` decides under the row lock; a holder's
//!   `UPDATE ... WHERE fence = $n AND state = pending`), never a read in the application followed
//!   by a write: what the application reads only chooses which statement asks, or explains a
//!   decision already made;
//! - times come from the database server's clock (`clock_timestamp()`, in milliseconds), read
//!   once per statement, so instances with skewed clocks agree on every lease and expiry;
//! - fencing tokens come from one database sequence, drawn when the row is locked or, for a
//!   buffered claim (`Config::buffered_claims`: a new key's claim that does not wait for its WAL
//!   flush), from a block this store drew with a flushed commit (`fences.rs`), so they strictly
//!   increase for every key and no server crash makes the sequence hand one out twice;
//! - one round trip per operation in the common cases (prepared statements): a new key, a replay,
//!   a live lease, a completion; a second for a takeover (the function), for a holder whose lease
//!   was lost (the read that says why), when a concurrent writer changed the row between the
//!   statement's snapshot and its lock (the statement is rerun), and for a new key claimed right
//!   after a run of replays (the claim read first, `CLAIM_READ`, and found no row);
//! - a failure to reach the database, or an answer later than the statement timeout, is
//!   [`Error::Unavailable`]: nothing is replayed or acquired from it. Only this module imports
//!   `tokio_postgres` and `deadpool_postgres`.

mod causal;
mod coalesce;
mod commit;
mod entities;
mod fences;
mod lost_claims;
pub(crate) mod migrations;
mod offsets;
mod pool;
pub(crate) mod replay_tier;
mod requests;
pub(crate) use requests::{ClaimAsk, ReadFirst};
mod send;
mod settings;
mod statements;
mod stats;
mod tls;
mod transaction;
mod unique;
mod waits;
pub(crate) use waits::Waited;

pub(crate) use crate::config::fleet::Settings;
pub(crate) use causal::CausalKind;
pub use stats::PostgresStats;
pub use transaction::{SqlTransaction, SqlValue};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres::error::SqlState;
use tokio_postgres::Row;

use pool::{lend, Conn};
use send::{Param, Session};

use crate::clock::{Clock, Millis};
use crate::config::fleet::StatementMode;
use crate::config::{Config, OnPostgres};
use crate::error::{Error, Result};
use crate::format::Namespace;
use crate::record::{Checkpoint, LeaseLost, Replay, Response};
use crate::requests::{lease_lost, Holding, Seen};
use crate::telemetry::counters::Metrics;

/// A fencing token is `epoch << FENCE_EPOCH_SHIFT | n` (migration 4): `epoch` the server's WAL
/// timeline when the token was drawn, `n` from the `idemdb_fence` sequence.
pub(crate) const FENCE_EPOCH_SHIFT: u32 = 47;

/// The epoch (the server's timeline) a fencing token was drawn in (0: before migration 4).
pub(crate) fn epoch_of(fence: u64) -> u64 {
    fence >> FENCE_EPOCH_SHIFT
}

/// Record states as stored in `idemdb_requests.state`.
const PENDING: i16 = 0;
const RELEASED: i16 = 1;
const COMPLETED: i16 = 2;
const FAILED: i16 = 3;

/// How often a statement whose snapshot disagreed with its lock is rerun before giving up.
const RERUNS: u32 = 8;

/// The PostgreSQL backend as a whole: what every call of the async API means on PostgreSQL, with
/// the same argument checks, outcomes, counters and spans as the embedded store. Its SQL is
/// [`PgStore`]'s; the replay tier, the counters and the sweeper are this process's. A cheap
/// handle: clones share all of it.
#[derive(Clone)]
pub(crate) struct Postgres {
    pub(crate) sql: Arc<PgStore>,
    pub(crate) cfg: Arc<Config<OnPostgres>>,
    /// The local replay tier, if configured.
    tier: Option<Arc<replay_tier::ReplayTier>>,
    /// This process's outcome counters.
    metrics: Arc<Metrics>,
}

impl Postgres {
    /// Opens the store `cfg` describes (a PostgreSQL configuration), and starts its sweeper.
    pub(crate) async fn open(cfg: Config<OnPostgres>) -> Result<Postgres> {
        cfg.validate()?;
        let cfg = Arc::new(cfg);
        let settings = &cfg.backend.settings;
        let sql = Arc::new(PgStore::open(settings, cfg.backend.test_clock.clone()).await?);
        let metrics = Arc::new(Metrics::default());
        if let Some(every) = cfg.common.sweep_interval {
            tokio::spawn(requests::sweep_in_background(
                Arc::downgrade(&sql),
                Arc::downgrade(&metrics),
                every,
            ));
        }
        let tier = (settings.tier_bytes > 0).then(|| {
            Arc::new(replay_tier::ReplayTier::new(
                settings.tier_bytes,
                settings.tier_max_age,
            ))
        });
        Ok(Postgres {
            sql,
            cfg,
            tier,
            metrics,
        })
    }

    /// What the local replay tier holds and how often it answered; `None` without a tier.
    pub(crate) fn tier_stats(&self) -> Option<replay_tier::ReplayTierStats> {
        self.tier.as_ref().map(|t| t.stats())
    }

    /// This process's outcome counters.
    pub(crate) fn counters(&self) -> crate::telemetry::counters::Counters {
        self.metrics.snapshot()
    }

    /// The counters the commits of this store bump.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The database server's time.
    pub(crate) async fn now(&self) -> Result<Millis> {
        self.sql.now().await
    }

    /// What the database holds, counted in one read-only statement.
    pub(crate) async fn stats(&self) -> Result<PostgresStats> {
        self.sql.stats().await
    }
}

/// A store on PostgreSQL: a connection pool, the store's id and its settings.
pub(crate) struct PgStore {
    pool: Pool,
    /// How statements are sent (named prepared, or unnamed for poolers).
    mode: StatementMode,
    store_id: u128,
    statement_timeout: Duration,
    /// How long opening waits for another instance's migration.
    migration_lock_timeout: Duration,
    /// The highest fencing epoch (the server's timeline) this store has seen in a token: a
    /// higher one in a new token means the database failed over (see [`epoch_of`]).
    epoch_seen: std::sync::atomic::AtomicU64,
    /// How many times `epoch_seen` went up.
    failovers_seen: std::sync::atomic::AtomicU64,
    /// Tests only: a clock whose reading replaces the database's (the conformance suite's
    /// manual clock). `None` in every real store.
    clock: Option<Arc<dyn Clock>>,
    /// Whether concurrent claims and lease ends are coalesced into one statement
    /// (`coalesce.rs`), and their queues.
    coalescing: bool,
    claims: coalesce::Coalescer<requests::Claims>,
    holders: coalesce::Coalescer<requests::Holders>,
    /// Whether new keys' claims commit without waiting for their flush
    /// (`Config::buffered_claims`), and the fencing tokens drawn for them (`fences.rs`).
    buffered: bool,
    fences: fences::Fences,
    /// How often recent claims found their row: whether the next one reads first.
    hits: requests::Hits,
    /// Claims waiting for a lease to end, and the listening connection that wakes them.
    waits: waits::Waits,
    /// Claim nonces, and the claims whose answer was lost (`lost_claims.rs`).
    lost_claims: lost_claims::LostClaims,
}

fn ns_code(ns: Namespace) -> i16 {
    match ns {
        Namespace::Requests => 0,
        Namespace::Consumers => 1,
    }
}

/// A database error as people read it: the server's message and SQLSTATE (the driver's own
/// `Display` says only "db error"), or the connection's failure with its cause.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut m = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(d) = db.detail() {
                m.push_str(&format!("; {d}"));
            }
            m
        }
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}

/// Classifies a database error once, at the boundary.
fn classify(e: tokio_postgres::Error) -> Error {
    classify_parts(&e).with_source(e)
}

/// What a connection failure without SQLSTATE says about the configuration: `Some(what to fix)`
/// when it is one (TLS that cannot be agreed or verified, credentials the client lacks, a
/// setting tokio-postgres refuses), `None` when it is the network or the server being away.
fn rejection(e: &tokio_postgres::Error) -> Option<&'static str> {
    let text = e.to_string();
    if text.starts_with("error performing TLS handshake") {
        let cause = std::error::Error::source(e);
        let tls_itself = cause.is_some_and(tls::is_tls_rejection)
            || cause.is_some_and(|c| c.to_string().contains("server does not support TLS"));
        return tls_itself.then_some(
            "check sslmode, sslrootcert (the CA that signed the server's certificate) and the \
             host name the certificate names",
        );
    }
    if text.starts_with("authentication error") {
        return Some("check the user and password in the URL");
    }
    if text.starts_with("invalid configuration") {
        return Some("check the URL");
    }
    None
}

/// [`classify`] without taking the error.
fn classify_parts(e: &tokio_postgres::Error) -> Error {
    let e_text = describe(e);
    match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
                || *c == SqlState::INVALID_CATALOG_NAME
                || *c == SqlState::SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION =>
        {
            Error::ConnectionRejected {
                message: format!(
                    "PostgreSQL: {e_text}; check the user, password, database and sslmode \
                     against the server's pg_hba.conf"
                ),
                source: None,
            }
        }
        Some(c)
            if *c == SqlState::INVALID_SQL_STATEMENT_NAME
                || *c == SqlState::DUPLICATE_PSTATEMENT =>
        {
            Error::ConnectionRejected {
                message: format!(
                    "PostgreSQL: {e_text}; named prepared statements do not survive this \
                     connection: it goes through a pooler in transaction mode (PgBouncer before \
                     1.21 or without max_prepared_statements, Supavisor, RDS Proxy): add \
                     statement_mode=unnamed to the URL, or call \
                     Config::statement_mode(StatementMode::Unnamed)"
                ),
                source: None,
            }
        }
        // A server in recovery (a standby: a stale writer endpoint after a failover, or a URL
        // without target_session_attrs) refuses a write with 25006, and a function that only a
        // primary answers (`pg_current_wal_lsn()`, in every fencing token) with 55000 "recovery
        // is in progress": both are the same standby, unavailable for writes.
        Some(c)
            if *c == SqlState::READ_ONLY_SQL_TRANSACTION
                || (*c == SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
                    && e_text.contains("recovery is in progress")) =>
        {
            Error::Unavailable {
                message: format!(
                    "PostgreSQL is read-only here (a standby, or a primary being demoted in a \
                 failover): {e_text}; the connection was closed, the next call connects afresh \
                 (use a multi-host URL with target_session_attrs=read-write; if this persists, \
                 the URL names a standby)"
                ),
                source: None,
            }
        }
        Some(c) if *c == SqlState::UNDEFINED_TABLE || *c == SqlState::UNDEFINED_OBJECT => {
            Error::SchemaMismatch {
                found: "no idemdb tables (the schema was never applied)".into(),
                expected: migrations::current_version(),
            }
        }
        Some(c) if *c == SqlState::QUERY_CANCELED => Error::Unavailable {
            message: format!("PostgreSQL cancelled the statement (statement timeout): {e_text}"),
            source: None,
        },
        Some(c)
            if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::LOCK_NOT_AVAILABLE =>
        {
            Error::Busy(format!("PostgreSQL: {e_text}"))
        }
        Some(c)
            if c.code().starts_with("08")
                || c.code().starts_with("57")
                || c.code().starts_with("53") =>
        {
            Error::Unavailable {
                message: format!("PostgreSQL: {e_text}"),
                source: None,
            }
        }
        Some(_) => Error::Engine(format!("PostgreSQL: {e_text}")),
        // No SQLSTATE: the connection failed or closed (I/O, TLS, protocol), or the client's
        // configuration cannot work with this server.
        None => match rejection(e) {
            Some(fix) => Error::ConnectionRejected {
                message: format!("PostgreSQL connection: {e_text}; {fix}"),
                source: None,
            },
            None => Error::Unavailable {
                message: format!("PostgreSQL connection: {e_text}"),
                source: None,
            },
        },
    }
}

fn to_i64(what: &'static str, v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| {
        crate::error::InvalidInput::Duration {
            what,
            reason: format!("{v} ms does not fit the database's bigint"),
        }
        .into()
    })
}

/// A database integer that must be a time or a counter: negative values are damage.
fn from_i64(what: &'static str, v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| crate::error::corrupted(what, format!("negative value {v}")))
}

fn from_i32(what: &'static str, v: i32) -> Result<u32> {
    u32::try_from(v).map_err(|_| crate::error::corrupted(what, format!("negative value {v}")))
}

fn encode_meta(meta: &BTreeMap<String, String>) -> Vec<String> {
    meta.iter()
        .flat_map(|(k, v)| [k.clone(), v.clone()])
        .collect()
}

fn decode_meta(flat: Option<Vec<String>>) -> Result<BTreeMap<String, String>> {
    let flat = flat.unwrap_or_default();
    if !flat.len().is_multiple_of(2) {
        return Err(crate::error::corrupted(
            "response metadata",
            "an odd number of key/value entries",
        ));
    }
    let mut it = flat.into_iter();
    let mut meta = BTreeMap::new();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        meta.insert(k, v);
    }
    Ok(meta)
}

fn response(body: Option<Vec<u8>>, meta: Option<Vec<String>>) -> Result<Response> {
    Ok(Response {
        body: body.unwrap_or_default(),
        meta: decode_meta(meta)?,
    })
}

/// The stored response of a finished row and when it was stored.
fn replay(row: &Row) -> Result<Replay> {
    Ok(Replay {
        response: response(row.get("response_body"), row.get("response_meta"))?,
        finished_at: from_i64(
            "finished_at",
            row.get::<_, Option<i64>>("finished_at").unwrap_or(0),
        )?,
    })
}

fn checkpoint(phase: Option<String>, state: Option<Vec<u8>>) -> Option<Checkpoint> {
    phase.map(|phase| Checkpoint {
        phase,
        state: state.unwrap_or_default(),
    })
}

/// A holder's call as its statement and the values of its own (the change's values move into
/// them: no copy of a response), shared by the holder's calls and a commit's lease endings.
pub(crate) struct HolderCall {
    pub(crate) sql: &'static str,
    bytes: Option<Vec<u8>>,
    meta: Option<Vec<String>>,
    ms: Option<i64>,
    text: Option<String>,
    /// The change as `idemdb_holder`'s `p_op` (1 complete, 2 fail, 3 release, 4 renew,
    /// 5 checkpoint), for the unnamed statement mode.
    op: i16,
}

impl HolderCall {
    pub(crate) fn new(change: HolderChange) -> Result<HolderCall> {
        let call = |(sql, op), bytes, meta, ms, text| HolderCall {
            sql,
            bytes,
            meta,
            ms,
            text,
            op,
        };
        Ok(match change {
            HolderChange::Complete(r) => call(
                (statements::COMPLETE, 1),
                Some(r.body),
                Some(encode_meta(&r.meta)),
                None,
                None,
            ),
            HolderChange::FailTerminal(r) => call(
                (statements::FAIL, 2),
                Some(r.body),
                Some(encode_meta(&r.meta)),
                None,
                None,
            ),
            HolderChange::Release => call((statements::RELEASE, 3), None, None, None, None),
            HolderChange::Renew(extra) => call(
                (statements::RENEW, 4),
                None,
                None,
                Some(to_i64("renewal", extra)?),
                None,
            ),
            HolderChange::Checkpoint(cp) => call(
                (statements::CHECKPOINT, 5),
                Some(cp.state),
                None,
                None,
                Some(cp.phase),
            ),
        })
    }

    /// The statement's parameters: the five every holder's statement shares (namespace, tenant,
    /// key, fence, test clock), then its own.
    pub(crate) fn params<'a>(&'a self, head: [&'a dyn Param; 5]) -> Vec<&'a dyn Param> {
        let own: Vec<&dyn Param> = match (&self.bytes, &self.meta, &self.ms, &self.text) {
            (Some(b), Some(m), _, _) => vec![b, m],
            (Some(b), None, _, Some(t)) => vec![t, b],
            (_, _, Some(ms), _) => vec![ms],
            _ => Vec::new(),
        };
        head.into_iter().chain(own).collect()
    }

    /// `idemdb_holder`'s parameters ([`statements::HOLDER_FN`]): the five shared ones, the
    /// change, and its values (`NULL` where the change has none).
    pub(crate) fn function_params<'a>(&'a self, head: [&'a dyn Param; 5]) -> Vec<&'a dyn Param> {
        let own: [&dyn Param; 5] = [&self.op, &self.bytes, &self.meta, &self.ms, &self.text];
        head.into_iter().chain(own).collect()
    }
}

/// Runs one statement on `c` in `mode`; its row, if any.
pub(super) async fn one(
    c: &deadpool_postgres::Object,
    mode: StatementMode,
    sql: &str,
    params: &[&dyn Param],
) -> Result<Option<tokio_postgres::Row>> {
    c.one(mode, sql, params).await.map_err(classify)
}

/// Why a lease with fence `ours` is no longer held, from its row as read (`state`, `fence`,
/// `expired`; `NULL` when there is no row): `None` when the row says it still is (the caller
/// asks again).
/// [`lost_lease`] from a row that answers `state`, `fence` and `expired` (`HOLDER_WHY`,
/// `idemdb_holder`).
fn lost_from_row(row: &Row, ours: i64) -> Result<Option<LeaseLost>> {
    lost_lease(row.get("state"), row.get("fence"), row.get("expired"), ours)
}

fn lost_lease(
    state: Option<i16>,
    fence: Option<i64>,
    expired: Option<bool>,
    ours: i64,
) -> Result<Option<LeaseLost>> {
    let holding = match state {
        None => None,
        Some(_) => Some(Holding {
            live: expired != Some(true),
            state: seen_state(state, 0)?,
            fence: from_i64("fence", fence.unwrap_or(0))?,
        }),
    };
    Ok(lease_lost(holding, from_i64("fence", ours)?))
}

/// A row's `state` code (with its lease's end) as the shared rules read it; a code that is none
/// of the four is a damaged row.
pub(super) fn seen_state(code: Option<i16>, lease_until: Millis) -> Result<Seen<()>> {
    Ok(match code {
        Some(PENDING) => Seen::Pending { lease_until },
        Some(RELEASED) => Seen::Released,
        Some(COMPLETED) => Seen::Completed(()),
        Some(FAILED) => Seen::Failed(()),
        other => {
            return Err(crate::error::corrupted(
                "request row",
                format!("unknown state {other:?}"),
            ))
        }
    })
}

/// What a holder's call (complete, fail, renew, checkpoint) asks the row to become.
pub(crate) enum HolderChange {
    Complete(Response),
    FailTerminal(Response),
    Release,
    Renew(Millis),
    Checkpoint(Checkpoint),
}

impl PgStore {
    /// Connects, applies the migrations if asked (or checks the schema version), and reads the
    /// store's id.
    pub(crate) async fn open(s: &Settings, clock: Option<Arc<dyn Clock>>) -> Result<PgStore> {
        let store = Self::connect(s, clock)?;
        if s.migrate {
            store.migrate_up(None).await?;
        }
        let version = store.schema_version().await?;
        if version != migrations::current_version() {
            return Err(Error::SchemaMismatch {
                found: match version {
                    0 => "no idemdb schema".into(),
                    v => format!("schema version {v}"),
                },
                expected: migrations::current_version(),
            });
        }
        let c = store.conn().await?;
        let row = store
            .timed(async move {
                let row = c
                    .one(store.mode, "SELECT store_id FROM idemdb_meta", &[])
                    .await
                    .map_err(classify)?;
                c.keep();
                row.ok_or_else(|| crate::error::corrupted("idemdb_meta", "no row"))
            })
            .await?;
        let id: Vec<u8> = row.get(0);
        let id = <[u8; 16]>::try_from(id.as_slice())
            .map_err(|_| crate::error::corrupted("idemdb_meta.store_id", "not 16 bytes"))?;
        Ok(PgStore {
            store_id: u128::from_be_bytes(id),
            ..store
        })
    }

    /// A pool for the database at `s.url`, not yet connected, checking nothing (for the
    /// migration commands, which must work on any schema version).
    pub(crate) fn connect(s: &Settings, clock: Option<Arc<dyn Clock>>) -> Result<PgStore> {
        let (pool, resolved) = pool::build(s)?;
        let listen = match &s.listen_url {
            Some(url) => pool::Dialer::new(&Settings {
                url: url.clone(),
                ..s.clone()
            })?,
            None => pool::Dialer::new(s)?,
        };
        Ok(PgStore {
            pool,
            mode: resolved.statement_mode,
            store_id: 0,
            statement_timeout: s.statement_timeout,
            migration_lock_timeout: s.migration_lock_timeout,
            epoch_seen: std::sync::atomic::AtomicU64::new(0),
            failovers_seen: std::sync::atomic::AtomicU64::new(0),
            clock,
            coalescing: s.coalescing,
            claims: coalesce::Coalescer::new(s.coalesce_limits),
            holders: coalesce::Coalescer::new(s.coalesce_limits),
            buffered: s.buffered_claims,
            fences: fences::Fences::default(),
            hits: requests::Hits::default(),
            waits: waits::Waits::new(listen),
            lost_claims: lost_claims::LostClaims::default(),
        })
    }

    /// Notes the epoch of a token just drawn: a higher one than this store saw before means the
    /// database failed over (a standby was promoted) since.
    fn note_epoch(&self, fence: u64) {
        let epoch = epoch_of(fence);
        let before = self
            .epoch_seen
            .fetch_max(epoch, std::sync::atomic::Ordering::Relaxed);
        if before != 0 && epoch > before {
            self.failovers_seen
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            #[cfg(feature = "tracing")]
            tracing::warn!(
                target: "idemdb",
                timeline_before = before,
                timeline_now = epoch,
                "PostgreSQL failed over (its timeline went up): every lease from before is \
                 refused on records claimed since; under asynchronous replication, writes \
                 acknowledged just before the failover may be missing (docs/operating.md)"
            );
        }
    }

    /// How many failovers this store has seen in the tokens it drew (see
    /// [`PgStore::note_epoch`]), and the newest epoch.
    pub(crate) fn failovers(&self) -> (u64, u64) {
        (
            self.failovers_seen
                .load(std::sync::atomic::Ordering::Relaxed),
            self.epoch_seen.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// A connection from the pool for one call ([`Conn::keep`] it when the call finished
    /// cleanly; dropped otherwise, it is closed).
    /// Not counted in a statement's budget ([`PgStore::timed`]): connecting has its own bound
    /// (the pool's wait, and `connect_timeout` per host), so a frozen first host of a multi-host
    /// URL cannot use up the call's time before the next host is tried.
    pub(crate) async fn conn(&self) -> Result<Conn> {
        let r = lend(&self.pool).await;
        if matches!(r, Err(Error::Unavailable { .. })) {
            pool::flush_idle(&self.pool);
        }
        r
    }

    /// Bounds a database call by the statement timeout (plus a second for the network): a
    /// database that does not answer is [`Error::Unavailable`], never a hang. A call that failed
    /// as unavailable closes the pool's idle connections too (`pool.rs`).
    async fn timed<T>(&self, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let r = match tokio::time::timeout(self.statement_timeout + Duration::from_secs(1), f).await
        {
            Ok(r) => r,
            Err(_) => Err(Error::Unavailable {
                message: format!(
                    "PostgreSQL did not answer within {:?}",
                    self.statement_timeout + Duration::from_secs(1)
                ),
                source: None,
            }),
        };
        if matches!(r, Err(Error::Unavailable { .. })) {
            pool::flush_idle(&self.pool);
        }
        r
    }

    /// The clock override as a statement parameter (`NULL`: the database's clock).
    fn now_param(&self) -> Option<i64> {
        self.clock
            .as_ref()
            .map(|c| i64::try_from(c.now_millis()).unwrap_or(i64::MAX))
    }

    /// Runs the prepared statement `sql` on a pooled connection, bounded by the timeouts; its
    /// rows (every statement here returns at most one).
    async fn query(&self, sql: &str, params: &[&dyn Param]) -> Result<Option<Row>> {
        let c = self.conn().await?;
        self.timed(async move {
            let row = c.one(self.mode, sql, params).await.map_err(classify)?;
            c.keep();
            Ok(row)
        })
        .await
    }

    /// As [`PgStore::query`], for a statement that answers many rows, sent in `mode`.
    async fn query_rows_in(
        &self,
        mode: StatementMode,
        sql: &str,
        params: &[&dyn Param],
    ) -> Result<Vec<Row>> {
        let c = self.conn().await?;
        self.timed(async move {
            let rows = c.rows(mode, sql, params).await.map_err(classify)?;
            c.keep();
            Ok(rows)
        })
        .await
    }

    /// As [`PgStore::query`], for a statement that returns no rows: how many rows it changed.
    pub(crate) async fn execute(&self, sql: &str, params: &[&dyn Param]) -> Result<u64> {
        let c = self.conn().await?;
        self.timed(async move {
            let n = c.changed(self.mode, sql, params).await.map_err(classify)?;
            c.keep();
            Ok(n)
        })
        .await
    }

    /// The highest applied schema version (0: none), read without any lock (a store opening on
    /// a current schema waits for no other instance).
    pub(crate) async fn schema_version(&self) -> Result<i32> {
        let c = self.conn().await?;
        self.timed(async move {
            let exists = c
                .one(
                    self.mode,
                    "SELECT to_regclass('idemdb_migrations') IS NOT NULL",
                    &[],
                )
                .await
                .map_err(classify)?
                .is_some_and(|r| r.get::<_, bool>(0));
            let version = if exists {
                c.one(
                    self.mode,
                    "SELECT COALESCE(max(version), 0) FROM idemdb_migrations",
                    &[],
                )
                .await
                .map_err(classify)?
                .map_or(0, |r| r.get::<_, i32>(0))
            } else {
                0
            };
            c.keep();
            Ok(version)
        })
        .await
    }

    /// Applies every migration above the current version, up to `to` (default: all), each in
    /// its own transaction under the schema's advisory lock. Returns the versions applied. When
    /// the schema is already there, no lock is taken.
    pub(crate) async fn migrate_up(&self, to: Option<i32>) -> Result<Vec<i32>> {
        let target = to.unwrap_or_else(migrations::current_version);
        if self.schema_version().await? >= target {
            return Ok(Vec::new());
        }
        let mut c = self.conn().await?;
        let mut applied = Vec::new();
        for m in migrations::MIGRATIONS {
            if m.version > target {
                break;
            }
            if self.run_step(&mut c, m, true).await? {
                applied.push(m.version);
            }
        }
        c.keep();
        Ok(applied)
    }

    /// Undoes the applied migrations above version `to` (0: all of them, dropping every idemdb
    /// table and its data), newest first. Returns the versions undone.
    pub(crate) async fn migrate_down(&self, to: i32) -> Result<Vec<i32>> {
        if self.schema_version().await? <= to {
            return Ok(Vec::new());
        }
        let mut c = self.conn().await?;
        let mut undone = Vec::new();
        for m in migrations::MIGRATIONS.iter().rev() {
            if m.version <= to {
                break;
            }
            if self.run_step(&mut c, m, false).await? {
                undone.push(m.version);
            }
        }
        c.keep();
        Ok(undone)
    }

    /// The applied migrations: (version, name, applied at, as text).
    pub(crate) async fn migration_status(&self) -> Result<Vec<(i32, String, String)>> {
        if self.schema_version().await? == 0 {
            return Ok(Vec::new());
        }
        let c = self.conn().await?;
        let rows = c
            .rows(
                self.mode,
                "SELECT version, name, applied_at::text FROM idemdb_migrations ORDER BY version",
                &[],
            )
            .await
            .map_err(classify)?;
        c.keep();
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    /// Runs one migration step, up or down, in its own transaction under the advisory lock of
    /// the schema it changes (`current_schema()`: stores in other schemas of the server never
    /// wait for each other); whether it ran (not when the bookkeeping says it is already
    /// applied, or not applied). The wait for the lock is bounded by the migration lock timeout
    /// (its own error, [`Error::MigrationTimeout`]), not by the statement timeout, and the
    /// step's statements by nothing but the server.
    async fn run_step(&self, c: &mut Conn, m: &migrations::Migration, up: bool) -> Result<bool> {
        let wait = self.migration_lock_timeout;
        let locked = |e: tokio_postgres::Error| {
            if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
                Error::MigrationTimeout { waited: wait }
            } else {
                classify(e)
            }
        };
        let tx = c.transaction().await.map_err(classify)?;
        tx.batch_execute(&format!(
            "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = {}",
            wait.as_millis().max(1)
        ))
        .await
        .map_err(classify)?;
        tx.changed(self.mode, migrations::LOCK, &[&migrations::LOCK_CLASS])
            .await
            .map_err(locked)?;
        tx.batch_execute(migrations::BOOKKEEPING)
            .await
            .map_err(locked)?;
        let applied = tx
            .one(
                self.mode,
                "SELECT 1 FROM idemdb_migrations WHERE version = $1",
                &[&m.version],
            )
            .await
            .map_err(classify)?
            .is_some();
        let runs = applied != up;
        if runs && up {
            tx.batch_execute(m.up).await.map_err(locked)?;
            tx.changed(
                self.mode,
                "INSERT INTO idemdb_migrations (version, name) VALUES ($1, $2)",
                &[&m.version, &m.name],
            )
            .await
            .map_err(classify)?;
        } else if runs {
            tx.batch_execute(m.down).await.map_err(locked)?;
            tx.changed(
                self.mode,
                "DELETE FROM idemdb_migrations WHERE version = $1",
                &[&m.version],
            )
            .await
            .map_err(classify)?;
        }
        tx.commit().await.map_err(classify)?;
        Ok(runs)
    }

    pub(crate) async fn now(&self) -> Result<Millis> {
        let row = self.query(statements::NOW, &[&self.now_param()]).await?;
        let t = row.ok_or_else(|| Error::Engine("PostgreSQL: now() returned no row".into()))?;
        from_i64("database time", t.get(0))
    }
}

/// The URL without its password, for messages.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((creds, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match creds.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}
