//! Fencing tokens on the embedded store, reserved in blocks: the counterpart of the PostgreSQL
//! store's `postgres/fences.rs`. Invariants: a token is handed out only after a high-water mark
//! at or above it was written (`meta/fence_high_water`, with the store's durability), so every
//! record carrying a token follows, in the WAL, a mark that covers it, and a reopened store,
//! which resumes above the mark, never issues a token again; the mark is written once per block
//! of [`FENCE_BLOCK`] tokens, not once per claim.

use std::sync::atomic::Ordering;

use crate::embedded::core::Core;
use crate::embedded::engine::{Cf, META_FENCE};
use crate::error::Result;

/// Fencing tokens are reserved in blocks of this many: one write of the high-water mark per
/// block instead of one per claim. A restart skips what is left of the block.
const FENCE_BLOCK: u64 = 1 << 16;

impl Core {
    /// Issues a fencing token. A token above the reserved block first reserves the next block:
    /// the high-water mark is written (with the store's durability) before the token is handed
    /// out, so every record carrying a token follows, in the WAL, a high-water mark at or above
    /// it, and a reopened store never issues it again.
    pub(crate) fn next_fence(&self) -> Result<u64> {
        let inner = self;
        let fence = inner.next_fence.fetch_add(1, Ordering::Relaxed);
        if fence <= inner.fence_reserved.load(Ordering::Acquire) {
            return Ok(fence);
        }
        let _reserving = inner.fence_reserving.lock();
        if fence > inner.fence_reserved.load(Ordering::Acquire) {
            let upto = fence.saturating_add(FENCE_BLOCK);
            let mut batch = inner.engine.batch();
            batch.merge(Cf::Meta, META_FENCE, &upto.to_be_bytes());
            inner.engine.write(batch)?;
            inner.fence_reserved.store(upto, Ordering::Release);
            // The reservation is durable through the WAL already; flushing it lets the WAL files
            // behind it be deleted (nothing else writes to `meta` for another block). A failed
            // request only delays that until `max_total_wal_size` forces the flush.
            let _ = inner.engine.flush_in_background(Cf::Meta);
        }
        Ok(fence)
    }
}
