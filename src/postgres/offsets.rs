//! Offset windows on PostgreSQL. Invariant: as on the embedded store, a partition's window only
//! grows (the join of every mark and watermark), `next` moves past offsets that became
//! contiguous, and a mark that would keep more than the limit above the watermark writes
//! nothing; each change is decided under the window row's lock (`idemdb_join_offsets`).

use std::collections::BTreeSet;

use super::statements as sql;
use super::store::PgStore;
use crate::error::{corrupted, Result};
use crate::offsets::{window_full, OffsetWindow};
use crate::postgres::Postgres;

fn number(what: &'static str, text: &str) -> Result<u64> {
    text.parse()
        .map_err(|_| corrupted(what, format!("{text:?} is not an unsigned 64-bit offset")))
}

impl PgStore {
    /// Joins the watermark `next` (every offset below it processed) and the offset `add` into a
    /// partition's window; with `limit`, refuses a mark that would keep more than that many
    /// offsets above the watermark.
    pub(crate) async fn join_offsets(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
        next: u64,
        add: Option<u64>,
        limit: Option<usize>,
    ) -> Result<()> {
        let partition = i32::from_ne_bytes(partition.to_ne_bytes());
        let next = next.to_string();
        let add = add.map(|a| a.to_string());
        let lim = limit.map(|l| i32::try_from(l).unwrap_or(i32::MAX));
        let row = self
            .query(
                sql::JOIN_OFFSETS,
                &[&group, &topic, &partition, &next, &add, &lim],
            )
            .await?
            .ok_or_else(|| corrupted("idemdb_join_offsets", "no row"))?;
        if row.get::<_, bool>("applied") {
            Ok(())
        } else {
            Err(window_full(limit.unwrap_or_default()))
        }
    }

    /// A partition's window (empty if nothing was ever marked).
    pub(crate) async fn offset_window(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
    ) -> Result<OffsetWindow> {
        let partition = i32::from_ne_bytes(partition.to_ne_bytes());
        let Some(row) = self
            .query(sql::OFFSET_WINDOW, &[&group, &topic, &partition])
            .await?
        else {
            return Ok(OffsetWindow::default());
        };
        let next = number("offset window", &row.get::<_, String>(0))?;
        let above = row
            .get::<_, Vec<String>>(1)
            .iter()
            .map(|t| number("offset window", t))
            .collect::<Result<BTreeSet<u64>>>()?;
        Ok(OffsetWindow::from_parts(next, above))
    }
}

/// What each offset call means, as on the embedded store: the same checks and the same limit.
impl Postgres {
    pub(crate) async fn mark_processed(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
        offset: u64,
    ) -> Result<()> {
        self.cfg.common.check_names(group, topic)?;
        let limit = Some(self.cfg.common.max_offset_gaps);
        self.sql
            .join_offsets(group, topic, partition, 0, Some(offset), limit)
            .await
    }

    pub(crate) async fn commit_watermark(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
        watermark: u64,
    ) -> Result<()> {
        self.cfg.common.check_names(group, topic)?;
        // `next` cannot count past `u64::MAX`: that offset is kept in the set instead,
        // as on the embedded store.
        let (next, add) = match watermark.checked_add(1) {
            Some(next) => (next, None),
            None => (u64::MAX, Some(u64::MAX)),
        };
        self.sql
            .join_offsets(group, topic, partition, next, add, None)
            .await
    }

    pub(crate) async fn offset_window(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
    ) -> Result<OffsetWindow> {
        self.cfg.common.check_names(group, topic)?;
        self.sql.offset_window(group, topic, partition).await
    }
}
