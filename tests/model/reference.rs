//! The reference model: every record, entity, reservation and offset window as plain maps and
//! sets, changed by the rules of docs/design.md and nothing else. Obviously right, and nothing
//! more: it never looks at a store, except for the fencing tokens a backend issues its own way
//! ([`Fences::Adopt`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use idemdb::{
    Checkpoint, Claim, Expect, LeaseLost, RecordInfo, RecordState, Released, Replay, Reservation,
    Response, Versioned,
};

use super::{CONSUMER, KEYS};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum MState {
    Pending { lease_until: u64 },
    Released,
    Completed(Response, u64),
    Failed(Response, u64),
}

#[derive(Debug, Clone)]
pub(super) struct MRec {
    pub(super) fp: Vec<u8>,
    pub(super) created_at: u64,
    pub(super) expires_at: u64,
    pub(super) fence: u64,
    pub(super) attempts: u32,
    pub(super) takeovers: u32,
    pub(super) checkpoint: Option<Checkpoint>,
    pub(super) state: MState,
}

/// Who holds a reservation: a plain owner string, or the record of a lease (its model id, which
/// tells namespace, tenant and key apart) with the lease's fencing token. A bound reservation is
/// never held by an owner string, not even the lease's key, and reports an empty owner.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Holder {
    Plain(Vec<u8>),
    Bound((usize, usize), u64),
}

impl Holder {
    /// The owner the store reports: the plain owner, or empty for a bound reservation (plain
    /// owners cannot be empty).
    fn owner(&self) -> Vec<u8> {
        match self {
            Holder::Plain(o) => o.clone(),
            Holder::Bound(..) => Vec::new(),
        }
    }

    /// Bound to a lease of another record whose key string is `KEYS[k]` (another tenant's, or
    /// the consumer namespace's): the cases a bare key string would confuse.
    pub(super) fn other_lease_of_key(&self, id: (usize, usize)) -> bool {
        matches!(self, Holder::Bound(b, _) if *b != id && b.1 == id.1)
    }
}

/// The plain owners of reservations: one that no lease can be confused with, and one equal to each
/// lease key (`KEYS`), which must never match a reservation bound to a lease of that key. An owner
/// index past these names the current holder (see [`Model::owner_for`]).
pub const OWNERS: [&str; 4] = ["owner-0", "k0", "k1", "k2"];

/// An entity's version and its value (`None`: a tombstone).
type EntityState = (u64, Option<Vec<u8>>);

/// How the model learns the fencing token of an acquisition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fences {
    /// Predicted: a new store's first token is 1, every acquisition (a delivery that poisons
    /// too) draws the next, and a reopen resumes after the reserved block (docs/design.md,
    /// "Fencing tokens"): the embedded store opened for the run.
    Predict,
    /// Taken from the store, where the tokens are the backend's own business (a sequence on
    /// PostgreSQL, a store shared by many runs): [`super::Watch`] still checks that each is
    /// above every token seen before, and every later use of it is predicted.
    Adopt,
}

/// The reference model: obviously right, and nothing more.
pub(super) struct Model {
    pub(super) now: u64,
    fences: Fences,
    /// The next fencing token ([`Fences::Predict`]).
    next_fence: u64,
    /// The store reserves tokens in blocks (docs/design.md, "Fencing tokens"): the first token
    /// above `fence_reserved` reserves up to it plus `FENCE_BLOCK`, and a reopen resumes after the
    /// reserved block.
    fence_reserved: u64,
    /// The store's `Config::pending_in_memory` (0 for a backend that writes every claim).
    pending_in_memory: usize,
    pub(super) recs: BTreeMap<(usize, usize), MRec>,
    /// Request keys whose record exists only in memory (a claim that acquired wrote nothing,
    /// docs/design.md "In-memory pending records"), with the stored record below it (`None`:
    /// nothing stored). A reopen drops the in-memory records: the stored ones come back.
    pub(super) stored: BTreeMap<(usize, usize), Option<MRec>>,
    /// Reservations by value: a plain owner, or the lease's (model id, fence) when bound.
    res: BTreeMap<u8, Holder>,
    /// Versioned entities: (version, value or tombstone).
    pub(super) ents: BTreeMap<(usize, usize), EntityState>,
    /// Processed offsets of partitions 0 and 1 (group "g", topic "t"): a plain set, the obvious
    /// meaning of "processed", against the store's compacted window.
    pub(super) offsets: [BTreeSet<u64>; 2],
}

