//! Unique reservations through the async API. Invariant: each method means what the embedded
//! store's method of the same name means ([`Store::reserve`](crate::Store::reserve) and the
//! others), with the same argument checks, on either backend; on PostgreSQL each reservation or
//! release is one call the database decides under the reservation's row lock.

use super::{blocking, AsyncStore, Backend, LeaseResult};
use crate::error::Result;
use crate::record::Lease;
use crate::unique::{Released, Reservation};

/// The value's parts, owned (for the embedded store's blocking pool).
fn owned(value: &[&[u8]]) -> Vec<Vec<u8>> {
    value.iter().map(|p| p.to_vec()).collect()
}

fn parts(value: &[Vec<u8>]) -> Vec<&[u8]> {
    value.iter().map(Vec::as_slice).collect()
}

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
        match &self.backend {
            Backend::Embedded(s) => {
                let (i, v, o) = (index.to_vec(), owned(value), owner.to_vec());
                blocking(s, move |s| s.reserve(i, &parts(&v), o)).await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.reserve(index, value, owner).await,
        }
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
        let index = index.as_ref();
        match &self.backend {
            Backend::Embedded(s) => {
                let (l, i, v) = (lease.clone(), index.to_vec(), owned(value));
                blocking(s, move |s| s.reserve_for(&l, i, &parts(&v))).await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.reserve_for(lease, index, value).await,
        }
    }

    /// Deletes the reservation of `value` in `index` whatever its owner, as
    /// [`Store::forget_reservation`](crate::Store::forget_reservation); whether one was stored.
    pub async fn forget_reservation(
        &self,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
    ) -> Result<bool> {
        let index = index.as_ref();
        match &self.backend {
            Backend::Embedded(s) => {
                let (i, v) = (index.to_vec(), owned(value));
                blocking(s, move |s| s.forget_reservation(i, &parts(&v))).await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.forget_reservation(index, value).await,
        }
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
        match &self.backend {
            Backend::Embedded(s) => {
                let (i, v, o) = (index.to_vec(), owned(value), owner.to_vec());
                blocking(s, move |s| s.release_reservation(i, &parts(&v), o)).await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.release_reservation(index, value, owner).await,
        }
    }

    /// The owner of `value` in `index` if it is reserved (empty when bound to a lease that is
    /// still held), as [`Store::reservation_owner`](crate::Store::reservation_owner).
    pub async fn reservation_owner(
        &self,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
    ) -> Result<Option<Vec<u8>>> {
        let index = index.as_ref();
        match &self.backend {
            Backend::Embedded(s) => s.reservation_owner(index, value),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.reservation_owner(index, value).await,
        }
    }
}
