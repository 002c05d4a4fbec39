//! Causal entities and replica version vectors on PostgreSQL. Invariant: a row holds the same
//! sealed encoding as the embedded store's value, and each change is computed by the same code
//! as on the embedded store (`src/causal.rs`: `put_sibling`, `delete_seen`, the merge and its
//! bound) from the row as read under its lock (`SELECT ... FOR UPDATE` in one transaction), so
//! concurrent writers are serialised by the database and none is lost; a missing row is first
//! inserted empty (`NULL`) so that there is always a row to lock.

use super::errors::classify;
use super::send::Session;
use super::statements as sql;
use super::store::PgStore;
use crate::causal::{Siblings, VersionVector};
use crate::error::Result;
use crate::postgres::Postgres;

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

/// What each causal call means, as on the embedded store: the same checks and bound, and the
/// same code computing the new state from the row as read under its lock.
impl Postgres {
    pub(crate) async fn causal_get(&self, tenant: &[u8], id: &[u8]) -> Result<Siblings> {
        self.cfg.common.check_names(tenant, id)?;
        let bytes = self
            .sql
            .causal_get(crate::postgres::CausalKind::Entity, tenant, id)
            .await?;
        crate::causal::decode_causal(bytes.as_deref())
    }

    pub(crate) async fn causal_put(
        &self,
        tenant: &[u8],
        id: &[u8],
        actor: &str,
        context: &VersionVector,
        value: Vec<u8>,
    ) -> Result<Siblings> {
        crate::causal::check_causal_put(&self.cfg.common, tenant, id, actor, &value)?;
        let cfg = self.cfg.clone();
        self.sql
            .causal_update(crate::postgres::CausalKind::Entity, tenant, id, |cur| {
                let state = crate::causal::decode_causal(cur)?;
                let state = crate::causal::put_sibling(state, actor, context, value);
                let sealed = crate::causal::seal_causal(&cfg.common, &state)?;
                Ok((Some(sealed), state))
            })
            .await
    }

    pub(crate) async fn causal_delete(
        &self,
        tenant: &[u8],
        id: &[u8],
        context: &VersionVector,
    ) -> Result<Siblings> {
        self.cfg.common.check_names(tenant, id)?;
        self.sql
            .causal_update(crate::postgres::CausalKind::Entity, tenant, id, |cur| {
                let left = match crate::causal::decode_causal(cur) {
                    // Damaged data can always be cleared.
                    Err(crate::Error::Corrupted { .. }) => Siblings::default(),
                    Err(e) => return Err(e),
                    Ok(state) => crate::causal::delete_seen(state, context),
                };
                if left.values.is_empty() {
                    return Ok((None, Siblings::default()));
                }
                let sealed = crate::format::seal_bincode("causal entity", &left)?;
                Ok((Some(sealed), left))
            })
            .await
    }

    pub(crate) async fn merge_replica_vector(
        &self,
        tenant: &[u8],
        id: &[u8],
        vv: &VersionVector,
    ) -> Result<()> {
        self.cfg.common.check_names(tenant, id)?;
        let cfg = self.cfg.clone();
        self.sql
            .causal_update(
                crate::postgres::CausalKind::ReplicaVector,
                tenant,
                id,
                |cur| {
                    let merged = crate::causal::decode_vv(cur)?.merged(vv);
                    crate::causal::check_vv_bound(&cfg.common, &merged)?;
                    Ok((Some(crate::causal::encode_vv(&merged)?), ()))
                },
            )
            .await
    }

    pub(crate) async fn replica_vector(&self, tenant: &[u8], id: &[u8]) -> Result<VersionVector> {
        self.cfg.common.check_names(tenant, id)?;
        let bytes = self
            .sql
            .causal_get(crate::postgres::CausalKind::ReplicaVector, tenant, id)
            .await?;
        crate::causal::decode_vv(bytes.as_deref())
    }
}