/// Fencing tokens reserved per block (the store's `FENCE_BLOCK`).
const FENCE_BLOCK: u64 = 1 << 16;

impl Model {
    /// A model for a new store whose tokens are learnt as `fences` says.
    pub(super) fn new(fences: Fences, pending_in_memory: usize) -> Self {
        Model {
            now: 0,
            fences,
            next_fence: 1,
            fence_reserved: 0,
            pending_in_memory,
            recs: BTreeMap::new(),
            stored: BTreeMap::new(),
            ents: BTreeMap::new(),
            res: BTreeMap::new(),
            offsets: [BTreeSet::new(), BTreeSet::new()],
        }
    }

    /// The token of an acquisition, `seen` the one the store returned (if it acquired too).
    /// Adopted, a token the store did not show (its delivery poisoned) is 0: nothing reads it
    /// but the holder check, which a finished record fails whatever the token.
    fn issue_fence(&mut self, seen: Option<u64>) -> u64 {
        if self.fences == Fences::Adopt {
            return seen.unwrap_or(0);
        }
        let fence = self.next_fence;
        self.next_fence += 1;
        if fence > self.fence_reserved {
            self.fence_reserved = fence + FENCE_BLOCK;
        }
        fence
    }

    pub(super) fn live(&self, id: (usize, usize)) -> Option<&MRec> {
        self.recs.get(&id).filter(|r| r.expires_at > self.now)
    }

    /// Whether a claim of `id` that acquires keeps its record in memory: a request (not a
    /// consumer message) claimed without `durable`, while the store's cap has room (or the key's
    /// record is in memory already).
    pub(super) fn in_memory(&self, id: (usize, usize), durable: bool) -> bool {
        !durable
            && id.0 < CONSUMER
            && (self.stored.contains_key(&id) || self.stored.len() < self.pending_in_memory)
    }

    /// A claim of `id` acquired: its record goes to memory (remembering what is stored below it)
    /// or to disk. Call before changing `recs`.
    fn acquiring(&mut self, id: (usize, usize), in_memory: bool) {
        if in_memory {
            if !self.stored.contains_key(&id) {
                let below = self.recs.get(&id).cloned();
                self.stored.insert(id, below);
            }
        } else {
            self.stored.remove(&id);
        }
    }

    /// [`Model::holder`] for a call that writes the record (complete, fail, checkpoint, a
    /// commit, a bound reservation): an in-memory record becomes the stored one.
    pub(super) fn holder_durable(
        &mut self,
        id: (usize, usize),
        fence: u64,
    ) -> Result<&mut MRec, LeaseLost> {
        if self.holder(id, fence).is_ok() {
            self.stored.remove(&id);
        }
        self.holder(id, fence)
    }

    /// A reopen: every in-memory record is gone, and what is stored below it is current again.
    /// Returns the keys that changed.
    pub(super) fn reopened(&mut self) -> Vec<(usize, usize)> {
        self.next_fence = self.fence_reserved + 1;
        let stored = std::mem::take(&mut self.stored);
        let ids = stored.keys().copied().collect();
        for (id, below) in stored {
            match below {
                Some(r) => self.recs.insert(id, r),
                None => self.recs.remove(&id),
            };
        }
        ids
    }

    /// A sweep drops expired in-memory records (what is stored below one expired no later).
    pub(super) fn swept(&mut self) {
        let now = self.now;
        let expired: Vec<_> = self
            .stored
            .keys()
            .copied()
            .filter(|id| self.recs.get(id).is_none_or(|r| r.expires_at <= now))
            .collect();
        for id in expired {
            match self.stored.remove(&id).flatten() {
                Some(r) => self.recs.insert(id, r),
                None => self.recs.remove(&id),
            };
        }
    }

