//! Causal entities and replica version vectors on PostgreSQL. Invariant: a row holds the same
//! sealed encoding as the embedded store's value, and each change is computed by the same code
//! as on the embedded store (`vv.rs`) from the row as read under its lock (`SELECT ... FOR
//! UPDATE` in one transaction), so concurrent writers are serialised by the database and none is
//! lost; a missing row is first inserted empty (`NULL`) so that there is always a row to lock.

use super::{classify, pool_error, statements as sql, PgStore};
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
        self.timed(async {
            let mut c = self.pool.get().await.map_err(pool_error)?;
            let tx = c.transaction().await.map_err(classify)?;
            let hold = tx
                .prepare_cached(sql::CAUSAL_HOLD)
                .await
                .map_err(classify)?;
            tx.execute(&hold, &[&k, &tenant, &id])
                .await
                .map_err(classify)?;
            let lock = tx
                .prepare_cached(sql::CAUSAL_LOCK)
                .await
                .map_err(classify)?;
            let row = tx
                .query_one(&lock, &[&k, &tenant, &id])
                .await
                .map_err(classify)?;
            let cur: Option<Vec<u8>> = row.get(0);
            let (new, out) = f(cur.as_deref())?; // an error drops `tx`: rolled back
            let write = tx.prepare_cached(sql::CAUSAL_SET).await.map_err(classify)?;
            tx.execute(&write, &[&k, &tenant, &id, &new])
                .await
                .map_err(classify)?;
            tx.commit().await.map_err(classify)?;
            Ok(out)
        })
        .await
    }
}
