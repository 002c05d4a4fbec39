//! The operator's view of stored data (`idemdb inspect`): every kind of data, listed by scope and
//! key prefix, decoded. Invariants: a scan only reads (it works on a store opened read-only); a
//! value that does not decode is listed as [`Detail::Damaged`] with the reason, never fails the
//! listing, and is never repaired or removed here; a scan returns at most its limit of items,
//! in key order.

use crate::causal::{Siblings, VersionVector};
use crate::embedded::engine::Cf;
use crate::embedded::Store;
use crate::error::Result;
use crate::format::{self, Kind, Namespace};
use crate::offsets::OffsetWindow;
use crate::record::{RecordInfo, State};
use crate::unique::StoredReservation;

/// The kinds of stored data [`Store::scan`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DataKind {
    /// Request records (`Store::claim`): scope the tenant, key the idempotency key.
    Records,
    /// Consumer messages (`Store::begin`): scope the group, key the message id.
    Messages,
    /// Versioned entities (`Store::put_entity`): scope the tenant, key the id.
    Entities,
    /// Causal entities (`Store::causal_put`): scope the tenant, key the id.
    Causal,
    /// Replica version vectors (`Store::merge_replica_vector`): scope the tenant, key the id.
    ReplicaVectors,
    /// Unique reservations (`Store::reserve`): scope the index, key the value's first part.
    Reservations,
    /// Offset windows (`Store::mark_processed`): scope the group, key the topic.
    Offsets,
}

impl DataKind {
    /// Every kind, in the order `idemdb inspect` lists them.
    pub const ALL: [DataKind; 7] = [
        DataKind::Records,
        DataKind::Messages,
        DataKind::Entities,
        DataKind::Causal,
        DataKind::ReplicaVectors,
        DataKind::Reservations,
        DataKind::Offsets,
    ];

    /// The kind's name, as `idemdb inspect --kind` takes it and its JSON names it.
    pub fn name(self) -> &'static str {
        match self {
            DataKind::Records => "records",
            DataKind::Messages => "messages",
            DataKind::Entities => "entities",
            DataKind::Causal => "causal",
            DataKind::ReplicaVectors => "vectors",
            DataKind::Reservations => "reservations",
            DataKind::Offsets => "offsets",
        }
    }

    /// The kind named `name` (see [`DataKind::name`]).
    pub fn from_name(name: &str) -> Option<DataKind> {
        DataKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Where the kind lives: the column family, and the prefix of every key of the kind within
    /// `scope` (or of the whole kind).
    fn range(self, scope: Option<&[u8]>) -> (Cf, Vec<u8>) {
        let versions = |kind: Kind| {
            let mut p = vec![kind as u8];
            if let Some(s) = scope {
                p.extend_from_slice(&format::record_prefix(Namespace::Requests, s));
            }
            (Cf::Versions, p)
        };
        match self {
            DataKind::Records | DataKind::Messages => {
                let ns = if self == DataKind::Records {
                    Namespace::Requests
                } else {
                    Namespace::Consumers
                };
                (
                    Cf::Records,
                    scope.map_or_else(Vec::new, |s| format::record_prefix(ns, s)),
                )
            }
            DataKind::Entities => versions(Kind::Entity),
            DataKind::Causal => versions(Kind::Causal),
            DataKind::ReplicaVectors => versions(Kind::ReplicaVector),
            DataKind::Reservations => versions(Kind::Unique),
            DataKind::Offsets => versions(Kind::Offsets),
        }
    }
}

/// One stored item, as an operator sees it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Item {
    /// What it is.
    pub kind: DataKind,
    /// Its scope: the tenant, consumer group or index.
    pub scope: Vec<u8>,
    /// Its key within the scope: the idempotency key, message id, entity id, the reservation's
    /// value as stored (its parts encoded) or the offsets' topic and partition as stored.
    pub key: Vec<u8>,
    /// What is stored.
    pub detail: Detail,
}

/// What an [`Item`] holds.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Detail {
    /// A request record or consumer message, and whether it expired (an expired record reads
    /// as absent; a sweep or compaction removes it).
    Record {
        /// The record.
        info: RecordInfo,
        /// Whether it is past its expiry.
        expired: bool,
    },
    /// A versioned entity (`value` `None`: a tombstone that keeps the version).
    Entity {
        /// Its version.
        version: u64,
        /// Its value.
        value: Option<Vec<u8>>,
    },
    /// A causal entity's concurrent values.
    Causal(Siblings),
    /// A replica version vector.
    ReplicaVector(VersionVector),
    /// A unique reservation.
    Reservation {
        /// The reserved value's parts.
        value: Vec<Vec<u8>>,
        /// Its plain owner (empty for one bound to a lease).
        owner: Vec<u8>,
        /// The fencing token of the lease it is bound to, if bound.
        bound_fence: Option<u64>,
        /// Whether it holds the value now (a bound one only while its lease is held).
        live: bool,
    },
    /// A partition's processed offsets.
    Offsets {
        /// The topic.
        topic: Vec<u8>,
        /// The partition.
        partition: u32,
        /// The window.
        window: OffsetWindow,
    },
    /// Bytes that do not decode as their kind; they are shown, not changed.
    Damaged {
        /// Why they do not decode.
        reason: String,
    },
}