    pub(super) fn claim(
        &mut self,
        id: (usize, usize),
        fp: &[u8],
        lease_s: u64,
        ret_s: u64,
        durable: bool,
        seen: Option<u64>,
    ) -> Outcome {
        let now = self.now;
        let lease_until = now + lease_s * 1000;
        let in_memory = self.in_memory(id, durable);
        let Some(rec) = self.live(id).cloned() else {
            let r = MRec {
                fp: fp.to_vec(),
                created_at: now,
                expires_at: now + ret_s * 1000,
                fence: self.issue_fence(seen),
                attempts: 1,
                takeovers: 0,
                checkpoint: None,
                state: MState::Pending { lease_until },
            };
            let out = Outcome::Acquired {
                fence: r.fence,
                until: lease_until,
                attempt: 1,
                takeover: false,
                checkpoint: None,
            };
            self.acquiring(id, in_memory);
            self.recs.insert(id, r);
            return out;
        };
        if rec.fp != fp {
            return Outcome::Mismatch;
        }
        match rec.state {
            MState::Completed(r, at) => Outcome::Completed(Replay {
                response: r,
                finished_at: at,
            }),
            MState::Failed(r, at) => Outcome::Failed(Replay {
                response: r,
                finished_at: at,
            }),
            MState::Pending { lease_until: u } if u > now => {
                Outcome::InProgress(Duration::from_millis(u - now))
            }
            MState::Pending { .. } | MState::Released => {
                let takeover = matches!(rec.state, MState::Pending { .. });
                let fence = self.issue_fence(seen);
                self.acquiring(id, in_memory);
                let r = self.recs.get_mut(&id).expect("live record");
                r.fence = fence;
                r.attempts += 1;
                r.takeovers += u32::from(takeover);
                r.expires_at = r.expires_at.max(lease_until);
                r.state = MState::Pending { lease_until };
                Outcome::Acquired {
                    fence,
                    until: lease_until,
                    attempt: r.attempts,
                    takeover,
                    checkpoint: r.checkpoint.clone(),
                }
            }
        }
    }

    /// The lease-holder check shared by complete, fail, renew and checkpoint.
    pub(super) fn holder(
        &mut self,
        id: (usize, usize),
        fence: u64,
    ) -> Result<&mut MRec, LeaseLost> {
        let now = self.now;
        let Some(r) = self.recs.get_mut(&id).filter(|r| r.expires_at > now) else {
            return Err(LeaseLost::Gone);
        };
        match r.state {
            MState::Completed(..) | MState::Failed(..) => Err(LeaseLost::Finished),
            MState::Released => Err(LeaseLost::Released),
            MState::Pending { .. } if r.fence != fence => Err(LeaseLost::TakenOver {
                current_fence: r.fence,
            }),
            MState::Pending { .. } => Ok(r),
        }
    }

    pub(super) fn live_entity(&self, id: (usize, usize)) -> Option<Versioned> {
        let (version, value) = self.ents.get(&id)?;
        value.as_ref().map(|v| Versioned {
            value: v.clone(),
            version: *version,
        })
    }

    /// The condition for an entity op: 0 absent, 1 the live version, 2 a wrong version, 3 any.
    pub(super) fn entity_expect(
        &self,
        id: (usize, usize),
        kind: u8,
    ) -> (Option<Versioned>, Expect) {
        let live = self.live_entity(id);
        let cur = self.ents.get(&id).map_or(0, |x| x.0);
        let e = match kind {
            0 => Expect::Absent,
            1 => Expect::Version(live.as_ref().map_or(1, |l| l.version)),
            2 => Expect::Version(cur + 5),
            _ => Expect::Any,
        };
        (live, e)
    }

    pub(super) fn holds(&self, id: (usize, usize), e: Expect) -> bool {
        let live = self.live_entity(id);
        match e {
            Expect::Absent => live.is_none(),
            Expect::Version(v) => live.is_some_and(|l| l.version == v),
            Expect::Any => true,
        }
    }

    /// Whether the lease of record `id` with token `fence` still holds it (pending, unexpired).
    pub(super) fn pending(&self, id: (usize, usize), fence: u64) -> bool {
        self.live(id).is_some_and(|r| {
            r.fence == fence
                && matches!(r.state, MState::Pending { lease_until } if lease_until > self.now)
        })
    }

