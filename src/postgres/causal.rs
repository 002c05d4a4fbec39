//! Causal entities and replica version vectors on PostgreSQL. Invariant: a row holds the same
//! sealed encoding as the embedded store's value, and each change is computed by the same code
//! as on the embedded store (`vv.rs`) from the row as read under its lock (`SELECT ... FOR
//! UPDATE` in one transaction), so concurrent writers are serialised by the database and none is
//! lost; a missing row is first inserted empty (`NULL`) so that there is always a row to lock.

use super::send::Session;
use super::{classify, statements as sql, PgStore};
use crate::error::Result;

/// What a row holds (`kind` in `idemdb_causal`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum CausalKind {
    Entity = 0,
    ReplicaVector = 1,
}

impl PgStore {
    /// The stored bytes of a causal entity or replica vector (`None`: none).
    pub(crate) async fn causal_get(
        &self,
        kind: CausalKind,
        tenant: &[u8],
        id: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        let k = kind as i16;
        let row = self.query(sql::CAUSAL_GET, &[&k, &tenant, &id]).await?;
        Ok(row.and_then(|r| r.get::<_, Option<Vec<u8>>>(0)))
    }

    /// Changes a causal row in one transaction: `f` gets the stored bytes as read under the row's
    /// lock and answers the bytes to store (`None`: remove) with its result, or an error that
    /// rolls back and writes nothing.
    pub(crate) async fn causal_update<T, F>(
        &self,
        kind: CausalKind,
        tenant: &[u8],
        id: &[u8],
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(Option<&[u8]>) -> Result<(Option<Vec<u8>>, T)>,
    {
        let k = kind as i16;
        let mut c = self.conn().await?;
        self.timed(async move {
            let tx = c.transaction().await.map_err(classify)?;
            tx.changed(self.mode, sql::CAUSAL_HOLD, &[&k, &tenant, &id])
                .await
                .map_err(classify)?;
            let row = tx
                .one(self.mode, sql::CAUSAL_LOCK, &[&k, &tenant, &id])
                .await
                .map_err(classify)?
                .ok_or_else(|| crate::error::corrupted("idemdb_causal", "the held row is gone"))?;
            let cur: Option<Vec<u8>> = row.get(0);
            let (new, out) = f(cur.as_deref())?; // an error drops `tx`: rolled back
            tx.changed(self.mode, sql::CAUSAL_SET, &[&k, &tenant, &id, &new])
                .await
                .map_err(classify)?;
            tx.commit().await.map_err(classify)?;
            c.keep();
            Ok(out)
        })
        .await
    }
}
