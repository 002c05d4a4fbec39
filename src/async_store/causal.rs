//! Causal writes (version vectors and siblings) through the async API. Invariant: each method
//! means what the embedded store's method of the same name means
//! ([`Store::causal_put`](crate::Store::causal_put) and the others): the same argument checks,
//! the same bound on what is stored, and on PostgreSQL the same code computing the new state
//! from the row as read under its lock, so no concurrent write is lost on either backend.

use super::{dispatch, AsyncStore};
use crate::causal::{Siblings, VersionVector};
use crate::error::Result;

impl AsyncStore {
    /// Reads a causal entity: all concurrent values and the context that covers them, as
    /// [`Store::causal_get`](crate::Store::causal_get).
    pub async fn causal_get(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
    ) -> Result<Siblings> {
        dispatch!(
            &self.backend,
            causal_get(tenant.as_ref(), id.as_ref()).await
        )
    }

    /// Writes `value` as `actor`, having read `context`, as
    /// [`Store::causal_put`](crate::Store::causal_put): siblings the context has seen are
    /// replaced, concurrent ones kept; the entity's state after the write.
    pub async fn causal_put(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        actor: &str,
        context: &VersionVector,
        value: impl Into<Vec<u8>>,
    ) -> Result<Siblings> {
        let (tenant, id, value) = (tenant.as_ref(), id.as_ref(), value.into());
        dispatch!(
            &self.backend,
            causal_put(tenant, id, actor, context, value).await
        )
    }

    /// Deletes the siblings `context` has seen, as
    /// [`Store::causal_delete`](crate::Store::causal_delete); what is left.
    pub async fn causal_delete(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        context: &VersionVector,
    ) -> Result<Siblings> {
        let (tenant, id) = (tenant.as_ref(), id.as_ref());
        dispatch!(&self.backend, causal_delete(tenant, id, context).await)
    }

    /// Merges a replica's version vector into the one stored for `(tenant, id)`, as
    /// [`Store::merge_replica_vector`](crate::Store::merge_replica_vector).
    pub async fn merge_replica_vector(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        vv: &VersionVector,
    ) -> Result<()> {
        let (tenant, id) = (tenant.as_ref(), id.as_ref());
        dispatch!(&self.backend, merge_replica_vector(tenant, id, vv).await)
    }

    /// The merged replica vector of `(tenant, id)` (empty if none was merged), as
    /// [`Store::replica_vector`](crate::Store::replica_vector).
    pub async fn replica_vector(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
    ) -> Result<VersionVector> {
        dispatch!(
            &self.backend,
            replica_vector(tenant.as_ref(), id.as_ref()).await
        )
    }
}