    /// The holder of a live reservation of value `v`: a bound one lives while its lease's record
    /// is pending with the same fencing token and an unexpired lease.
    pub(super) fn holder_of(&self, v: u8) -> Option<&Holder> {
        let h = self.res.get(&v)?;
        let live = match h {
            Holder::Plain(_) => true,
            Holder::Bound(id, fence) => self.pending(*id, *fence),
        };
        live.then_some(h)
    }

    /// The plain owner of a `Reserve` or `Release` of value `v`: `OWNERS[o]`, or for `o` past
    /// them the current holder as a caller would spell it: its owner if plain (so that plain
    /// reservations get released), the key string of its lease if bound (the owner a bare key
    /// would confuse with the lease), `OWNERS[0]` if free.
    pub(super) fn owner_for(&self, v: u8, o: u8) -> Vec<u8> {
        match (OWNERS.get(usize::from(o)), self.holder_of(v)) {
            (Some(name), _) => name.as_bytes().to_vec(),
            (None, Some(Holder::Plain(p))) => p.clone(),
            (None, Some(Holder::Bound(id, _))) => KEYS[id.1].as_bytes().to_vec(),
            (None, None) => OWNERS[0].as_bytes().to_vec(),
        }
    }

    /// The owner `reservation_owner` reports for value `v`.
    pub(super) fn reservation(&self, v: u8) -> Option<Vec<u8>> {
        self.holder_of(v).map(Holder::owner)
    }

    /// Reserves `v` for `holder` unless another live holder has it. A lease's holder check is the
    /// caller's: a live reservation bound to the same record has that lease's token.
    pub(super) fn reserve(&mut self, v: u8, holder: Holder) -> Reservation {
        match self.holder_of(v) {
            Some(cur) if *cur != holder => Reservation::Taken { owner: cur.owner() },
            _ => {
                self.res.insert(v, holder);
                Reservation::Reserved
            }
        }
    }

    /// Frees `v` if the plain `owner` holds it; a bound reservation is never freed this way.
    pub(super) fn release(&mut self, v: u8, owner: &[u8]) -> Released {
        match self.holder_of(v) {
            None => Released::Absent,
            Some(Holder::Plain(o)) if o == owner => {
                self.res.remove(&v);
                Released::Released
            }
            Some(cur) => Released::NotOwner { owner: cur.owner() },
        }
    }

    pub(super) fn info(&self, id: (usize, usize)) -> Option<RecordInfo> {
        let r = self.live(id)?;
        let state = match &r.state {
            MState::Pending { lease_until } => RecordState::Pending {
                lease_until: *lease_until,
            },
            MState::Released => RecordState::Released,
            MState::Completed(resp, at) => RecordState::Completed(Replay {
                response: resp.clone(),
                finished_at: *at,
            }),
            MState::Failed(resp, at) => RecordState::Failed(Replay {
                response: resp.clone(),
                finished_at: *at,
            }),
        };
        Some(RecordInfo {
            state,
            fingerprint: r.fp.clone(),
            created_at: r.created_at,
            expires_at: r.expires_at,
            fence: r.fence,
            attempts: r.attempts,
            takeovers: r.takeovers,
            checkpoint: r.checkpoint.clone(),
        })
    }
}

/// A claim's outcome in comparable form (a real `Lease` is reduced to what the caller can see).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    Acquired {
        fence: u64,
        until: u64,
        attempt: u32,
        takeover: bool,
        checkpoint: Option<Checkpoint>,
    },
    Completed(Replay),
    Failed(Replay),
    InProgress(Duration),
    Mismatch,
}

impl From<&Claim> for Outcome {
    fn from(c: &Claim) -> Self {
        match c {
            Claim::Acquired(l) => Outcome::Acquired {
                fence: l.fence(),
                until: l.lease_until(),
                attempt: l.attempt(),
                takeover: l.is_takeover(),
                checkpoint: l.checkpoint().cloned(),
            },
            Claim::Completed(r) => Outcome::Completed(r.clone()),
            Claim::Failed(r) => Outcome::Failed(r.clone()),
            Claim::InProgress { retry_after } => Outcome::InProgress(*retry_after),
            Claim::Mismatch => Outcome::Mismatch,
            other => panic!("an outcome the model does not know: {other:?}"),
        }
    }
}
