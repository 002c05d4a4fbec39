//! Fencing tokens: what one is made of ([`epoch_of`]: the server's timeline above the
//! sequence's number) and, for buffered claims, the blocks they are reserved in: the PostgreSQL
//! counterpart of the embedded store's block reservation (`embedded/fences.rs`; docs/design.md,
//! "One WAL flush per request"). A buffered claim commits without waiting for its WAL flush, so
//! a server crash can lose it, and with it the sequence's WAL record of any token it drew
//! itself: after recovery the sequence would hand that token out again. So a buffered claim
//! never draws its own token; it takes one from a block this store drew earlier. Invariants:
//! - a token is handed out only after the statement that drew its block has committed, and that
//!   commit waited for its WAL flush: a block draws more values than the sequence logs ahead
//!   (32), so `nextval` WAL-logged in it, the statement has a transaction id, and its commit is
//!   flushed whatever the session's `synchronous_commit` (`local` for that transaction when the
//!   role, database or server set it `off`); every token in the block is covered by a sequence
//!   record of that flushed transaction, so no crash makes the sequence hand one out again;
//! - the tokens one store hands out increase: they are taken in order, one that a claim did not
//!   use goes back only if no later one was taken meanwhile (else it is skipped), and once a
//!   claim acquired with a token drawn past the block (a takeover's), the block's tokens below
//!   it are skipped;
//! - a token is used only on the timeline its block was drawn on: the claim statement compares
//!   it with the server's and, on a newer timeline (a failover since the draw), draws the claim's
//!   own token instead (flushed); the answer's newer timeline then drops the block here. So
//!   every token handed out after a failover is greater than every one handed out before, by
//!   any store;
//! - a block is used for at most [`MAX_AGE`] after its draw: a token handed out by one instance
//!   is below the tokens other instances drew since its block, so a key whose record was
//!   forgotten (or expired, or whose buffered claim a server crash lost) and claimed again
//!   through another instance may get a token below its former holder's only within that window (a key with a row always gets a larger one: a
//!   takeover draws its own).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use super::statements;
use super::store::PgStore;
use crate::error::Result;

/// A fencing token is `epoch << FENCE_EPOCH_SHIFT | n` (migration 4): `epoch` the server's WAL
/// timeline when the token was drawn, `n` from the `idemdb_fence` sequence.
const FENCE_EPOCH_SHIFT: u32 = 47;

/// The epoch (the server's timeline) a fencing token was drawn in (0: before migration 4).
pub(super) fn epoch_of(fence: u64) -> u64 {
    fence >> FENCE_EPOCH_SHIFT
}

/// Tokens drawn at a time: more than the 32 the sequence logs ahead (see the invariants), and
/// few enough that a store that stops wastes little (one draw per 256 buffered claims, a round
/// trip and a flushed commit).
pub(crate) const BLOCK: i32 = 256;

/// How long a block is used after its draw (an idle instance draws at most one block per
/// `MAX_AGE` it claims in).
pub(crate) const MAX_AGE: Duration = Duration::from_secs(1);

/// The tokens a store has drawn and not yet handed out.
#[derive(Default)]
pub(crate) struct Fences {
    block: tokio::sync::Mutex<Block>,
    /// The largest token a claim of this store acquired with (its block's, or one drawn past
    /// the block by a takeover): the block never hands out one at or below it.
    issued: AtomicI64,
}

#[derive(Default)]
struct Block {
    left: VecDeque<i64>,
    /// The token taken last, while nothing was taken after it: it may go back.
    last: Option<i64>,
    /// When the block was drawn.
    drawn: Option<Instant>,
}

impl PgStore {
    /// A token for a buffered claim: the next of this store's block, after drawing a new block
    /// if it is empty or older than the newest timeline seen.
    pub(crate) async fn take_fence(&self) -> Result<i64> {
        let mut b = self.fences.block.lock().await;
        let seen = self.epoch_seen.load(Ordering::Relaxed);
        let older = |t: &i64| epoch_of(u64::try_from(*t).unwrap_or(0)) < seen;
        if b.left.front().is_some_and(older) || b.drawn.is_none_or(|at| at.elapsed() > MAX_AGE) {
            b.left.clear();
        }
        let issued = self.fences.issued.load(Ordering::Relaxed);
        while b.left.front().is_some_and(|&t| t <= issued) {
            b.left.pop_front();
        }
        if b.left.is_empty() {
            let rows = self
                .query_rows_in(self.mode, statements::FENCE_BLOCK, &[&BLOCK])
                .await?;
            let mut drawn = Vec::with_capacity(rows.len());
            for row in &rows {
                drawn.push(
                    row.try_get::<_, i64>(0).map_err(|e| {
                        crate::error::corrupted("fencing token block", e.to_string())
                    })?,
                );
            }
            // In increasing order (the statement's `ORDER BY`).
            if let Some(&first) = drawn.first() {
                self.note_epoch(u64::try_from(first).unwrap_or(0));
            }
            b.left.extend(drawn);
            b.drawn = Some(Instant::now());
        }
        let token = b.left.pop_front().ok_or_else(|| {
            crate::error::corrupted("fencing token block", "the draw returned no token")
        })?;
        b.last = Some(token);
        Ok(token)
    }

    /// Notes a token a claim acquired with (its block's, or one drawn past the block): the block
    /// never hands out one below it afterwards.
    pub(crate) fn issued(&self, fence: u64) {
        if self.buffered {
            let fence = i64::try_from(fence).unwrap_or(i64::MAX);
            self.fences.issued.fetch_max(fence, Ordering::Relaxed);
        }
    }

    /// Gives back a token a claim did not use (it found a row): it is handed out next, unless a
    /// later one was taken meanwhile (then it is skipped; tokens only ever increase).
    pub(crate) fn untake_fence(&self, token: i64) {
        if let Ok(mut b) = self.fences.block.try_lock() {
            if b.last == Some(token) {
                b.left.push_front(token);
                b.last = None;
            }
        }
    }
}
