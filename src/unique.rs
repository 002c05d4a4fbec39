//! Unique reservations, the vocabulary both backends share: the outcomes ([`Reservation`],
//! [`Released`]) and, for the embedded store, a reservation as stored (`StoredReservation`: a
//! plain owner, or the record key and fencing token of the lease it is bound to, with an empty
//! owner) and the key of a value (`unique_key`: the index and the value's parts, composed
//! injectively). Invariants: a plain owner and a bound one are never the same owner, and two
//! bound ones are the same exactly when they name the same record (namespace, tenant and key), so
//! no plain owner and no other lease (of another tenant with the same key, say) can re-bind or
//! release a value bound to a lease; a bound reservation's owner is never disclosed (`Taken` and
//! `NotOwner` carry it empty).

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::format::{self, entity_key, Kind};
use crate::record::Lease;

/// The outcome of a reservation attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Reservation {
    /// The value is now (or already was) reserved by this owner.
    Reserved,
    /// Another owner holds it.
    Taken {
        /// The current owner; empty when the value is bound to a pending lease (whose identity is
        /// not disclosed: it may belong to another tenant).
        owner: Vec<u8>,
    },
}

impl Reservation {
    /// The outcome's name, as spans label it.
    pub(crate) fn outcome(&self) -> &'static str {
        match self {
            Reservation::Reserved => "reserved",
            Reservation::Taken { .. } => "taken",
        }
    }
}

/// The outcome of a release.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Released {
    /// The reservation was removed.
    Released,
    /// Another owner holds it; nothing changed.
    NotOwner {
        /// The current owner; empty when the value is bound to a pending lease.
        owner: Vec<u8>,
    },
    /// Nothing (live) was reserved.
    Absent,
}

/// A stored reservation. A plain one has a non-empty `owner` and no `bound`; one bound to a lease
/// has an empty `owner` (no plain owner can be empty) and the lease's record key and token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredReservation {
    pub owner: Vec<u8>,
    /// (record key, fencing token) of the lease it is bound to.
    pub bound: Option<(Vec<u8>, u64)>,
}

impl StoredReservation {
    pub(crate) fn plain(owner: Vec<u8>) -> Self {
        StoredReservation { owner, bound: None }
    }

    pub(crate) fn bound_to(lease: &Lease) -> Self {
        StoredReservation {
            owner: Vec::new(),
            bound: Some((lease.record_key().to_vec(), lease.fence())),
        }
    }

    /// Whether `other` is the same owner: the same plain owner, or a lease of the same record (a
    /// live bound reservation carries its record's current token, so a lease of that record that
    /// is still pending is the same lease). A plain owner never matches a bound one.
    pub(crate) fn same_owner(&self, other: &StoredReservation) -> bool {
        match (&self.bound, &other.bound) {
            (None, None) => self.owner == other.owner,
            (Some((a, _)), Some((b, _))) => a == b,
            _ => false,
        }
    }

    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        format::seal_bincode("reservation", self)
    }
}

pub(crate) fn unique_key(index: &[u8], value: &[&[u8]]) -> Vec<u8> {
    entity_key(Kind::Unique, index, &format::composite(value))
}
