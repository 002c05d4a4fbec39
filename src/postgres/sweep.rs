//! The sweep: deleting what expired, in batches, and the sweeper task that runs it every
//! `Config::sweep_interval` (the embedded store's counterpart is `embedded/sweep.rs`).
//! Invariants: a row is deleted only once it expired by the database's clock (a request or
//! message row) or can never be live again (a reservation no lease can renew, an entity
//! placeholder of version 0); a batch skips rows another transaction holds (`SKIP LOCKED`), so
//! sweeps of several instances never wait for each other or for a claim in flight; no index
//! decides which request rows expired (migration 9): the sweep reads the table's pages range by
//! range from a cursor every instance shares, and a range is passed only once no expired row it
//! could delete is left on it; the sweeper holds the store only while it sweeps (weak handles
//! otherwise), so it ends when the last handle is dropped.

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

/// Pages of `idemdb_requests` one statement of the sweep reads: 8 MiB at PostgreSQL's default
/// block size.
const RANGE_PAGES: i64 = 1_024;

/// Rows one statement of the sweep deletes at most.
const BATCH: usize = 1_000;

/// The sweeper: every `every`, a lap of the walk over the request table when one is due, then
/// batches of reservations and placeholders until one comes back short; it ends when the last
/// handle of the store is dropped. A lap is due when none is under way and the last one (by any
/// instance) ended at least half an interval ago, or when the one under way stopped moving (its
/// walker gone: [`stalled`]); a lap another instance is walking is left to it. Its ranges are
/// spread over half an interval, never faster than `pages_per_second` (a steady load rather
/// than a burst). A failed statement (database unavailable) ends the pass; the lap goes on from
/// the shared cursor.
pub(super) async fn sweep_in_background(
    pg: Weak<PgStore>,
    metrics: Weak<Metrics>,
    every: Duration,
    pages_per_second: u32,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate: sweep one interval after opening
    loop {
        tick.tick().await;
        let (Some(pg), Some(metrics)) = (pg.upgrade(), metrics.upgrade()) else {
            return;
        };
        let op = Op::unkeyed(OpKind::Sweep);
        let r = pg.sweep_lap(every, pages_per_second).await;
        if let Ok(n) = &r {
            metrics.swept.add(*n as u64);
            op.count(*n as u64);
        }
        let _ = op.end_with(r, |_| "swept");
    }
}

/// The wait after each range of a lap: the lap spread over half of `every`, but no faster than
/// `pages_per_second`.
fn pace(every: Duration, pages: i64, pages_per_second: u32) -> Duration {
    let ranges = u32::try_from((pages / RANGE_PAGES).max(1)).unwrap_or(u32::MAX);
    let spread = every / 2 / ranges;
    let floor = Duration::from_secs_f64(RANGE_PAGES as f64 / f64::from(pages_per_second.max(1)));
    spread.max(floor)
}

/// Whether a lap under way stopped moving: its cursor has not moved for ten of its ranges' waits
/// and at least a minute (a walker that crashed or lost the database), so another sweeper takes
/// it over.
fn stalled(moved_ms: i64, pace: Duration) -> bool {
    let bound = (pace * 10).max(Duration::from_secs(60));
    moved_ms >= i64::try_from(bound.as_millis()).unwrap_or(i64::MAX)
}

/// The sweep's shared cursor, as [`statements::SWEEP_CURSOR`] answers it.
struct Cursor {
    next_page: i64,
    laps: i64,
    /// Milliseconds since the last lap ended.
    since_ms: i64,
    /// The table's pages when it was read.
    pages: i64,
    /// Milliseconds since the cursor last moved.
    moved_ms: i64,
}

/// How far a walk goes.
#[derive(Clone, Copy)]
enum Walk {
    /// Round the whole table once, from wherever the cursor is.
    Circle,
    /// Until the cursor comes round to page 0 (by this instance or another).
    LapEnd,
}

impl PgStore {
    /// Deletes up to `limit` expired rows, walking the table once round from the shared cursor
    /// (fewer than `limit`: none that this walk could delete was left), then up to `limit`
    /// reservations and placeholders that can never be live again; how many were deleted.
    pub(crate) async fn sweep(&self, limit: usize) -> Result<usize> {
        let n = self.walk(limit, Walk::Circle, Duration::ZERO).await?;
        Ok(n + self.sweep_leftovers(limit).await?)
    }

