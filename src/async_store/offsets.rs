//! Offset watermarks through the async API. Invariant: each method means what the embedded
//! store's method of the same name means ([`Store::mark_processed`](crate::Store::mark_processed)
//! and the others), with the same argument checks and the same limit, on either backend.

use super::{dispatch, AsyncStore};
use crate::error::Result;
use crate::offsets::OffsetWindow;

impl AsyncStore {
    /// Marks `offset` of a partition processed, in any order, as
    /// [`Store::mark_processed`](crate::Store::mark_processed): a mark that would keep more than
    /// [`Config::max_offset_gaps`](crate::Config::max_offset_gaps) offsets above the watermark is
    /// refused with [`InvalidInput::LimitReached`](crate::InvalidInput::LimitReached).
    pub async fn mark_processed(
        &self,
        group: impl AsRef<[u8]>,
        topic: impl AsRef<[u8]>,
        partition: u32,
        offset: u64,
    ) -> Result<()> {
        let (group, topic) = (group.as_ref(), topic.as_ref());
        dispatch!(
            &self.backend,
            mark_processed(group, topic, partition, offset).await
        )
    }

    /// Declares every offset at or below `watermark` processed (a monotone maximum), as
    /// [`Store::commit_watermark`](crate::Store::commit_watermark).
    pub async fn commit_watermark(
        &self,
        group: impl AsRef<[u8]>,
        topic: impl AsRef<[u8]>,
        partition: u32,
        watermark: u64,
    ) -> Result<()> {
        let (group, topic) = (group.as_ref(), topic.as_ref());
        dispatch!(
            &self.backend,
            commit_watermark(group, topic, partition, watermark).await
        )
    }

    /// The processed offsets of a partition, as
    /// [`Store::offset_window`](crate::Store::offset_window).
    pub async fn offset_window(
        &self,
        group: impl AsRef<[u8]>,
        topic: impl AsRef<[u8]>,
        partition: u32,
    ) -> Result<OffsetWindow> {
        let (group, topic) = (group.as_ref(), topic.as_ref());
        dispatch!(&self.backend, offset_window(group, topic, partition).await)
    }

    /// Whether `offset` of a partition is processed (exact), as
    /// [`Store::is_processed`](crate::Store::is_processed).
    pub async fn is_processed(
        &self,
        group: impl AsRef<[u8]>,
        topic: impl AsRef<[u8]>,
        partition: u32,
        offset: u64,
    ) -> Result<bool> {
        Ok(self
            .offset_window(group, topic, partition)
            .await?
            .contains(offset))
    }
}