impl Store {
    /// Lists stored items of `kind`, in key order: those of `scope` (a tenant, group or index;
    /// `None`: every scope) whose key starts with `key_prefix` (for a reservation: its value's
    /// first part; for offsets: the topic), at most `limit` of them. Reads only: it works on a
    /// store opened with [`crate::Config::read_only`] beside the process that writes it (then it
    /// sees what that process had written when it opened or last caught up). Expired records
    /// are listed, marked; pending records an embedded writer keeps in memory only
    /// ([`crate::Config::pending_in_memory`]) are not on disk and are not listed.
    pub fn scan(
        &self,
        kind: DataKind,
        scope: Option<&[u8]>,
        key_prefix: &[u8],
        limit: usize,
    ) -> Result<Vec<Item>> {
        let (cf, prefix) = kind.range(scope);
        let now = self.now();
        let mut raw = Vec::new();
        let mut failed = None;
        self.core.engine().scan(cf, &prefix, None, |k, v| {
            if !k.starts_with(&prefix) || raw.len() >= limit {
                return false;
            }
            match self.decode_item(kind, k, v, now) {
                Ok(Some(item)) => {
                    if item_key(&item).starts_with(key_prefix) {
                        raw.push(item);
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    failed = Some(e);
                    return false;
                }
            }
            true
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(raw),
        }
    }

    /// The item stored at `(k, v)`, or `None` if the key is not of `kind` (a message key in the
    /// records column family when records are listed without a scope).
    fn decode_item(&self, kind: DataKind, k: &[u8], v: &[u8], now: u64) -> Result<Option<Item>> {
        let damaged = |scope: &[u8], key: &[u8], reason: String| Item {
            kind,
            scope: scope.to_vec(),
            key: key.to_vec(),
            detail: Detail::Damaged { reason },
        };
        if matches!(kind, DataKind::Records | DataKind::Messages) {
            let Some((ns, scope, key)) = format::split_record_key_ns(k) else {
                return Ok(None);
            };
            let wanted = if kind == DataKind::Records {
                Namespace::Requests
            } else {
                Namespace::Consumers
            };
            if ns != wanted {
                return Ok(None);
            }
            return Ok(Some(match crate::embedded::codec::decode_record(v) {
                Ok(rec) => Item {
                    kind,
                    scope: scope.to_vec(),
                    key: key.to_vec(),
                    detail: Detail::Record {
                        expired: rec.expires_at <= now,
                        info: rec.info(),
                    },
                },
                Err(e) => damaged(scope, key, e.to_string()),
            }));
        }
        // The versions column family: the kind byte, then a record key of (scope, id).
        let Some((scope, id)) = k.get(1..).and_then(format::split_record_key) else {
            return Ok(None);
        };
        let detail = match kind {
            DataKind::Entities => crate::entities::decode_entity(v).map(|e| Detail::Entity {
                version: e.version,
                value: e.value,
            }),
            DataKind::Causal => crate::causal::decode_causal(Some(v)).map(Detail::Causal),
            DataKind::ReplicaVectors => {
                crate::causal::decode_vv(Some(v)).map(Detail::ReplicaVector)
            }
            DataKind::Reservations => self.reservation_detail(id, v, now),
            DataKind::Offsets => offsets_detail(id, v),
            DataKind::Records | DataKind::Messages => return Ok(None),
        };
        Ok(Some(match detail {
            Ok(detail) => Item {
                kind,
                scope: scope.to_vec(),
                key: id.to_vec(),
                detail,
            },
            Err(e) => damaged(scope, id, e.to_string()),
        }))
    }

    fn reservation_detail(&self, id: &[u8], v: &[u8], now: u64) -> Result<Detail> {
        let stored: StoredReservation = format::unseal_bincode("reservation", v)?;
        let value = format::split_composite(id)
            .ok_or_else(|| crate::error::corrupted("reservation key", "not a composite value"))?
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect();
        let live = match &stored.bound {
            None => true,
            Some((rkey, fence)) => self.core.load(rkey)?.is_some_and(|r| {
                r.expires_at > now
                    && r.fence == *fence
                    && matches!(r.state, State::Pending { lease_until } if lease_until > now)
            }),
        };
        Ok(Detail::Reservation {
            value,
            bound_fence: stored.bound.as_ref().map(|b| b.1),
            owner: stored.owner,
            live,
        })
    }
}

fn offsets_detail(id: &[u8], v: &[u8]) -> Result<Detail> {
    let bad = || crate::error::corrupted("offset window key", "not (topic, u32 partition)");
    let parts = format::split_composite(id).ok_or_else(bad)?;
    let [topic, partition] = parts.as_slice() else {
        return Err(bad());
    };
    let partition = u32::from_be_bytes(<[u8; 4]>::try_from(*partition).map_err(|_| bad())?);
    let mut window: OffsetWindow = format::unseal_bincode("offset window", v)?;
    window.normalise();
    Ok(Detail::Offsets {
        topic: topic.to_vec(),
        partition,
        window,
    })
}

/// What a key prefix is matched against: the key, a reservation's first part, the topic.
fn item_key(item: &Item) -> &[u8] {
    match &item.detail {
        Detail::Reservation { value, .. } => value.first().map_or(&[][..], Vec::as_slice),
        Detail::Offsets { topic, .. } => topic,
        _ => &item.key,
    }
}
