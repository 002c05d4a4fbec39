//! The sweep: deleting what expired, in batches, and the sweeper task that runs it every
//! `Config::sweep_interval` (the embedded store's counterpart is `embedded/sweep.rs`).
//! Invariants: a row is deleted only once it expired by the database's clock (a request or
//! message row) or can never be live again (a reservation no lease can renew, an entity
//! placeholder of version 0); a batch skips rows another transaction holds (`SKIP LOCKED`), so
//! sweeps of several instances never wait for each other or for a claim in flight; the sweeper
//! holds the store only while it sweeps (weak handles otherwise), so it ends when the last
//! handle is dropped.

use std::sync::Weak;
use std::time::Duration;

use super::statements;
use super::store::PgStore;
use super::Postgres;
use crate::error::Result;
use crate::telemetry::counters::Metrics;
use crate::telemetry::spans::{Op, OpKind};

impl Postgres {
    /// Deletes up to `limit` expired rows, in its span and counted.
    pub(crate) async fn sweep(&self, limit: usize) -> Result<usize> {
        sweep_counted(&self.sql, &self.metrics, limit).await
    }
}

/// A sweep, in its span and counted.
async fn sweep_counted(pg: &PgStore, metrics: &Metrics, limit: usize) -> Result<usize> {
    let op = Op::unkeyed(OpKind::Sweep);
    let r = pg.sweep(limit).await;
    if let Ok(n) = &r {
        metrics.swept.add(*n as u64);
        op.count(*n as u64);
    }
    op.end_with(r, |_| "swept")
}

/// The sweeper: every `every`, batches of expired rows are deleted until a batch comes back
/// short; it ends when the last handle of the store is dropped. A failed batch (database
/// unavailable) waits for the next tick. Instances that sweep at the same moment skip each
/// other's rows (`SKIP LOCKED`).
pub(super) async fn sweep_in_background(
    pg: Weak<PgStore>,
    metrics: Weak<Metrics>,
    every: Duration,
) {
    const BATCH: usize = 1_000;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate: sweep one interval after opening
    loop {
        tick.tick().await;
        let (Some(pg), Some(metrics)) = (pg.upgrade(), metrics.upgrade()) else {
            return;
        };
        while let Ok(BATCH) = sweep_counted(&pg, &metrics, BATCH).await {}
    }
}

impl PgStore {
    /// Deletes up to `limit` expired rows, oldest expiry first, skipping rows another
    /// transaction holds; how many were deleted.
    pub(crate) async fn sweep(&self, limit: usize) -> Result<usize> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let now = self.now_param();
        let n = self.execute(statements::SWEEP, &[&limit, &now]).await?
            + self
                .execute(statements::SWEEP_RESERVATIONS, &[&limit, &now])
                .await?
            + self
                .execute(statements::SWEEP_PLACEHOLDERS, &[&limit])
                .await?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}
