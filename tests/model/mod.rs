//! The reference model of the store's public API and the runner that drives the store and the
//! model with one operation sequence, shared by the proptest test
//! (`tests/model_records_match_reference.rs`) and the `model` fuzz target (`fuzz/`, which includes
//! this file by path). Keep it small and obviously right.
//!
//! The key space is deliberately tiny (2 tenants × 3 keys × 2 fingerprints, 2 entities per
//! tenant-key pair, 2 consumer groups × 2 message ids, 2 reservation values held by 4 plain owners,
//! three of them equal to lease keys, or bound to leases of every tenant and namespace, 2 offset
//! partitions of offsets 0-11) so that conflicts, takeovers, mismatches and expiries happen all the
//! time, and leases of different tenants or namespaces share a key string. Every outcome is
//! compared with the model, and after every step the observable state of every key must equal the
//! model's, whether or not compaction, sweeps or reopen ran in between. Independently of the model,
//! [`Watch`] asserts the claim/CAS invariants over what the store reports.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use idemdb::__internal::InMemory;
use idemdb::{
    Checkpoint, Claim, ClaimOptions, CommitConflict, Config, Conflict, ConsumerOptions, Durability,
    Expect, FailKind, Lease, LeaseLost, ManualClock, MessageFailed, RecordInfo, RecordState,
    Released, Replay, Reservation, Response, Store, Versioned,
};

pub const TENANTS: [&str; 2] = ["a", "b"];
pub const KEYS: [&str; 3] = ["k0", "k1", "k2"];
pub const FPS: [&[u8]; 2] = [b"fp0", b"fp1"];
pub const MAX_LEASE_S: u64 = 100;
/// Consumer settings of the model; message ids live at `(g + CONSUMER, k)` in the model's map.
const CONSUMER: usize = 10;
const GROUPS: [&str; 2] = ["a", "g2"];
const MSG_MAX_ATTEMPTS: u32 = 2;
/// Offset watermarks of the model live in this group and topic, partitions 0 and 1.
const OFFSET_GROUP: &str = "g";
const OFFSET_TOPIC: &str = "t";

fn consumer_opts() -> ConsumerOptions {
    ConsumerOptions {
        max_attempts: MSG_MAX_ATTEMPTS,
        lease: Some(Duration::from_secs(10)),
        retention: Some(Duration::from_secs(60)),
    }
}

fn poison(attempts: u32) -> Response {
    Response::new(Vec::new())
        .with_meta("idemdb.poisoned", "true")
        .with_meta("attempts", attempts.to_string())
}

#[derive(Debug, Clone)]
pub enum Op {
    Claim {
        t: usize,
        k: usize,
        fp: usize,
        lease_s: u64,
        ret_s: u64,
        /// `ClaimOptions::durable_pending`: the pending record is written at the claim.
        durable: bool,
    },
    Complete {
        lease: usize,
        body: u8,
    },
    FailRetry {
        lease: usize,
    },
    FailTerminal {
        lease: usize,
        body: u8,
    },
    Renew {
        lease: usize,
        s: u64,
    },
    Checkpoint {
        lease: usize,
        phase: u8,
    },
    Forget {
        t: usize,
        k: usize,
    },
    Advance {
        s: u64,
    },
    Sweep {
        limit: usize,
    },
    Compact,
    Reopen,
    /// Unique constraint ops on value `v` of one index, by plain owner `OWNERS[o]` or, for `o`
    /// past them, the current holder (`Model::owner_for`).
    Reserve {
        v: u8,
        o: u8,
    },
    ReserveFor {
        lease: usize,
        v: u8,
    },
    Release {
        v: u8,
        o: u8,
    },
    /// A consumer delivery of message `k` to group `g` (the consumer namespace).
    Begin {
        g: usize,
        k: usize,
    },
    /// A failed processing attempt of the lease (retry, or poison at the limit).
    FailMessage {
        lease: usize,
    },
    /// One commit: an entity write and the completion of a lease, all or nothing.
    CommitPutComplete {
        lease: usize,
        t: usize,
        k: usize,
        expect: u8,
        val: u8,
    },
    EntityPut {
        t: usize,
        k: usize,
        expect: u8,
        val: u8,
    },
    EntityDelete {
        t: usize,
        k: usize,
        expect: u8,
    },
    /// Offset `offset` of partition `p` (group "g", topic "t") processed out of order.
    MarkProcessed {
        p: u32,
        offset: u64,
    },
    /// Every offset of partition `p` up to `offset` processed.
    CommitWatermark {
        p: u32,
        offset: u64,
    },
}

