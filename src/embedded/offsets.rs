//! Offset watermarks per (group, topic, partition) on the embedded store: each mark and watermark
//! is a RocksDB merge of a window, folded by `offsets::merge_offset_operands`. Invariant: the
//! stored window is the join of every update ever merged: `next` (every offset below it is
//! processed) is the maximum seen, the set holds processed offsets at or above `next`, and
//! normalisation moves `next` past any offsets that became contiguous. Join is commutative,
//! associative and idempotent, so updates are blind merges, and storage is O(out-of-order window),
//! not O(messages): a mark that would take the window past `Config::max_offset_gaps` processed
//! offsets above the watermark is refused, so a stored window always stays readable.

use std::collections::BTreeSet;

use crate::embedded::engine::Cf;
use crate::embedded::Store;
use crate::error::Result;
use crate::format::{self, entity_key, Kind};
use crate::offsets::{encode, window_full, OffsetWindow};

impl Store {
    /// Marks `offset` of a partition processed, in any order (a merge, after a read under the
    /// partition's lock stripe that refuses, with [`crate::InvalidInput::LimitReached`], a mark
    /// that would keep more than [`crate::Config::max_offset_gaps`] offsets above the watermark).
    pub fn mark_processed(
        &self,
        group: impl AsRef<[u8]>,
        topic: impl AsRef<[u8]>,
        partition: u32,
        offset: u64,
    ) -> Result<()> {
        let (group, topic) = (group.as_ref(), topic.as_ref());
        self.core.check_names(group, topic)?;
        let key = partition_key(group, topic, partition);
        let _g = self.core.lock(&key);
        let mut w: OffsetWindow = self.core.load_sealed("offset window", &key)?;
        if w.contains(offset) {
            return Ok(());
        }
        w.join(&OffsetWindow::processed(offset));
        let limit = self.config().common.max_offset_gaps;
        if w.above.len() > limit {
            return Err(window_full(limit));
        }
        self.merge_window(&key, &OffsetWindow::processed(offset))
    }

    /// Declares every offset at or below `watermark` processed (a monotone maximum).
    pub fn commit_watermark(
        &self,
        group: impl AsRef<[u8]>,
        topic: impl AsRef<[u8]>,
        partition: u32,
        watermark: u64,
    ) -> Result<()> {
        let mut w = OffsetWindow {
            next: watermark.saturating_add(1),
            above: BTreeSet::new(),
        };
        if watermark == u64::MAX {
            // `next` saturates: the last offset is kept in the set instead.
            w.above.insert(u64::MAX);
        }
        let (group, topic) = (group.as_ref(), topic.as_ref());
        self.core.check_names(group, topic)?;
        self.merge_window(&partition_key(group, topic, partition), &w)
    }

    /// The processed offsets of a partition.
    pub fn offset_window(
        &self,
        group: impl AsRef<[u8]>,
        topic: impl AsRef<[u8]>,
        partition: u32,
    ) -> Result<OffsetWindow> {
        let (group, topic) = (group.as_ref(), topic.as_ref());
        self.core.check_names(group, topic)?;
        let mut w: OffsetWindow = self
            .core
            .load_sealed("offset window", &partition_key(group, topic, partition))?;
        w.normalise();
        Ok(w)
    }

    /// Whether `offset` of a partition is processed (exact).
    pub fn is_processed(
        &self,
        group: impl AsRef<[u8]>,
        topic: impl AsRef<[u8]>,
        partition: u32,
        offset: u64,
    ) -> Result<bool> {
        Ok(self
            .offset_window(group, topic, partition)?
            .contains(offset))
    }

    fn merge_window(&self, key: &[u8], w: &OffsetWindow) -> Result<()> {
        let mut b = self.core.engine().batch();
        b.merge(Cf::Versions, key, &encode(w)?);
        self.core.engine().write(b)
    }
}

fn partition_key(group: &[u8], topic: &[u8], partition: u32) -> Vec<u8> {
    let id = format::composite(&[topic, &partition.to_be_bytes()]);
    entity_key(Kind::Offsets, group, &id)
}
