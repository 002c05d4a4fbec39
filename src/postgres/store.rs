//! A store on PostgreSQL ([`PgStore`]): its connection pool, its id and settings, the queues and
//! blocks its calls share, and the calls every statement goes through (`conn`, `timed`, `query`,
//! `execute`). Invariants: a statement runs on a connection the pool lends for that one call,
//! which goes back to the pool only when the call finished cleanly (`pool.rs`); every statement
//! is bounded by the statement timeout ([`PgStore::timed`]), so a database that does not answer
//! is [`Error::Unavailable`], never a hang; every driver error is classified once, as it comes
//! out of the driver (`errors.rs`); the time a statement decides by is the database's
//! (`clock_timestamp()`), or in tests only the clock override it is passed as a parameter. The
//! statements of each concept are `impl PgStore` blocks in that concept's file; running the
//! migrations is in `migrate.rs`.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres::Row;

use super::errors::classify;
use super::fences::{self, epoch_of};
use super::migrations;
use super::pool::{self, lend, Conn};
use super::rows::from_i64;
use super::send::{Param, Session};
use super::{group_commit, lost_claims, requests, statements, waits, Settings};
use crate::clock::{Clock, Millis};
use crate::config::fleet::StatementMode;
use crate::error::{Error, Result};

/// A store on PostgreSQL: a connection pool, the store's id and its settings.
pub(crate) struct PgStore {
    pub(super) pool: Pool,
    /// How statements are sent (named prepared, or unnamed for poolers).
    pub(super) mode: StatementMode,
    pub(super) store_id: u128,
    statement_timeout: Duration,
    /// How long opening waits for another instance's migration.
    pub(super) migration_lock_timeout: Duration,
    /// The highest fencing epoch (the server's timeline) this store has seen in a token: a
    /// higher one in a new token means the database failed over (see [`epoch_of`]).
    pub(super) epoch_seen: std::sync::atomic::AtomicU64,
    /// How many times `epoch_seen` went up.
    failovers_seen: std::sync::atomic::AtomicU64,
    /// Tests only: a clock whose reading replaces the database's (the conformance suite's
    /// manual clock). `None` in every real store.
    clock: Option<Arc<dyn Clock>>,
    /// Whether concurrent claims and lease ends are coalesced into one statement
    /// (`group_commit.rs`), and their queues.
    pub(super) coalescing: bool,
    pub(super) claims: group_commit::Coalescer<requests::Claims>,
    pub(super) holders: group_commit::Coalescer<requests::Holders>,
    /// Whether new keys' claims commit without waiting for their flush
    /// (`Config::buffered_claims`), and the fencing tokens drawn for them (`fences.rs`).
    pub(super) buffered: bool,
    pub(super) fences: fences::Fences,
    /// How often recent claims found their row: whether the next one reads first.
    pub(super) hits: requests::Hits,
    /// Claims waiting for a lease to end, and the listening connection that wakes them.
    pub(super) waits: waits::Waits,
    /// Claim nonces, and the claims whose answer was lost (`lost_claims.rs`).
    pub(super) lost_claims: lost_claims::LostClaims,
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
            claims: group_commit::Coalescer::new(s.coalesce_limits),
            holders: group_commit::Coalescer::new(s.coalesce_limits),
            buffered: s.buffered_claims,
            fences: fences::Fences::default(),
            hits: requests::Hits::default(),
            waits: waits::Waits::new(listen),
            lost_claims: lost_claims::LostClaims::default(),
        })
    }

    /// Notes the epoch of a token just drawn: a higher one than this store saw before means the
    /// database failed over (a standby was promoted) since.
    pub(super) fn note_epoch(&self, fence: u64) {
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
    pub(super) async fn timed<T>(
        &self,
        f: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
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
    pub(super) fn now_param(&self) -> Option<i64> {
        self.clock
            .as_ref()
            .map(|c| i64::try_from(c.now_millis()).unwrap_or(i64::MAX))
    }

    /// Runs the prepared statement `sql` on a pooled connection, bounded by the timeouts; its
    /// rows (every statement here returns at most one).
    pub(super) async fn query(&self, sql: &str, params: &[&dyn Param]) -> Result<Option<Row>> {
        let c = self.conn().await?;
        self.timed(async move {
            let row = c.one(self.mode, sql, params).await.map_err(classify)?;
            c.keep();
            Ok(row)
        })
        .await
    }

    /// As [`PgStore::query`], for a statement that answers many rows, sent in `mode`.
    pub(super) async fn query_rows_in(
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
    /// The database server's time (in tests, the clock override's).
    pub(crate) async fn now(&self) -> Result<Millis> {
        let row = self.query(statements::NOW, &[&self.now_param()]).await?;
        let t = row.ok_or_else(|| Error::Engine("PostgreSQL: now() returned no row".into()))?;
        from_i64("database time", t.get(0))
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
