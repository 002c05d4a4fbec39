//! Offset windows per (group, topic, partition), the vocabulary and the code both backends share:
//! the public [`OffsetWindow`], its join and normalisation, the embedded store's encoding and
//! merge operator (`merge_offset_operands`), and the refusal of a mark past the limit
//! (`window_full`). Invariants: join is commutative, associative and idempotent (the larger
//! `next`, the union of the offsets above it), and normalisation moves `next` past every offset
//! that became contiguous, so a window is the join of every mark and watermark whatever their
//! order, on either backend; `next` never counts past `u64::MAX` (that offset stays in the set);
//! the merge operator is total and deterministic (it keeps what it cannot read, never fails, never
//! reads the clock).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::format::{self};

/// The processed offsets of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetWindow {
    pub(crate) next: u64,
    pub(crate) above: BTreeSet<u64>,
}

impl OffsetWindow {
    /// The offsets processed above the watermark (out of order), ascending.
    pub fn processed_above(&self) -> impl Iterator<Item = u64> + '_ {
        self.above.iter().copied()
    }

    /// The committed watermark: every offset at or below it is processed (`None`: not even 0).
    pub fn watermark(&self) -> Option<u64> {
        self.next.checked_sub(1)
    }
    /// Whether `offset` is processed (exact).
    pub fn contains(&self, offset: u64) -> bool {
        offset < self.next || self.above.contains(&offset)
    }
    /// How many processed offsets are kept above the watermark (the out-of-order window;
    /// bounded by [`crate::Config::max_offset_gaps`]).
    pub fn out_of_order_len(&self) -> usize {
        self.above.len()
    }
    /// The old name of [`OffsetWindow::out_of_order_len`] (it counts processed offsets, not gaps).
    #[deprecated(since = "0.1.0", note = "use `out_of_order_len`")]
    pub fn pending_gaps_len(&self) -> usize {
        self.above.len()
    }

    /// A window from its parts as another backend stores them, normalised.
    #[cfg(feature = "postgres")]
    pub(crate) fn from_parts(next: u64, above: BTreeSet<u64>) -> Self {
        let mut w = OffsetWindow { next, above };
        w.normalise();
        w
    }

    pub(crate) fn processed(offset: u64) -> Self {
        let mut s = Self::default();
        s.above.insert(offset);
        s.normalise();
        s
    }

    pub(crate) fn join(&mut self, other: &OffsetWindow) {
        self.next = self.next.max(other.next);
        self.above.extend(other.above.iter().copied());
        self.normalise();
    }

    pub(crate) fn normalise(&mut self) {
        self.above = self.above.split_off(&self.next);
        // `next` cannot count past `u64::MAX`: once processed, that offset stays in the set.
        while self.next < u64::MAX && self.above.remove(&self.next) {
            self.next += 1;
        }
    }
}

pub(crate) fn encode(w: &OffsetWindow) -> Result<Vec<u8>> {
    format::seal_bincode("offset window", w)
}

/// The offset-window merge: the join of the existing value and every operand; if one of them does
/// not decode, every input is kept unmerged (reads report the window as corrupted instead of
/// forgetting processed offsets, see `format::merge_sealed`). Total, deterministic, clock-free.
pub(crate) fn merge_offset_operands(existing: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8> {
    format::merge_sealed("offset window", existing, operands, OffsetWindow::join)
}

/// The refusal of a mark that would keep more than `limit` offsets above the watermark.
pub(crate) fn window_full(limit: usize) -> crate::Error {
    crate::InvalidInput::LimitReached {
        what: "offset window (processed offsets above the watermark)",
        limit,
        hint: "commit a watermark (Store::commit_watermark) or process the missing offsets first",
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(crate) fn window_closes_gaps() {
        let mut w = OffsetWindow::default();
        for o in [3, 1, 0, 5] {
            w.join(&OffsetWindow::processed(o));
        }
        assert_eq!(w.watermark(), Some(1));
        assert!(w.contains(3) && !w.contains(2) && !w.contains(4));
        w.join(&OffsetWindow::processed(2));
        w.join(&OffsetWindow::processed(4));
        assert_eq!((w.watermark(), w.out_of_order_len()), (Some(5), 0));
    }
}
