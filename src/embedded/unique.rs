//! Unique constraints on the embedded store: reservations on business values. Invariant: at most
//! one live reservation per (index, value), decided under the value's lock stripe; a reservation
//! bound to a lease is owned by that lease's whole identity (its record key: namespace, tenant and
//! key) and is live only while that record is pending with the same fencing token and an unexpired
//! lease, so completing, failing, losing or letting the lease expire frees the value; no plain
//! owner and no other lease (of another tenant with the same key, say) can re-bind or release it.

use crate::telemetry::spans::{Op, OpKind};

use crate::embedded::core::check_holder;
use crate::embedded::engine::Cf;
use crate::embedded::Store;
use crate::error::Result;
use crate::format::{self, entity_key, Kind};
use crate::record::{Lease, State};
use crate::telemetry::counters::Metrics;
use crate::unique::{Released, Reservation, StoredReservation};

impl Store {
    /// Reserves `value` (its parts encoded unambiguously) in `index` for `owner`.
    pub fn reserve(
        &self,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
        owner: impl AsRef<[u8]>,
    ) -> Result<Reservation> {
        let (index, owner) = (index.as_ref(), owner.as_ref());
        let op = Op::start(
            OpKind::Reserve,
            &self.core.cfg.common,
            index,
            &format::composite(value),
        );
        let r = self.unique_key_checked(index, value).and_then(|key| {
            self.core.check_names(index, owner)?;
            let _g = self.core.lock(&key);
            self.put_reservation(&key, StoredReservation::plain(owner.to_vec()))
        });
        op.end_with(r, Reservation::outcome)
    }

    /// Reserves `value` in `index` for as long as `lease` is pending (a partial unique constraint:
    /// at most one pending operation per value). The owner is the lease's whole identity
    /// (namespace, tenant, key): only a lease of the same record can re-bind it, no plain owner
    /// can release it, and it reports an empty owner to others.
    pub fn reserve_for(
        &self,
        lease: &Lease,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
    ) -> Result<crate::record::LeaseResult<Reservation>> {
        let index = index.as_ref();
        let op = Op::start(
            OpKind::Reserve,
            &self.core.cfg.common,
            index,
            &format::composite(value),
        );
        op.fence(lease.fence());
        let r = self.reserve_bound(lease, index, value);
        op.end_with(r, |r| r.as_ref().map_or("lease_lost", Reservation::outcome))
    }

    fn reserve_bound(
        &self,
        lease: &Lease,
        index: &[u8],
        value: &[&[u8]],
    ) -> Result<crate::record::LeaseResult<Reservation>> {
        self.core.check_lease_store(lease)?;
        let key = self.unique_key_checked(index, value)?;
        let rkey = lease.record_key().to_vec();
        let mut locked = self
            .core
            .lock_many([key.as_slice(), rkey.as_slice()].into_iter());
        let Some(stripe) = locked.stripe(&rkey) else {
            return Err(crate::error::Error::Engine(
                "the lease's stripe was not locked".into(),
            ));
        };
        let cur = self.core.current(stripe, &rkey)?;
        let rec = match check_holder(cur.rec, lease, self.now()) {
            Ok(rec) => rec,
            Err(lost) => return Ok(Err(lost)),
        };
        // A reservation bound to the lease is live while the stored record is pending under
        // this lease: a record that was only in memory is written first.
        if cur.volatile {
            self.core.persist(stripe, &rkey, cur.stored_slot, rec)?;
        }
        Ok(Ok(self.put_reservation(
            &key,
            StoredReservation::bound_to(lease),
        )?))
    }

    /// Frees `value` in `index` if the plain owner `owner` holds it. A reservation bound to a
    /// lease is freed by the lease ending, never by this call ([`Released::NotOwner`]).
    pub fn release_reservation(
        &self,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
        owner: impl AsRef<[u8]>,
    ) -> Result<Released> {
        let (index, owner) = (index.as_ref(), owner.as_ref());
        let key = self.unique_key_checked(index, value)?;
        let _g = self.core.lock(&key);
        match self.live_reservation(&key)? {
            None => Ok(Released::Absent),
            Some(s) if !s.same_owner(&StoredReservation::plain(owner.to_vec())) => {
                Ok(Released::NotOwner { owner: s.owner })
            }
            Some(_) => {
                let mut b = self.core.engine().batch();
                b.delete(Cf::Versions, &key);
                self.core.engine().write(b)?;
                Ok(Released::Released)
            }
        }
    }

    /// Deletes the reservation of `value` in `index` whatever its owner or state (an operator's
    /// removal, `idemdb forget --reservation`: a value held by an owner that is gone, or bytes
    /// that do not decode). Returns whether anything was stored. A lease it was bound to keeps
    /// its record; only the value is free again.
    pub fn forget_reservation(&self, index: impl AsRef<[u8]>, value: &[&[u8]]) -> Result<bool> {
        let key = self.unique_key_checked(index.as_ref(), value)?;
        let _g = self.core.lock(&key);
        if self.core.engine().get(Cf::Versions, &key)?.is_none() {
            return Ok(false);
        }
        let mut b = self.core.engine().batch();
        b.delete(Cf::Versions, &key);
        self.core.engine().write(b)?;
        Metrics::bump(&self.core.metrics().forgotten);
        Ok(true)
    }

    /// The old name of [`Store::release_reservation`] (beside lease releases it was ambiguous).
    #[deprecated(since = "0.1.0", note = "use `release_reservation`")]
    pub fn release(
        &self,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
        owner: impl AsRef<[u8]>,
    ) -> Result<Released> {
        self.release_reservation(index, value, owner)
    }

    /// The current owner of `value` in `index`, if it is reserved (and its lease, if bound, is
    /// still pending). A reservation bound to a lease reports an empty owner.
    pub fn reservation_owner(
        &self,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
    ) -> Result<Option<Vec<u8>>> {
        let key = self.unique_key_checked(index.as_ref(), value)?;
        Ok(self.live_reservation(&key)?.map(|s| s.owner))
    }

    fn unique_key_checked(&self, index: &[u8], value: &[&[u8]]) -> Result<Vec<u8>> {
        let encoded = format::composite(value);
        self.core.check_names(index, &encoded)?;
        Ok(entity_key(Kind::Unique, index, &encoded))
    }

    /// Writes `stored` at `key` unless another live owner holds it. Caller holds the stripe.
    pub(crate) fn put_reservation(
        &self,
        key: &[u8],
        stored: StoredReservation,
    ) -> Result<Reservation> {
        if let Some(cur) = self.live_reservation(key)? {
            if !cur.same_owner(&stored) {
                return Ok(Reservation::Taken { owner: cur.owner });
            }
        }
        let mut b = self.core.engine().batch();
        b.put(Cf::Versions, key, &stored.encode()?);
        self.core.engine().write(b)?;
        Ok(Reservation::Reserved)
    }

    /// The reservation at `key` if it is live.
    pub(crate) fn live_reservation(&self, key: &[u8]) -> Result<Option<StoredReservation>> {
        let Some(bytes) = self.core.engine().get(Cf::Versions, key)? else {
            return Ok(None);
        };
        let stored: StoredReservation = format::unseal_bincode("reservation", &bytes)?;
        let Some((rkey, fence)) = &stored.bound else {
            return Ok(Some(stored));
        };
        let now = self.now();
        let live = self.core.load(rkey)?.is_some_and(|r| {
            r.expires_at > now
                && r.fence == *fence
                && matches!(r.state, State::Pending { lease_until } if lease_until > now)
        });
        Ok(live.then_some(stored))
    }
}
