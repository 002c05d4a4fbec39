//! Versioned entities through the async API. Invariant: each method means what the embedded
//! store's method of the same name means ([`Store::put_entity`](crate::Store::put_entity) and the others), with the same
//! argument checks, on either backend; on PostgreSQL each conditional write is one call the
//! database decides, and [`AsyncStore::update_entity`] backs off on a timer, never by blocking a
//! worker thread.

use super::{dispatch, AsyncStore};
use crate::entities::{Conflict, Expect, UpdateOptions, Version, Versioned};
use crate::error::Result;

impl AsyncStore {
    /// The current value and version of an entity, or `None` if absent or deleted, as
    /// [`Store::get_entity`](crate::Store::get_entity).
    pub async fn get_entity(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
    ) -> Result<Option<Versioned>> {
        dispatch!(
            &self.backend,
            get_entity(tenant.as_ref(), id.as_ref()).await
        )
    }

    /// Writes `value` if `expect` holds, as [`Store::put_entity`](crate::Store::put_entity): the new version, or the
    /// conflict with what is there now.
    pub async fn put_entity(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        expect: Expect,
        value: impl Into<Vec<u8>>,
    ) -> Result<std::result::Result<Version, Conflict>> {
        let value = value.into();
        let r = self
            .write_entity(tenant.as_ref(), id.as_ref(), expect, Some(value))
            .await?;
        Ok(r.map(Option::unwrap_or_default))
    }

    /// Deletes the entity if `expect` holds, leaving a tombstone that keeps its version, as
    /// [`Store::delete_entity`](crate::Store::delete_entity): the tombstone's version (`None` if nothing was live).
    pub async fn delete_entity(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        expect: Expect,
    ) -> Result<std::result::Result<Option<Version>, Conflict>> {
        self.write_entity(tenant.as_ref(), id.as_ref(), expect, None)
            .await
    }

    /// Read, apply `f`, write if unchanged, retrying conflicts with exponential back-off and
    /// full jitter, as [`Store::update_entity`](crate::Store::update_entity); fails with [`Error::Contention`](crate::Error::Contention) after
    /// `opts.max_attempts` conflicts. After `opts.escalate_after` conflicts `f` runs once more
    /// while the entity is held: on the embedded store under its lock stripe, on PostgreSQL in a
    /// transaction that holds the entity's row lock (`SELECT ... FOR UPDATE`) until the write
    /// commits. The back-off sleeps on the runtime's timer.
    pub async fn update_entity<F>(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        opts: UpdateOptions,
        f: F,
    ) -> Result<Option<Versioned>>
    where
        F: FnMut(Option<&[u8]>) -> Option<Vec<u8>> + Send + 'static,
    {
        let (tenant, id) = (tenant.as_ref().to_vec(), id.as_ref().to_vec());
        dispatch!(&self.backend, update_entity(tenant, id, opts, f).await)
    }

    /// The conditional write of both backends: `value` `None` writes a tombstone.
    async fn write_entity(
        &self,
        tenant: &[u8],
        id: &[u8],
        expect: Expect,
        value: Option<Vec<u8>>,
    ) -> Result<std::result::Result<Option<Version>, Conflict>> {
        dispatch!(&self.backend, write_entity(tenant, id, expect, value).await)
    }
}