impl Op {
    /// Decodes fuzzer bytes into at most `max_ops` operations. One byte selects the operation
    /// (weighted like the proptest strategy: 41 slots, except that compaction and reopen take a
    /// second byte, below 64, and are four times rarer), the following bytes its parameters,
    /// reduced modulo the tiny key space; a missing parameter byte reads as zero. Every byte
    /// string decodes, so the fuzzer never wastes an input.
    pub fn decode_all(data: &[u8], max_ops: usize) -> Vec<Op> {
        let mut it = data.iter().copied();
        let mut ops = Vec::new();
        while ops.len() < max_ops {
            let Some(sel) = it.next() else { break };
            let mut p = || it.next().unwrap_or(0);
            let op = match sel % 41 {
                0..=5 => {
                    let (t, k, fp) = (
                        usize::from(p() % 2),
                        usize::from(p() % 3),
                        usize::from(p() % 2),
                    );
                    let ret_s = 20 + u64::from(p() % 100);
                    let lease_s = (1 + u64::from(p() % 39)).min(ret_s);
                    Op::Claim {
                        t,
                        k,
                        fp,
                        lease_s,
                        ret_s,
                        durable: p() % 4 == 0,
                    }
                }
                6..=8 => Op::Complete {
                    lease: usize::from(p()),
                    body: p(),
                },
                9 => Op::FailRetry {
                    lease: usize::from(p()),
                },
                10 => Op::FailTerminal {
                    lease: usize::from(p()),
                    body: p(),
                },
                11 => Op::Renew {
                    lease: usize::from(p()),
                    s: 1 + u64::from(p()) % (MAX_LEASE_S - 1),
                },
                12 => Op::Checkpoint {
                    lease: usize::from(p()),
                    phase: p(),
                },
                13 => Op::Forget {
                    t: usize::from(p() % 2),
                    k: usize::from(p() % 3),
                },
                14..=17 => Op::Advance {
                    s: 1 + u64::from(p() % 59),
                },
                18 => Op::Sweep {
                    limit: 1 + usize::from(p() % 3),
                },
                19..=20 => {
                    let (t, k, expect) = (usize::from(p() % 2), usize::from(p() % 3), p() % 4);
                    Op::EntityPut {
                        t,
                        k,
                        expect,
                        val: p(),
                    }
                }
                21 => Op::EntityDelete {
                    t: usize::from(p() % 2),
                    k: usize::from(p() % 3),
                    expect: p() % 4,
                },
                22..=23 => {
                    let lease = usize::from(p());
                    let (t, k, expect) = (usize::from(p() % 2), usize::from(p() % 3), p() % 4);
                    Op::CommitPutComplete {
                        lease,
                        t,
                        k,
                        expect,
                        val: p(),
                    }
                }
                24..=27 => Op::Begin {
                    g: usize::from(p() % 2),
                    k: usize::from(p() % 2),
                },
                28..=30 => Op::FailMessage {
                    lease: usize::from(p()),
                },
                31..=32 => Op::Reserve {
                    v: p() % 2,
                    o: p() % 8,
                },
                33..=34 => Op::ReserveFor {
                    lease: usize::from(p()),
                    v: p() % 2,
                },
                35 => Op::Release {
                    v: p() % 2,
                    o: p() % 8,
                },
                // Compaction and reopen cost a hundred steps each (a reopen writes and parses
                // RocksDB's options file): one in four of their selector bytes takes them, the
                // rest decode as a sweep, so an input holds a few of them, not dozens.
                36 | 37 if p() >= 64 => Op::Sweep { limit: 3 },
                36 => Op::Compact,
                37 => Op::Reopen,
                38..=39 => Op::MarkProcessed {
                    p: u32::from(p() % 2),
                    offset: u64::from(p() % 12),
                },
                _ => Op::CommitWatermark {
                    p: u32::from(p() % 2),
                    offset: u64::from(p() % 12),
                },
            };
            ops.push(op);
        }
        ops
    }
}

#[derive(Debug, Clone, PartialEq)]
enum MState {
    Pending { lease_until: u64 },
    Released,
    Completed(Response, u64),
    Failed(Response, u64),
}

#[derive(Debug, Clone)]
struct MRec {
    fp: Vec<u8>,
    created_at: u64,
    expires_at: u64,
    fence: u64,
    attempts: u32,
    takeovers: u32,
    checkpoint: Option<Checkpoint>,
    state: MState,
}

/// Who holds a reservation: a plain owner string, or the record of a lease (its model id, which
/// tells namespace, tenant and key apart) with the lease's fencing token. A bound reservation is
/// never held by an owner string, not even the lease's key, and reports an empty owner.
#[derive(Debug, Clone, PartialEq)]
enum Holder {
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
    fn other_lease_of_key(&self, id: (usize, usize)) -> bool {
        matches!(self, Holder::Bound(b, _) if *b != id && b.1 == id.1)
    }
}

/// The plain owners of reservations: one that no lease can be confused with, and one equal to each
/// lease key (`KEYS`), which must never match a reservation bound to a lease of that key. An owner
/// index past these names the current holder (see [`Model::owner_for`]).
pub const OWNERS: [&str; 4] = ["owner-0", "k0", "k1", "k2"];

/// An entity's version and its value (`None`: a tombstone).
type EntityState = (u64, Option<Vec<u8>>);

/// The reference model: obviously right, and nothing more.
struct Model {
    now: u64,
    /// The next fencing token.
    next_fence: u64,
    /// The store reserves tokens in blocks (docs/design.md, "Fencing tokens"): the first token
    /// above `fence_reserved` reserves up to it plus `FENCE_BLOCK`, and a reopen resumes after the
    /// reserved block.
    fence_reserved: u64,
    recs: BTreeMap<(usize, usize), MRec>,
    /// Request keys whose record exists only in memory (a claim that acquired wrote nothing,
    /// docs/design.md "In-memory pending records"), with the stored record below it (`None`:
    /// nothing stored). A reopen drops the in-memory records: the stored ones come back.
    stored: BTreeMap<(usize, usize), Option<MRec>>,
    /// Reservations by value: a plain owner, or the lease's (model id, fence) when bound.
    res: BTreeMap<u8, Holder>,
    /// Versioned entities: (version, value or tombstone).
    ents: BTreeMap<(usize, usize), EntityState>,
    /// Processed offsets of partitions 0 and 1 (group "g", topic "t"): a plain set, the obvious
    /// meaning of "processed", against the store's compacted window.
    offsets: [BTreeSet<u64>; 2],
}