    /// The sweeper's pass (see [`sweep_in_background`]).
    async fn sweep_lap(&self, every: Duration, pages_per_second: u32) -> Result<usize> {
        let c = self.cursor().await?;
        let half = i64::try_from(every.as_millis() / 2).unwrap_or(i64::MAX);
        let pace = pace(every, c.pages, pages_per_second);
        let due = if c.next_page == 0 {
            c.since_ms >= half
        } else {
            stalled(c.moved_ms, pace)
        };
        let mut n = 0;
        if due {
            n += self.walk(usize::MAX, Walk::LapEnd, pace).await?;
        }
        loop {
            let k = self.sweep_leftovers(BATCH).await?;
            n += k;
            if k < BATCH {
                return Ok(n);
            }
        }
    }

    /// Up to `limit` reservations whose lease can never be live again, and as many version-0
    /// entity placeholders.
    async fn sweep_leftovers(&self, limit: usize) -> Result<usize> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let now = self.now_param();
        let n = self
            .execute(statements::SWEEP_RESERVATIONS, &[&limit, &now])
            .await?
            + self
                .execute(statements::SWEEP_PLACEHOLDERS, &[&limit])
                .await?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Deletes expired request rows range by range from the shared cursor, until `limit` were
    /// deleted or the walk ends, waiting `pace` between ranges; a range that may hold more than a
    /// batch is swept again before the cursor moves past it.
    async fn walk(&self, limit: usize, walk: Walk, pace: Duration) -> Result<usize> {
        let now = self.now_param();
        let mut c = self.cursor().await?;
        let (laps, pages) = (c.laps, c.pages);
        let ended = |c: &Cursor, walked: i64| match walk {
            Walk::Circle => walked >= pages,
            Walk::LapEnd => c.laps != laps,
        };
        let (mut walked, mut deleted) = (0_i64, 0_usize);
        while deleted < limit && !ended(&c, walked) {
            let first = c.next_page;
            let want = (limit - deleted).min(BATCH);
            if first < c.pages {
                let batch = i64::try_from(want).unwrap_or(i64::MAX);
                let n = self
                    .execute(
                        statements::SWEEP_PAGES,
                        &[&first, &RANGE_PAGES, &batch, &now],
                    )
                    .await?;
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                deleted += n;
                if n >= want {
                    continue;
                }
            }
            let end = first.saturating_add(RANGE_PAGES);
            // The table's pages this range covered (none past its end).
            walked += (c.pages.min(end) - first).max(0);
            let row = self
                .query(statements::SWEEP_ADVANCE, &[&first, &end, &now])
                .await?;
            c = cursor_of(row)?;
            // No wait after the walk's last range: the pass ends, and lets go of the store.
            if !pace.is_zero() && !ended(&c, walked) {
                tokio::time::sleep(pace).await;
            }
        }
        Ok(deleted)
    }

    /// The shared cursor, read.
    async fn cursor(&self) -> Result<Cursor> {
        let row = self
            .query(statements::SWEEP_CURSOR, &[&self.now_param()])
            .await?;
        cursor_of(row)
    }
}

/// The cursor's columns, from [`statements::SWEEP_CURSOR`] or [`statements::SWEEP_ADVANCE`].
fn cursor_of(row: Option<tokio_postgres::Row>) -> Result<Cursor> {
    let bad = |why: String| crate::error::corrupted("the sweep's cursor (idemdb_sweep)", why);
    let row = row.ok_or_else(|| bad("its row is missing".into()))?;
    let col = |i: usize| row.try_get::<_, i64>(i).map_err(|e| bad(e.to_string()));
    Ok(Cursor {
        next_page: col(0)?,
        laps: col(1)?,
        since_ms: col(2)?,
        pages: col(3)?,
        moved_ms: col(4)?,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{pace, stalled};

    #[test]
    fn a_lap_is_spread_over_half_an_interval_but_never_faster_than_the_rate() {
        let minute = Duration::from_secs(60);
        // 10 ranges: 3 s each spreads the lap over 30 s (slower than 1,000 pages a second).
        assert_eq!(pace(minute, 10 * 1_024, 1_000), Duration::from_secs(3));
        // 619,006 pages (11.2 million rows): the rate decides, 1.024 s a range (about 10 minutes).
        assert_eq!(pace(minute, 619_006, 1_000), Duration::from_millis(1_024));
        // An empty or one-range table: one range, half an interval.
        assert_eq!(pace(minute, 0, 1_000), Duration::from_secs(30));
    }

    #[test]
    fn a_lap_whose_cursor_stopped_for_a_minute_is_taken_over() {
        let pace = Duration::from_millis(1_024);
        assert!(!stalled(59_999, pace));
        assert!(stalled(60_000, pace));
        assert!(!stalled(299_999, Duration::from_secs(30)));
        assert!(stalled(300_000, Duration::from_secs(30)));
    }
}
