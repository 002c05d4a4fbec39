//! What a store on PostgreSQL holds, counted by the database (the operator's `idemdb stats
//! --postgres`). Invariant: one read-only statement; live and expired are told apart by the
//! database's clock, as every decision is.

use super::statements as sql;
use super::store::PgStore;
use crate::error::{corrupted, Result};

/// Counts of what a store on PostgreSQL holds ([`crate::AsyncStore::postgres_stats`]). Request
/// and message counts are of live rows (not expired); expired rows wait for the sweeper.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresStats {
    /// Request records pending (a lease held, or run out and not yet taken over).
    pub requests_pending: u64,
    /// Request records released for a retry.
    pub requests_released: u64,
    /// Request records completed (replayed to retries).
    pub requests_completed: u64,
    /// Request records failed terminally.
    pub requests_failed: u64,
    /// Consumer messages being processed (or whose worker's lease ran out).
    pub messages_pending: u64,
    /// Consumer messages released for redelivery.
    pub messages_released: u64,
    /// Consumer messages processed.
    pub messages_completed: u64,
    /// Consumer messages failed terminally, poisoned ones included.
    pub messages_failed: u64,
    /// Expired request and message rows waiting for the sweeper.
    pub expired_awaiting_sweep: u64,
    /// Live versioned entities.
    pub entities: u64,
    /// Deleted entities (tombstones keeping their version).
    pub entity_tombstones: u64,
    /// Unique reservation rows (live or freed by their lease's end, not yet overwritten).
    pub reservations: u64,
    /// Offset windows (one per group, topic and partition).
    pub offset_windows: u64,
    /// Causal entities and replica vectors.
    pub causal: u64,
    /// The idemdb tables' size on disk with their indexes and TOAST, in bytes.
    pub table_bytes: u64,
    /// This store's view of failovers: the fencing epoch (the server's WAL timeline) of the
    /// newest token it drew, 0 before its first claim.
    pub fencing_epoch: u64,
    /// How many times this store saw the epoch go up (a standby promoted since it opened).
    pub failovers_seen: u64,
    /// This store's statements that carried more than one call (coalesced claims and lease
    /// ends, [`crate::Config::coalescing`]) since it opened.
    pub coalesced_statements: u64,
    /// The calls those statements carried.
    pub coalesced_calls: u64,
    /// Claims of this store whose answer was lost (the statement may have committed) and whose
    /// lease it then released, so that the key's next claim is a new attempt, not a takeover,
    /// since it opened.
    pub lost_claims_released: u64,
}

impl PgStore {
    pub(crate) async fn stats(&self) -> Result<PostgresStats> {
        let now = self.now_param();
        let row = self
            .query(sql::STATS, &[&now])
            .await?
            .ok_or_else(|| corrupted("idemdb stats", "no row"))?;
        let n = |i: usize| -> Result<u64> {
            let v: Option<i64> = row.get(i);
            u64::try_from(v.unwrap_or(0)).map_err(|_| corrupted("idemdb stats", "a negative count"))
        };
        let (failovers_seen, fencing_epoch) = self.failovers();
        let (coalesced_statements, coalesced_calls) = self.coalesced();
        Ok(PostgresStats {
            requests_pending: n(0)?,
            requests_released: n(1)?,
            requests_completed: n(2)?,
            requests_failed: n(3)?,
            messages_pending: n(4)?,
            messages_released: n(5)?,
            messages_completed: n(6)?,
            messages_failed: n(7)?,
            expired_awaiting_sweep: n(8)?,
            entities: n(9)?,
            entity_tombstones: n(10)?,
            reservations: n(11)?,
            offset_windows: n(12)?,
            causal: n(13)?,
            table_bytes: n(14)?,
            fencing_epoch,
            failovers_seen,
            coalesced_statements,
            coalesced_calls,
            lost_claims_released: self.lost_claims.released(),
        })
    }
}