/// The model store's `Config::pending_in_memory`: small, so that claims past the cap (written
/// durably) happen too.
const PENDING_IN_MEMORY: usize = 2;

/// Fencing tokens reserved per block (the store's `FENCE_BLOCK`).
const FENCE_BLOCK: u64 = 1 << 16;

impl Model {
    fn issue_fence(&mut self) -> u64 {
        let fence = self.next_fence;
        self.next_fence += 1;
        if fence > self.fence_reserved {
            self.fence_reserved = fence + FENCE_BLOCK;
        }
        fence
    }

    fn live(&self, id: (usize, usize)) -> Option<&MRec> {
        self.recs.get(&id).filter(|r| r.expires_at > self.now)
    }

    /// Whether a claim of `id` that acquires keeps its record in memory: a request (not a
    /// consumer message) claimed without `durable`, while the store's cap has room (or the key's
    /// record is in memory already).
    fn in_memory(&self, id: (usize, usize), durable: bool) -> bool {
        !durable
            && id.0 < CONSUMER
            && (self.stored.contains_key(&id) || self.stored.len() < PENDING_IN_MEMORY)
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
    fn holder_durable(&mut self, id: (usize, usize), fence: u64) -> Result<&mut MRec, LeaseLost> {
        if self.holder(id, fence).is_ok() {
            self.stored.remove(&id);
        }
        self.holder(id, fence)
    }

    /// A reopen: every in-memory record is gone, and what is stored below it is current again.
    /// Returns the keys that changed.
    fn reopened(&mut self) -> Vec<(usize, usize)> {
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
    fn swept(&mut self) {
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

    fn claim(
        &mut self,
        id: (usize, usize),
        fp: &[u8],
        lease_s: u64,
        ret_s: u64,
        durable: bool,
    ) -> Outcome {
        let now = self.now;
        let lease_until = now + lease_s * 1000;
        let in_memory = self.in_memory(id, durable);
        let Some(rec) = self.live(id).cloned() else {
            let r = MRec {
                fp: fp.to_vec(),
                created_at: now,
                expires_at: now + ret_s * 1000,
                fence: self.issue_fence(),
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
                let fence = self.issue_fence();
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
    fn holder(&mut self, id: (usize, usize), fence: u64) -> Result<&mut MRec, LeaseLost> {
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

    fn live_entity(&self, id: (usize, usize)) -> Option<Versioned> {
        let (version, value) = self.ents.get(&id)?;
        value.as_ref().map(|v| Versioned {
            value: v.clone(),
            version: *version,
        })
    }

    /// The condition for an entity op: 0 absent, 1 the live version, 2 a wrong version, 3 any.
    fn entity_expect(&self, id: (usize, usize), kind: u8) -> (Option<Versioned>, Expect) {
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

    fn holds(&self, id: (usize, usize), e: Expect) -> bool {
        let live = self.live_entity(id);
        match e {
            Expect::Absent => live.is_none(),
            Expect::Version(v) => live.is_some_and(|l| l.version == v),
            Expect::Any => true,
        }
    }

    /// Whether the lease of record `id` with token `fence` still holds it (pending, unexpired).
    fn pending(&self, id: (usize, usize), fence: u64) -> bool {
        self.live(id).is_some_and(|r| {
            r.fence == fence
                && matches!(r.state, MState::Pending { lease_until } if lease_until > self.now)
        })
    }

    /// The holder of a live reservation of value `v`: a bound one lives while its lease's record
    /// is pending with the same fencing token and an unexpired lease.
    fn holder_of(&self, v: u8) -> Option<&Holder> {
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
    fn owner_for(&self, v: u8, o: u8) -> Vec<u8> {
        match (OWNERS.get(usize::from(o)), self.holder_of(v)) {
            (Some(name), _) => name.as_bytes().to_vec(),
            (None, Some(Holder::Plain(p))) => p.clone(),
            (None, Some(Holder::Bound(id, _))) => KEYS[id.1].as_bytes().to_vec(),
            (None, None) => OWNERS[0].as_bytes().to_vec(),
        }
    }

    /// The owner `reservation_owner` reports for value `v`.
    fn reservation(&self, v: u8) -> Option<Vec<u8>> {
        self.holder_of(v).map(Holder::owner)
    }

    /// Reserves `v` for `holder` unless another live holder has it. A lease's holder check is the
    /// caller's: a live reservation bound to the same record has that lease's token.
    fn reserve(&mut self, v: u8, holder: Holder) -> Reservation {
        match self.holder_of(v) {
            Some(cur) if *cur != holder => Reservation::Taken { owner: cur.owner() },
            _ => {
                self.res.insert(v, holder);
                Reservation::Reserved
            }
        }
    }

    /// Frees `v` if the plain `owner` holds it; a bound reservation is never freed this way.
    fn release(&mut self, v: u8, owner: &[u8]) -> Released {
        match self.holder_of(v) {
            None => Released::Absent,
            Some(Holder::Plain(o)) if o == owner => {
                self.res.remove(&v);
                Released::Released
            }
            Some(cur) => Released::NotOwner { owner: cur.owner() },
        }
    }

    fn info(&self, id: (usize, usize)) -> Option<RecordInfo> {
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
enum Outcome {
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

/// The claim/CAS invariants, asserted over what the store reports, independently of the model:
/// at most one live lease per key (a claim never acquires over a live lease or a finished record),
/// fencing tokens and entity versions only increase, a completed or failed record never changes
/// until it expires or is forgotten, and an expired record is never returned.
#[derive(Default)]
pub struct Watch {
    /// The largest fencing token any claim or delivery returned.
    max_fence: u64,
    /// Per request key: the largest fence `get` reported.
    fences: BTreeMap<(usize, usize), u64>,
    /// Per entity: the largest version a write or `get_entity` reported.
    versions: BTreeMap<(usize, usize), u64>,
    /// Per request key: the completed or failed record as first seen, until it expires or is
    /// forgotten.
    finished: BTreeMap<(usize, usize), RecordInfo>,
}

impl Watch {
    /// A claim or delivery acquired a lease: its token is above every token issued before.
    pub fn acquired(&mut self, fence: u64, ctx: &str) {
        assert!(
            fence > self.max_fence,
            "{ctx}: fencing token {fence} is not above the largest issued, {}",
            self.max_fence
        );
        self.max_fence = fence;
    }

    /// A claim acquired at `now` where `get` reported `before` just before: there was no live
    /// lease and no finished record.
    pub fn acquired_over(&self, before: Option<&RecordInfo>, now: u64, ctx: &str) {
        if let Some(b) = before {
            match b.state {
                RecordState::Released => {}
                RecordState::Pending { lease_until } => assert!(
                    lease_until <= now,
                    "{ctx}: acquired while a lease was live until {lease_until} (now {now})"
                ),
                _ => panic!("{ctx}: acquired over a finished record {b:?}"),
            }
        }
    }

    /// An entity write returned version `v`: above every version reported before.
    pub fn wrote(&mut self, id: (usize, usize), v: u64, ctx: &str) {
        let last = self.versions.entry(id).or_default();
        assert!(v > *last, "{ctx}: entity version {v} is not above {last}");
        *last = v;
    }

    /// `get_entity` reported version `v` (if live): never below what was reported before.
    pub fn entity(&mut self, id: (usize, usize), v: Option<u64>, ctx: &str) {
        if let Some(v) = v {
            let last = self.versions.entry(id).or_default();
            assert!(
                v >= *last,
                "{ctx}: entity version went back from {last} to {v}"
            );
            *last = v;
        }
    }

    /// The record of `id` was forgotten: a finished record may change from here on.
    pub fn forgotten(&mut self, id: (usize, usize)) {
        self.finished.remove(&id);
    }

    /// A reopen dropped the in-memory record of request key `id`: the stored record below it,
    /// with an older fence, is current again (tokens issued stay above it: `acquired` still
    /// holds).
    pub fn reverted(&mut self, id: (usize, usize)) {
        self.fences.remove(&id);
    }

    /// `get` reported `got` for request key `id` at `now`.
    pub fn record(&mut self, id: (usize, usize), got: Option<&RecordInfo>, now: u64, ctx: &str) {
        if let Some(snap) = self.finished.get(&id) {
            if snap.expires_at > now {
                assert_eq!(
                    got,
                    Some(snap),
                    "{ctx}: a finished record changed before it expired"
                );
            } else {
                self.finished.remove(&id);
            }
        }
        let Some(info) = got else { return };
        assert!(
            info.expires_at > now,
            "{ctx}: an expired record was returned (expires_at {}, now {now})",
            info.expires_at
        );
        let last = self.fences.entry(id).or_default();
        assert!(
            info.fence >= *last && info.fence <= self.max_fence,
            "{ctx}: record fence {} is below {last} or above every issued token {}",
            info.fence,
            self.max_fence
        );
        *last = info.fence;
        match info.state {
            RecordState::Pending { lease_until } => assert!(
                lease_until <= info.expires_at,
                "{ctx}: the lease ({lease_until}) outlasts its record ({})",
                info.expires_at
            ),
            RecordState::Completed(_) | RecordState::Failed(_) => {
                self.finished.entry(id).or_insert_with(|| info.clone());
            }
            RecordState::Released => {}
            ref other => panic!("{ctx}: unknown record state {other:?}"),
        }
    }
}

/// Where the runner's store keeps its database.
pub enum Backend<'a> {
    /// Files in a new temporary directory, as every real store (the proptest test).
    Disk,
    /// A new in-memory environment (RocksDB's), shared by the store and its reopens: an input
    /// then costs no file system work.
    InMemory,
    /// The store of a [`Session`], kept open from one run to the next and emptied before each
    /// (`idemdb::__internal::reset`): the fuzz target, for which opening a store per input would
    /// cost more than running it.
    Reused(&'a mut Session),
}

/// A store, its clock and (for the in-memory backends) its environment, reused across runs by
/// [`Backend::Reused`]. A `Reopen` step replaces the store with a reopened one, which the next
/// run reuses.
pub struct Session {
    dir: tempfile::TempDir,
    mem: Option<InMemory>,
    clock: ManualClock,
    store: Option<Store>,
    used: bool,
}

impl Session {
    /// A session whose store lives in a new in-memory environment.
    pub fn in_memory() -> Self {
        Self::new(Some(InMemory::new().unwrap()))
    }

    fn new(mem: Option<InMemory>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let store = open(dir.path(), &clock, mem.as_ref());
        Session {
            dir,
            mem,
            clock,
            store: Some(store),
            used: false,
        }
    }

    /// The store, emptied and with the clock at its start if an earlier run used it: from the
    /// API's side, a new store.
    fn begin(&mut self) -> Store {
        let store = self
            .store
            .take()
            .expect("a session's store is put back after every run");
        if self.used {
            self.clock
                .set(idemdb::Clock::now_millis(&ManualClock::default()));
            idemdb::__internal::reset(&store).unwrap();
        }
        self.used = true;
        store
    }
}

/// A buffered store on the manual clock with small memtables and cache (so flushes happen and
/// opening is cheap: the fuzz target opens one per input) and few lock stripes (so unrelated keys
/// share stripes); in `mem` when given.
fn open(dir: &std::path::Path, clock: &ManualClock, mem: Option<&InMemory>) -> Store {
    let cfg = Config::new(dir)
        .clock(clock.clone())
        .durability(Durability::Buffered)
        .sweep_interval(None)
        .max_lease(Duration::from_secs(MAX_LEASE_S))
        .write_buffer_bytes(1 << 20)
        .cache_bytes(1 << 20)
        .lock_stripes(16)
        .pending_in_memory(PENDING_IN_MEMORY);
    match mem {
        Some(mem) => cfg.in_memory(mem),
        None => cfg,
    }
    .open()
    .unwrap()
}

fn resp(body: u8) -> Response {
    Response::new(vec![body; usize::from(body % 7)]).with_status(200 + u16::from(body % 3))
}

fn lost_name(r: &Result<(), LeaseLost>) -> &'static str {
    match r {
        Ok(()) => "ok",
        Err(LeaseLost::TakenOver { .. }) => "taken_over",
        Err(LeaseLost::Finished) => "finished",
        Err(LeaseLost::Released) => "released",
        Err(LeaseLost::Gone) => "gone",
        Err(_) => "other",
    }
}

/// Runs `ops` against a new store (in a new temporary directory, on disk or in a new in-memory
/// environment, or a reused session's store emptied: see [`Backend`]) and the model, comparing
/// every outcome and, after every step, the observable state of every key; panics on the first
/// divergence or broken invariant. `count(operation, outcome)` is called once per step.
pub fn run(ops: Vec<Op>, backend: Backend<'_>, count: &mut dyn FnMut(&'static str, &'static str)) {
    match backend {
        Backend::Disk => run_in(&mut Session::new(None), ops, count),
        Backend::InMemory => run_in(&mut Session::in_memory(), ops, count),
        Backend::Reused(session) => run_in(session, ops, count),
    }
}

fn run_in(session: &mut Session, ops: Vec<Op>, count: &mut dyn FnMut(&'static str, &'static str)) {
    let mut store = session.begin();
    let (dir, mem, clock) = (session.dir.path(), session.mem.as_ref(), &session.clock);
    let mut model = Model {
        now: 0,
        next_fence: 1,
        fence_reserved: 0,
        recs: BTreeMap::new(),
        stored: BTreeMap::new(),
        ents: BTreeMap::new(),
        res: BTreeMap::new(),
        offsets: [BTreeSet::new(), BTreeSet::new()],
    };
    let mut leases: Vec<(Lease, (usize, usize))> = Vec::new();
    let mut watch = Watch::default();
    let steps = ops.len();
    for (step, op) in ops.into_iter().enumerate() {
        model.now = store.now();
        let ctx = format!("step {step}: {op:?}");
        // Which parts of the state this step can change, beside records and reservations (which
        // any step can: leases run out, holders end them): offsets and entities change only
        // through their own operations, or a reopen or compaction rewriting what is stored. The
        // other parts are compared after the last step too, so a step that damages them is found.
        let last = step + 1 == steps;
        let rewrites = matches!(op, Op::Reopen | Op::Compact) || last;
        let offsets_may_change =
            rewrites || matches!(op, Op::MarkProcessed { .. } | Op::CommitWatermark { .. });
        let entities_may_change = rewrites
            || matches!(
                op,
                Op::EntityPut { .. } | Op::EntityDelete { .. } | Op::CommitPutComplete { .. }
            );
        match op {
            Op::Claim {
                t,
                k,
                fp,
                lease_s,
                ret_s,
                durable,
            } => {
                let opts = ClaimOptions::default()
                    .lease(Duration::from_secs(lease_s))
                    .retention(Duration::from_secs(ret_s))
                    .durable_pending(durable);
                let before = store.get(TENANTS[t], KEYS[k]).unwrap();
                let got = store.claim(TENANTS[t], KEYS[k], FPS[fp], opts).unwrap();
                if let Claim::Acquired(l) = &got {
                    watch.acquired(l.fence(), &ctx);
                    watch.acquired_over(before.as_ref(), model.now, &ctx);
                }
                let want = model.claim((t, k), FPS[fp], lease_s, ret_s, durable);
                assert_eq!(Outcome::from(&got), want, "{ctx}");
                let name = match &want {
                    Outcome::Acquired { takeover: true, .. } => "takeover",
                    Outcome::Acquired { attempt: 1, .. } => "acquired new",
                    Outcome::Acquired { .. } => "acquired after release",
                    Outcome::Completed(_) => "replay completed",
                    Outcome::Failed(_) => "replay failure",
                    Outcome::InProgress(_) => "in progress",
                    Outcome::Mismatch => "mismatch",
                };
                count("claim", name);
                if let Claim::Acquired(l) = got {
                    leases.push((l, (t, k)));
                }
            }
            Op::Complete { lease, body }
            | Op::FailTerminal { lease, body }
            | Op::Checkpoint { lease, phase: body }
                if leases.is_empty() =>
            {
                let _ = (lease, body);
            }
            Op::FailRetry { .. } | Op::Renew { .. } if leases.is_empty() => {}
            Op::Complete { lease, body } => {
                let (l, id) = &leases[lease % leases.len()];
                let got = store.complete(l, resp(body)).unwrap();
                let now = model.now;
                let want = model.holder_durable(*id, l.fence()).map(|r| {
                    r.checkpoint = None;
                    r.state = MState::Completed(resp(body), now);
                });
                assert_eq!(got, want, "{ctx}");
                count("complete", lost_name(&got));
            }
            Op::FailRetry { lease } => {
                let (l, id) = &leases[lease % leases.len()];
                let got = store.fail(l, FailKind::Retryable).unwrap();
                let want = model
                    .holder_durable(*id, l.fence())
                    .map(|r| r.state = MState::Released);
                assert_eq!(got, want, "{ctx}");
                count("fail retryable", lost_name(&got));
            }
            Op::FailTerminal { lease, body } => {
                let (l, id) = &leases[lease % leases.len()];
                let got = store.fail(l, FailKind::Terminal(resp(body))).unwrap();
                let now = model.now;
                let want = model.holder_durable(*id, l.fence()).map(|r| {
                    r.checkpoint = None;
                    r.state = MState::Failed(resp(body), now);
                });
                assert_eq!(got, want, "{ctx}");
                count("fail terminal", lost_name(&got));
            }
            Op::Renew { lease, s } => {
                let i = lease % leases.len();
                let id = leases[i].1;
                let fence = leases[i].0.fence();
                let got = store
                    .renew(&mut leases[i].0, Duration::from_secs(s))
                    .unwrap();
                let until = model.now + s * 1000;
                let want = model.holder(id, fence).map(|r| {
                    r.state = MState::Pending { lease_until: until };
                    r.expires_at = r.expires_at.max(until);
                });
                assert_eq!(got, want, "{ctx}");
                if got.is_ok() {
                    assert_eq!(leases[i].0.lease_until(), until);
                }
                count("renew", lost_name(&got));
            }
            Op::Checkpoint { lease, phase } => {
                let (l, id) = &leases[lease % leases.len()];
                let cp = Checkpoint {
                    phase: format!("phase-{phase}"),
                    state: vec![phase; 3],
                };
                let got = store
                    .checkpoint(l, cp.phase.clone(), cp.state.clone())
                    .unwrap();
                let want = model
                    .holder_durable(*id, l.fence())
                    .map(|r| r.checkpoint = Some(cp));
                assert_eq!(got, want, "{ctx}");
                count("checkpoint", lost_name(&got));
            }
            Op::Forget { t, k } => {
                let existed = store.forget(TENANTS[t], KEYS[k]).unwrap();
                // Physically present (expired or not) unless sweep or compaction removed it, so
                // only a live record is certain to be reported.
                if model.live((t, k)).is_some() {
                    assert!(existed, "{ctx}");
                }
                model.recs.remove(&(t, k));
                model.stored.remove(&(t, k));
                watch.forgotten((t, k));
                count("forget", "");
            }
            Op::Advance { s } => {
                clock.advance(Duration::from_secs(s));
                count("advance clock", "");
            }
            Op::Sweep { limit } => {
                store.sweep(limit).unwrap();
                model.swept();
                count("sweep", "");
            }
            Op::Compact => {
                store.compact().unwrap();
                count("compact", "");
            }
            Op::Reopen => {
                drop(store);
                store = open(dir, clock, mem);
                model.next_fence = model.fence_reserved + 1;
                // In-memory records are gone: their keys read as what is stored below them.
                for id in model.reopened() {
                    watch.reverted(id);
                }
                count("reopen", "");
            }
            Op::MarkProcessed { p, offset } => {
                store
                    .mark_processed(OFFSET_GROUP, OFFSET_TOPIC, p, offset)
                    .unwrap();
                model.offsets[p as usize].insert(offset);
                count("mark processed", "");
            }
            Op::CommitWatermark { p, offset } => {
                store
                    .commit_watermark(OFFSET_GROUP, OFFSET_TOPIC, p, offset)
                    .unwrap();
                model.offsets[p as usize].extend(0..=offset);
                count("commit watermark", "");
            }
            Op::EntityPut { t, k, expect, val } => {
                let (live, e) = model.entity_expect((t, k), expect);
                let want = if model.holds((t, k), e) {
                    let v = model.ents.get(&(t, k)).map_or(0, |x| x.0) + 1;
                    model.ents.insert((t, k), (v, Some(vec![val])));
                    Ok(v)
                } else {
                    Err(Conflict { current: live })
                };
                let got = store.put_entity(TENANTS[t], KEYS[k], e, vec![val]).unwrap();
                if let Ok(v) = got {
                    watch.wrote((t, k), v, &ctx);
                }
                assert_eq!(got, want, "{ctx}");
                count("entity put", if got.is_ok() { "ok" } else { "conflict" });
            }
            Op::CommitPutComplete { .. } if leases.is_empty() => {}
            Op::CommitPutComplete {
                lease,
                t,
                k,
                expect,
                val,
            } => {
                let (l, id) = &leases[lease % leases.len()];
                let (live, e) = model.entity_expect((t, k), expect);
                let now = model.now;
                let want = if !model.holds((t, k), e) {
                    Err(CommitConflict::Condition {
                        op: 0,
                        current: live,
                    })
                } else {
                    match model.holder_durable(*id, l.fence()) {
                        Err(lost) => Err(CommitConflict::Lease { op: 1, lost }),
                        Ok(r) => {
                            r.checkpoint = None;
                            r.state = MState::Completed(resp(val), now);
                            let v = model.ents.get(&(t, k)).map_or(0, |x| x.0) + 1;
                            model.ents.insert((t, k), (v, Some(vec![val])));
                            Ok(vec![Some(v), None])
                        }
                    }
                };
                let got = store
                    .commit()
                    .put(TENANTS[t], KEYS[k], e, vec![val])
                    .complete(l, resp(val))
                    .apply()
                    .unwrap()
                    .map(|c| c.versions);
                if let Ok(vs) = &got {
                    if let Some(Some(v)) = vs.first() {
                        watch.wrote((t, k), *v, &ctx);
                    }
                }
                assert_eq!(got, want, "{ctx}");
                count(
                    "commit",
                    match &got {
                        Ok(_) => "ok",
                        Err(CommitConflict::Condition { .. }) => "condition",
                        Err(_) => "lease",
                    },
                );
            }
            Op::Begin { g, k } => {
                let id = (g + CONSUMER, k);
                let now = model.now;
                let want = match model.claim(id, &[], 10, 60, true) {
                    Outcome::Acquired { attempt, fence, .. } if attempt > MSG_MAX_ATTEMPTS => {
                        let r = model.holder_durable(id, fence).expect("just acquired");
                        r.checkpoint = None;
                        r.state = MState::Failed(poison(attempt - 1), now);
                        format!("poisoned {}", attempt - 1)
                    }
                    Outcome::Acquired {
                        fence,
                        until,
                        attempt,
                        takeover,
                        ..
                    } => {
                        format!("process {fence} {until} {attempt} {takeover}")
                    }
                    Outcome::Completed(r) => format!("duplicate {r:?}"),
                    Outcome::Failed(r) => match r.response.meta.get("attempts") {
                        Some(a) if r.response.meta.contains_key("idemdb.poisoned") => {
                            format!("poisoned {a}")
                        }
                        _ => format!("duplicate {r:?}"),
                    },
                    Outcome::InProgress(d) => format!("in flight {d:?}"),
                    Outcome::Mismatch => "mismatch".into(),
                };
                let got = match store.begin(GROUPS[g], KEYS[k], consumer_opts()).unwrap() {
                    idemdb::Begin::Process(l) => {
                        watch.acquired(l.fence(), &ctx);
                        let s = format!(
                            "process {} {} {} {}",
                            l.fence(),
                            l.lease_until(),
                            l.attempt(),
                            l.is_takeover()
                        );
                        leases.push((l, id));
                        s
                    }
                    idemdb::Begin::Completed(r) | idemdb::Begin::Failed(r) => {
                        format!("duplicate {r:?}")
                    }
                    idemdb::Begin::Poisoned { attempts } => format!("poisoned {attempts}"),
                    idemdb::Begin::InProgress { retry_after } => {
                        format!("in flight {retry_after:?}")
                    }
                    other => panic!("an outcome the model does not know: {other:?}"),
                };
                assert_eq!(got, want, "{ctx}");
                count(
                    "begin",
                    match got.split(' ').next() {
                        Some("process") => "process",
                        Some("duplicate") => "duplicate",
                        Some("poisoned") => "poisoned",
                        _ => "in flight",
                    },
                );
            }
            Op::FailMessage { .. } if leases.is_empty() => {}
            Op::FailMessage { lease } => {
                // Fail one of the three newest leases: usually a delivery just begun, so that
                // messages reach their attempt limit within a sequence.
                let i = leases.len() - 1 - lease % leases.len().min(3);
                let (l, id) = &leases[i];
                let now = model.now;
                let attempts = l.attempt();
                let want = model.holder_durable(*id, l.fence()).map(|r| {
                    if attempts >= MSG_MAX_ATTEMPTS {
                        r.checkpoint = None;
                        r.state = MState::Failed(poison(attempts), now);
                        MessageFailed::Poisoned { attempts }
                    } else {
                        r.state = MState::Released;
                        MessageFailed::WillRetry { attempts }
                    }
                });
                let got = store.fail_message(l, consumer_opts()).unwrap();
                assert_eq!(got, want, "{ctx}");
                count(
                    "fail message",
                    match got {
                        Ok(MessageFailed::Poisoned { .. }) => "poisoned",
                        Ok(_) => "retry",
                        Err(_) => "lost",
                    },
                );
            }
            Op::Reserve { v, o } => {
                let owner = &model.owner_for(v, o)[..];
                // Held by a lease whose key is this owner string (the store must not confuse them).
                let by_lease_of_key = matches!(
                    model.holder_of(v),
                    Some(Holder::Bound(id, _)) if KEYS[id.1].as_bytes() == owner
                );
                let want = model.reserve(v, Holder::Plain(owner.to_vec()));
                let got = store.reserve("idx", &[&[v]], owner).unwrap();
                assert_eq!(got, want, "{ctx}");
                count(
                    "reserve",
                    match got {
                        Reservation::Reserved => "reserved",
                        _ if by_lease_of_key => "taken by a lease of that key string",
                        _ => "taken",
                    },
                );
            }
            Op::ReserveFor { .. } if leases.is_empty() => {}
            Op::ReserveFor { lease, v } => {
                // A quarter of the time any lease (often one that ended); otherwise the newest
                // still pending lease of another record with the key string of the lease holding
                // `v` (the one a bare key would confuse) if there is one, or else one of the four
                // newest leases, usually still pending, so that bound reservations meet each other
                // and plain owners while they are live.
                let confusable = match model.holder_of(v) {
                    Some(Holder::Bound(h, _)) => leases.iter().rposition(|(l, id)| {
                        *id != *h && id.1 == h.1 && model.pending(*id, l.fence())
                    }),
                    _ => None,
                };
                let i = match confusable {
                    _ if lease % 4 == 3 => lease % leases.len(),
                    Some(i) => i,
                    None => leases.len() - 1 - (lease / 4) % leases.len().min(4),
                };
                let (l, id) = &leases[i];
                // Held by a lease of another record with the same key string (another tenant's,
                // or the consumer namespace's): the lease's bare key must not make it the owner.
                let by_other_of_key = model
                    .holder_of(v)
                    .is_some_and(|h| h.other_lease_of_key(*id));
                let want = match model.holder_durable(*id, l.fence()) {
                    Err(lost) => Err(lost),
                    Ok(_) => Ok(model.reserve(v, Holder::Bound(*id, l.fence()))),
                };
                let got = store.reserve_for(l, "idx", &[&[v]]).unwrap();
                assert_eq!(got, want, "{ctx}");
                count(
                    "reserve for lease",
                    match &got {
                        Ok(Reservation::Reserved) => "reserved",
                        Ok(_) if by_other_of_key => "taken by another lease of that key string",
                        Ok(_) => "taken",
                        Err(_) => "lost",
                    },
                );
            }
            Op::Release { v, o } => {
                let owner = &model.owner_for(v, o)[..];
                let by_lease_of_key = matches!(
                    model.holder_of(v),
                    Some(Holder::Bound(id, _)) if KEYS[id.1].as_bytes() == owner
                );
                let want = model.release(v, owner);
                let got = store.release_reservation("idx", &[&[v]], owner).unwrap();
                assert_eq!(got, want, "{ctx}");
                count(
                    "release",
                    match got {
                        Released::Released => "released",
                        Released::Absent => "absent",
                        _ if by_lease_of_key => "not owner, a lease of that key string",
                        _ => "not owner",
                    },
                );
            }
            Op::EntityDelete { t, k, expect } => {
                let (live, e) = model.entity_expect((t, k), expect);
                let want = if !model.holds((t, k), e) {
                    Err(Conflict { current: live })
                } else if live.is_none() {
                    Ok(None)
                } else {
                    let v = model.ents.get(&(t, k)).map_or(0, |x| x.0) + 1;
                    model.ents.insert((t, k), (v, None));
                    Ok(Some(v))
                };
                let got = store.delete_entity(TENANTS[t], KEYS[k], e).unwrap();
                if let Ok(Some(v)) = got {
                    watch.wrote((t, k), v, &ctx);
                }
                assert_eq!(got, want, "{ctx}");
                count("entity delete", if got.is_ok() { "ok" } else { "conflict" });
            }
        }
        // After every step the observable state equals the model's (offsets and entities after
        // every step that can change them, and after the last).
        model.now = store.now();
        for (p, set) in model.offsets.iter().enumerate() {
            if !offsets_may_change {
                break;
            }
            let w = store
                .offset_window(OFFSET_GROUP, OFFSET_TOPIC, p as u32)
                .unwrap();
            let mark = (0..).take_while(|o| set.contains(o)).last();
            assert_eq!(w.watermark(), mark, "{ctx}: watermark of partition {p}");
            for o in 0..14 {
                assert_eq!(
                    w.contains(o),
                    set.contains(&o),
                    "{ctx}: offset {o} of partition {p}"
                );
            }
            let probe = (step % 14) as u64;
            assert_eq!(
                store
                    .is_processed(OFFSET_GROUP, OFFSET_TOPIC, p as u32, probe)
                    .unwrap(),
                set.contains(&probe),
                "{ctx}: is_processed({probe}) of partition {p}"
            );
        }
        for (t, tenant) in TENANTS.iter().enumerate() {
            for (k, key) in KEYS.iter().enumerate() {
                let got = store.get(tenant, key).unwrap();
                watch.record((t, k), got.as_ref(), model.now, &ctx);
                assert_eq!(got, model.info((t, k)), "{ctx}: state of {tenant}/{key}");
                if t == 0 && k < 2 {
                    let v = k as u8;
                    assert_eq!(
                        store.reservation_owner("idx", &[&[v]]).unwrap(),
                        model.reservation(v),
                        "{ctx}: reservation {v}"
                    );
                }
                if entities_may_change {
                    let ent = store.get_entity(tenant, key).unwrap();
                    watch.entity((t, k), ent.as_ref().map(|e| e.version), &ctx);
                    assert_eq!(
                        ent,
                        model.live_entity((t, k)),
                        "{ctx}: entity {tenant}/{key}"
                    );
                }
            }
        }
    }
    session.store = Some(store);
}
