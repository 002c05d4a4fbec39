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
//!   [`Error::Unavailable`](crate::Error::Unavailable): nothing is replayed or acquired from it.
//!   Only this module imports `tokio_postgres` and `deadpool_postgres`.

mod causal;
mod commit;
mod entities;
mod errors;
mod fences;
mod group_commit;
mod lost_claims;
mod migrate;
pub(crate) mod migrations;
mod offsets;
mod pool;
pub(crate) mod replay_tier;
mod requests;
pub(crate) use requests::{Checked, ClaimAsk, ReadFirst};
mod rows;
mod send;
mod settings;
mod statements;
mod stats;
mod store;
mod sweep;
mod tls;
mod transaction;
mod unique;
mod waits;
pub(crate) use waits::Waited;

pub(crate) use crate::config::fleet::Settings;
pub(crate) use causal::CausalKind;
pub use stats::PostgresStats;
pub use transaction::{SqlTransaction, SqlValue};

use std::sync::Arc;

use store::PgStore;

use crate::clock::Millis;
use crate::config::{Config, OnPostgres};
use crate::error::Result;
use crate::telemetry::counters::Metrics;

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
            tokio::spawn(sweep::sweep_in_background(
                Arc::downgrade(&sql),
                Arc::downgrade(&metrics),
                every,
                settings.sweep_pages_per_second,
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
