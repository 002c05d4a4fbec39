//! Unique reservations through the async API. Invariant: each method means what the embedded
//! store's method of the same name means ([`Store::reserve`](crate::Store::reserve) and the
//! others), with the same argument checks, on either backend; on PostgreSQL each reservation or
//! release is one call the database decides under the reservation's row lock.

use super::{dispatch, AsyncStore, LeaseResult};
use crate::error::Result;
use crate::record::Lease;
use crate::unique::{Released, Reservation};

/// The value's parts, owned (for the embedded store's blocking pool).
impl AsyncStore {
    /// Reserves `value` (one or more parts) in `index` for `owner`, as
    /// [`Store::reserve`](crate::Store::reserve): `Reserved`, or `Taken` by another live owner.
    pub async fn reserve(
        &self,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
        owner: impl AsRef<[u8]>,
    ) -> Result<Reservation> {
        let (index, owner) = (index.as_ref(), owner.as_ref());
        dispatch!(&self.backend, reserve(index, value, owner).await)
    }

    /// Reserves `value` in `index` for the holder of `lease`, as
    /// [`Store::reserve_for`](crate::Store::reserve_for): the reservation lives while the lease
    /// is held and frees itself when the operation completes, fails, is released or taken over.
    pub async fn reserve_for(
        &self,
        lease: &Lease,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
    ) -> Result<LeaseResult<Reservation>> {
        dispatch!(
            &self.backend,
            reserve_for(lease, index.as_ref(), value).await
        )
    }

    /// Deletes the reservation of `value` in `index` whatever its owner, as
    /// [`Store::forget_reservation`](crate::Store::forget_reservation); whether one was stored.
    pub async fn forget_reservation(
        &self,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
    ) -> Result<bool> {
        dispatch!(
            &self.backend,
            forget_reservation(index.as_ref(), value).await
        )
    }

    /// Releases `owner`'s reservation of `value` in `index`, as
    /// [`Store::release_reservation`](crate::Store::release_reservation).
    pub async fn release_reservation(
        &self,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
        owner: impl AsRef<[u8]>,
    ) -> Result<Released> {
        let (index, owner) = (index.as_ref(), owner.as_ref());
        dispatch!(
            &self.backend,
            release_reservation(index, value, owner).await
        )
    }

    /// The owner of `value` in `index` if it is reserved (empty when bound to a lease that is
    /// still held), as [`Store::reservation_owner`](crate::Store::reservation_owner).
    pub async fn reservation_owner(
        &self,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
    ) -> Result<Option<Vec<u8>>> {
        dispatch!(
            &self.backend,
            reservation_owner(index.as_ref(), value).await
        )
    }
}
