//! Unique reservations on PostgreSQL. Invariant: as on the embedded store, a value is held by at
//! most one live owner (a plain owner, or a lease while it is held), and each reservation or
//! release is decided by the database under the reservation row's lock (`idemdb_reserve`,
//! `idemdb_release_reservation`, migration 3); a reservation bound to a lease frees itself when
//! the lease ends, with no write.

use super::rows::{lost_lease, ns_code, to_i64};
use super::statements as sql;
use super::store::{one, PgStore};
use crate::error::{Error, Result};
use crate::postgres::Postgres;
use crate::record::{Lease, LeaseLost};
use crate::telemetry::spans::{Op, OpKind};
use crate::unique::{Released, Reservation};

impl PgStore {
    /// Reserves `value` (its composite encoding) in `index` for `owner`, or for the holder of
    /// `lease` (then `owner` is empty), on a pooled connection.
    pub(crate) async fn reserve(
        &self,
        index: &[u8],
        value: &[u8],
        owner: &[u8],
        lease: Option<&Lease>,
    ) -> Result<std::result::Result<Reservation, LeaseLost>> {
        let c = self.conn().await?;
        self.timed(async move {
            let r = self.reserve_on(&c, index, value, owner, lease).await?;
            c.keep();
            Ok(r)
        })
        .await
    }

    /// [`PgStore::reserve`] on the connection `c` (a commit's transaction, or a pooled one).
    pub(crate) async fn reserve_on(
        &self,
        c: &deadpool_postgres::Object,
        index: &[u8],
        value: &[u8],
        owner: &[u8],
        lease: Option<&Lease>,
    ) -> Result<std::result::Result<Reservation, LeaseLost>> {
        if lease.is_some_and(|l| l.store_id != self.store_id) {
            return Err(Error::ForeignLease);
        }
        let ns = lease.map(|l| ns_code(l.ns));
        let fence = lease.map(|l| to_i64("fence", l.fence)).transpose()?;
        let (tenant, key) = (
            lease.map(|l| l.tenant.as_slice()),
            lease.map(|l| l.key.as_slice()),
        );
        let now = self.now_param();
        let row = one(
            c,
            self.mode,
            sql::RESERVE,
            &[&index, &value, &owner, &ns, &tenant, &key, &fence, &now],
        )
        .await?
        .ok_or_else(|| Error::Engine("PostgreSQL: idemdb_reserve returned no row".into()))?;
        match row.get::<_, i16>("outcome") {
            0 => Ok(Ok(Reservation::Reserved)),
            1 => Ok(Ok(Reservation::Taken {
                owner: row.get::<_, Option<Vec<u8>>>("owner").unwrap_or_default(),
            })),
            2 => {
                let ours = fence.unwrap_or_default();
                let state: Option<i16> = row.get("state");
                let current: Option<i64> = row.get("fence");
                let expired: Option<bool> = row.get("expired");
                // Decided under the row's lock: a pending row with our fence is not "lost".
                Ok(Err(lost_lease(state, current, expired, ours)?.ok_or_else(
                    || crate::error::corrupted("idemdb_reserve", "lease refused while held"),
                )?))
            }
            other => Err(crate::error::corrupted(
                "idemdb_reserve",
                format!("unknown outcome {other}"),
            )),
        }
    }

    /// Releases `owner`'s live plain reservation of `value` in `index`.
    pub(crate) async fn release_reservation(
        &self,
        index: &[u8],
        value: &[u8],
        owner: &[u8],
    ) -> Result<Released> {
        let now = self.now_param();
        let row = self
            .query(sql::RELEASE_RESERVATION, &[&index, &value, &owner, &now])
            .await?
            .ok_or_else(|| {
                Error::Engine("PostgreSQL: idemdb_release_reservation returned no row".into())
            })?;
        match row.get::<_, i16>("outcome") {
            0 => Ok(Released::Released),
            1 => Ok(Released::NotOwner {
                owner: row.get::<_, Option<Vec<u8>>>("owner").unwrap_or_default(),
            }),
            2 => Ok(Released::Absent),
            other => Err(crate::error::corrupted(
                "idemdb_release_reservation",
                format!("unknown outcome {other}"),
            )),
        }
    }

    /// Deletes a reservation whatever its owner; whether one was stored.
    pub(crate) async fn forget_reservation(&self, index: &[u8], value: &[u8]) -> Result<bool> {
        Ok(self
            .execute(sql::FORGET_RESERVATION, &[&index, &value])
            .await?
            > 0)
    }

    /// The owner of a live reservation (empty when it is bound to a lease).
    pub(crate) async fn reservation_owner(
        &self,
        index: &[u8],
        value: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        let now = self.now_param();
        let row = self
            .query(sql::RESERVATION_OWNER, &[&index, &value, &now])
            .await?;
        Ok(row.map(|r| r.get(0)))
    }
}

/// What each reservation call means, as on the embedded store: the same checks, outcomes, spans
/// and counters.
impl Postgres {
    /// The value's composite encoding, checked as the embedded store checks it.
    fn unique_value(&self, index: &[u8], value: &[&[u8]]) -> Result<Vec<u8>> {
        let encoded = crate::format::composite(value);
        self.cfg.common.check_names(index, &encoded)?;
        Ok(encoded)
    }

    pub(crate) async fn reserve(
        &self,
        index: &[u8],
        value: &[&[u8]],
        owner: &[u8],
    ) -> Result<Reservation> {
        let encoded = crate::format::composite(value);
        let op = Op::start(OpKind::Reserve, &self.cfg.common, index, &encoded);
        let r = async {
            let encoded = self.unique_value(index, value)?;
            self.cfg.common.check_names(index, owner)?;
            match self.sql.reserve(index, &encoded, owner, None).await? {
                Ok(r) => Ok(r),
                Err(lost) => Err(crate::error::Error::Engine(format!(
                    "PostgreSQL: a plain reservation answered {lost:?}"
                ))),
            }
        };
        op.end_with(r.await, Reservation::outcome)
    }

    pub(crate) async fn reserve_for(
        &self,
        lease: &Lease,
        index: &[u8],
        value: &[&[u8]],
    ) -> Result<std::result::Result<Reservation, crate::record::LeaseLost>> {
        let op = Op::start(
            OpKind::Reserve,
            &self.cfg.common,
            index,
            &crate::format::composite(value),
        );
        op.fence(lease.fence);
        let r = match self.unique_value(index, value) {
            Ok(encoded) => self.sql.reserve(index, &encoded, &[], Some(lease)).await,
            Err(e) => Err(e),
        };
        op.end_with(r, |r| r.as_ref().map_or("lease_lost", Reservation::outcome))
    }

    pub(crate) async fn forget_reservation(&self, index: &[u8], value: &[&[u8]]) -> Result<bool> {
        let encoded = self.unique_value(index, value)?;
        let found = self.sql.forget_reservation(index, &encoded).await?;
        if found {
            crate::telemetry::counters::Metrics::bump(&self.metrics.forgotten);
        }
        Ok(found)
    }

    pub(crate) async fn release_reservation(
        &self,
        index: &[u8],
        value: &[&[u8]],
        owner: &[u8],
    ) -> Result<Released> {
        let encoded = self.unique_value(index, value)?;
        self.sql.release_reservation(index, &encoded, owner).await
    }

    pub(crate) async fn reservation_owner(
        &self,
        index: &[u8],
        value: &[&[u8]],
    ) -> Result<Option<Vec<u8>>> {
        let encoded = self.unique_value(index, value)?;
        self.sql.reservation_owner(index, &encoded).await
    }
}
