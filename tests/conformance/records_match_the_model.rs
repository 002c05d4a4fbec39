//! The model-based test, on both backends: random sequences of claims (two tenants, three keys,
//! two fingerprints, leases and retentions of seconds), completions, failures, renewals,
//! checkpoints, forgets, sweeps and clock steps; entity writes and deletes under every kind of
//! condition; plain and lease-bound reservations and their releases; offset marks and
//! watermarks; commits of an entity write with a lease's completion; and consumer deliveries
//! (`begin`) and failed attempts (`fail_message`, poisoning after three), run against the store
//! and a reference model. Every outcome and, after every step, the state of every key, entity,
//! reserved value and offset window must equal the model's. Fencing tokens are the one thing the backends issue differently (blocks on disk, a
//! sequence on PostgreSQL): the model takes each acquisition's token from the store, after
//! checking that it is greater than every token seen before, and predicts every later use of it.

use std::collections::BTreeMap;
use std::time::Duration;

use std::collections::BTreeSet;

use idemdb::{
    Begin, Checkpoint, Claim, ClaimOptions, CommitConflict, Conflict, ConsumerOptions, Expect,
    FailKind, Lease, LeaseLost, MessageFailed, RecordInfo, RecordState, Released, Replay,
    Reservation, Response, Versioned,
};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestRunner};

use crate::harness::Harness;

const TENANTS: [&str; 2] = ["ta", "tb"];
const KEYS: [&str; 3] = ["k0", "k1", "k2"];
const FPS: [&[u8]; 2] = [b"fp-a", b"fp-b"];
const VALUES: [&[u8]; 3] = [b"v0", b"v1", b"v2"];
const OWNERS: [&str; 2] = ["o0", "o1"];

#[derive(Debug, Clone)]
enum Op {
    Claim {
        t: usize,
        k: usize,
        fp: usize,
        lease_s: u64,
        ret_s: u64,
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
    EntityPut {
        t: usize,
        k: usize,
        ex: u8,
        val: u8,
    },
    EntityDelete {
        t: usize,
        k: usize,
        ex: u8,
    },
    Reserve {
        v: usize,
        owner: usize,
    },
    ReserveFor {
        lease: usize,
        v: usize,
    },
    Release {
        v: usize,
        owner: usize,
    },
    Mark {
        p: u32,
        offset: u64,
    },
    Watermark {
        p: u32,
        offset: u64,
    },
    CommitPutComplete {
        t: usize,
        k: usize,
        ex: u8,
        val: u8,
        lease: usize,
        body: u8,
    },
    Begin {
        m: usize,
    },
    FailMessage {
        lease: usize,
    },
}

/// Consumer deliveries: a lease of 10 s, a retention of 90 s, poisoned after three attempts.
fn consumer_opts() -> ConsumerOptions {
    ConsumerOptions::default()
        .lease(Duration::from_secs(10))
        .retention(Duration::from_secs(90))
        .max_attempts(3)
}

/// The model's records of consumer messages use this tenant index (requests use 0 and 1).
const MESSAGES: usize = 2;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2usize, 0..3usize, 0..2usize, 1..40u64, 20..120u64).prop_map(
            |(t, k, fp, lease_s, ret_s)| Op::Claim { t, k, fp, lease_s: lease_s.min(ret_s), ret_s }
        ),
        3 => (any::<usize>(), any::<u8>()).prop_map(|(lease, body)| Op::Complete { lease, body }),
        1 => any::<usize>().prop_map(|lease| Op::FailRetry { lease }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(lease, body)| Op::FailTerminal { lease, body }),
        1 => (any::<usize>(), 1..60u64).prop_map(|(lease, s)| Op::Renew { lease, s }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(lease, phase)| Op::Checkpoint { lease, phase }),
        1 => (0..2usize, 0..3usize).prop_map(|(t, k)| Op::Forget { t, k }),
        3 => (1..60u64).prop_map(|s| Op::Advance { s }),
        1 => (1..4usize).prop_map(|limit| Op::Sweep { limit }),
        2 => (0..2usize, 0..3usize, any::<u8>(), any::<u8>())
            .prop_map(|(t, k, ex, val)| Op::EntityPut { t, k, ex, val }),
        1 => (0..2usize, 0..3usize, any::<u8>()).prop_map(|(t, k, ex)| Op::EntityDelete { t, k, ex }),
        2 => (0..3usize, 0..2usize).prop_map(|(v, owner)| Op::Reserve { v, owner }),
        2 => (any::<usize>(), 0..3usize).prop_map(|(lease, v)| Op::ReserveFor { lease, v }),
        1 => (0..3usize, 0..2usize).prop_map(|(v, owner)| Op::Release { v, owner }),
        1 => (0..2u32, 0..10u64).prop_map(|(p, offset)| Op::Mark { p, offset }),
        1 => (0..2u32, 0..10u64).prop_map(|(p, offset)| Op::Watermark { p, offset }),
        2 => (0..2usize, 0..3usize, any::<u8>(), any::<u8>(), any::<usize>(), any::<u8>())
            .prop_map(|(t, k, ex, val, lease, body)| Op::CommitPutComplete { t, k, ex, val, lease, body }),
        5 => (0..2usize).prop_map(|m| Op::Begin { m }),
        5 => any::<usize>().prop_map(|lease| Op::FailMessage { lease }),
    ]
}

#[derive(Debug, Clone, PartialEq)]
enum MState {
    Pending(u64),
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

/// Who holds a reserved value: a plain owner, or the lease with this token on this record.
#[derive(Debug, Clone, Copy, PartialEq)]
enum MRes {
    Plain(usize),
    Bound((usize, usize), u64),
}

/// An entity: its newest version, and its value (`None`: a tombstone).
type MEntity = (u64, Option<Vec<u8>>);

#[derive(Default)]
struct Model {
    now: u64,
    recs: BTreeMap<(usize, usize), MRec>,
    max_fence: u64,
    ents: BTreeMap<(usize, usize), MEntity>,
    res: BTreeMap<usize, MRes>,
    offsets: [BTreeSet<u64>; 2],
    /// Consumer messages stored as poisoned, with their attempts.
    poisoned: BTreeMap<usize, u32>,
}

fn resp(body: u8) -> Response {
    Response::new(vec![body; usize::from(body % 5)]).with_status(200 + u16::from(body % 3))
}

impl Model {
    fn live(&self, id: (usize, usize)) -> Option<&MRec> {
        self.recs.get(&id).filter(|r| r.expires_at > self.now)
    }

    /// The claim's answer; an acquisition's token comes from `got` (checked to be new).
    fn claim(
        &mut self,
        id: (usize, usize),
        fp: &[u8],
        lease_s: u64,
        ret_s: u64,
        got: &Claim,
    ) -> Claim {
        let now = self.now;
        let until = now + lease_s * 1000;
        let Some(rec) = self.live(id).cloned() else {
            let f = new_fence(&mut self.max_fence, got);
            self.recs.insert(
                id,
                MRec {
                    fp: fp.to_vec(),
                    created_at: now,
                    expires_at: now + ret_s * 1000,
                    fence: f,
                    attempts: 1,
                    takeovers: 0,
                    checkpoint: None,
                    state: MState::Pending(until),
                },
            );
            return acquired(got, f, until, 1, false, None);
        };
        if rec.fp != fp {
            return Claim::Mismatch;
        }
        match rec.state {
            MState::Completed(r, at) => Claim::Completed(Replay {
                response: r,
                finished_at: at,
            }),
            MState::Failed(r, at) => Claim::Failed(Replay {
                response: r,
                finished_at: at,
            }),
            MState::Pending(u) if u > now => Claim::InProgress {
                retry_after: Duration::from_millis(u - now),
            },
            MState::Pending(_) | MState::Released => {
                let takeover = matches!(rec.state, MState::Pending(_));
                let f = new_fence(&mut self.max_fence, got);
                let r = self.recs.get_mut(&id).unwrap();
                r.fence = f;
                r.attempts += 1;
                r.takeovers += u32::from(takeover);
                r.expires_at = r.expires_at.max(until);
                r.state = MState::Pending(until);
                acquired(got, f, until, r.attempts, takeover, r.checkpoint.clone())
            }
        }
    }

    fn holder(&mut self, id: (usize, usize), fence: u64) -> Result<&mut MRec, LeaseLost> {
        let now = self.now;
        let Some(r) = self.recs.get_mut(&id).filter(|r| r.expires_at > now) else {
            return Err(LeaseLost::Gone);
        };
        match r.state {
            MState::Completed(..) | MState::Failed(..) => Err(LeaseLost::Finished),
            MState::Released => Err(LeaseLost::Released),
            MState::Pending(_) if r.fence != fence => Err(LeaseLost::TakenOver {
                current_fence: r.fence,
            }),
            MState::Pending(_) => Ok(r),
        }
    }

    /// The condition `ex` names, relative to the entity's live version (so that every kind of
    /// condition, holding or not, is drawn often).
    fn entity_expect(&self, id: (usize, usize), ex: u8) -> Expect {
        let live = self.entity(id).map(|e| e.version);
        match ex % 4 {
            0 => Expect::Absent,
            1 => Expect::Any,
            2 => Expect::Version(live.unwrap_or(1)),
            _ => Expect::Version(live.map_or(7, |v| v + 1)),
        }
    }

    fn entity(&self, id: (usize, usize)) -> Option<Versioned> {
        let (version, value) = self.ents.get(&id)?;
        value.as_ref().map(|v| Versioned {
            value: v.clone(),
            version: *version,
        })
    }

    fn holds(&self, id: (usize, usize), e: Expect) -> bool {
        let live = self.entity(id);
        match e {
            Expect::Any => true,
            Expect::Absent => live.is_none(),
            Expect::Version(v) => live.is_some_and(|l| l.version == v),
        }
    }

    /// Writes (or, for `None`, deletes) if `e` holds: the version written.
    fn entity_write(
        &mut self,
        id: (usize, usize),
        e: Expect,
        value: Option<Vec<u8>>,
    ) -> Result<Option<u64>, Conflict> {
        if !self.holds(id, e) {
            return Err(Conflict {
                current: self.entity(id),
            });
        }
        if value.is_none() && self.entity(id).is_none() {
            return Ok(None);
        }
        let v = self.ents.get(&id).map_or(0, |x| x.0) + 1;
        self.ents.insert(id, (v, value));
        Ok(Some(v))
    }

    /// The live holder of a reserved value.
    fn reservation(&self, v: usize) -> Option<MRes> {
        let r = *self.res.get(&v)?;
        match r {
            MRes::Plain(_) => Some(r),
            MRes::Bound(id, fence) => self
                .recs
                .get(&id)
                .filter(|rec| {
                    rec.fence == fence
                        && rec.expires_at > self.now
                        && matches!(rec.state, MState::Pending(u) if u > self.now)
                })
                .map(|_| r),
        }
    }

    fn owner_bytes(r: MRes) -> Vec<u8> {
        match r {
            MRes::Plain(o) => OWNERS[o].as_bytes().to_vec(),
            MRes::Bound(..) => Vec::new(),
        }
    }

    /// Reserves `v` for `who` unless another live holder has it.
    fn reserve(&mut self, v: usize, who: MRes) -> Reservation {
        let same = |a: MRes, b: MRes| match (a, b) {
            (MRes::Plain(x), MRes::Plain(y)) => x == y,
            (MRes::Bound(x, _), MRes::Bound(y, _)) => x == y,
            _ => false,
        };
        match self.reservation(v) {
            Some(cur) if !same(cur, who) => Reservation::Taken {
                owner: Self::owner_bytes(cur),
            },
            _ => {
                self.res.insert(v, who);
                Reservation::Reserved
            }
        }
    }

    fn info(&self, id: (usize, usize)) -> Option<RecordInfo> {
        let r = self.live(id)?;
        Some(RecordInfo {
            state: match &r.state {
                MState::Pending(u) => RecordState::Pending { lease_until: *u },
                MState::Released => RecordState::Released,
                MState::Completed(x, at) => RecordState::Completed(Replay {
                    response: x.clone(),
                    finished_at: *at,
                }),
                MState::Failed(x, at) => RecordState::Failed(Replay {
                    response: x.clone(),
                    finished_at: *at,
                }),
            },
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

/// The token of an acquisition, checked to be greater than every token seen before.
fn new_fence(max_fence: &mut u64, got: &Claim) -> u64 {
    let Claim::Acquired(l) = got else { return 0 };
    assert!(
        l.fence() > *max_fence,
        "token {} after {max_fence}",
        l.fence()
    );
    *max_fence = l.fence();
    l.fence()
}

/// The model's acquisition, in the store's `Lease` (whose other fields the model predicts):
/// equal to `got` exactly when the store agrees.
fn acquired(
    got: &Claim,
    fence: u64,
    until: u64,
    attempt: u32,
    takeover: bool,
    cp: Option<Checkpoint>,
) -> Claim {
    match got {
        Claim::Acquired(l)
            if l.fence() == fence
                && l.lease_until() == until
                && l.attempt() == attempt
                && l.is_takeover() == takeover
                && l.checkpoint() == cp.as_ref() =>
        {
            got.clone()
        }
        _ => panic!(
            "expected an acquisition (token {fence}, until {until}, attempt {attempt}, \
             takeover {takeover}, checkpoint {cp:?}), got {got:?}"
        ),
    }
}

async fn run(h: &Harness, case: usize, ops: Vec<Op>) {
    let s = &h.store;
    // Each case its own keys: a tenant prefix per case.
    let tenant = |t: usize| format!("{}{case}", TENANTS[t]);
    let (index, group) = (format!("ix{case}"), format!("g{case}"));
    let mut model = Model::default();
    let mut leases: Vec<(Lease, (usize, usize))> = Vec::new();
    for (step, op) in ops.into_iter().enumerate() {
        model.now = s.now().await.unwrap();
        let ctx = format!("case {case} step {step}: {op:?}");
        match op {
            Op::Claim {
                t,
                k,
                fp,
                lease_s,
                ret_s,
            } => {
                let o = ClaimOptions::default()
                    .lease(Duration::from_secs(lease_s))
                    .retention(Duration::from_secs(ret_s));
                let got = s.claim(tenant(t), KEYS[k], FPS[fp], o).await.unwrap();
                let want = model.claim((t, k), FPS[fp], lease_s, ret_s, &got);
                assert_eq!(got, want, "{ctx}");
                if let Claim::Acquired(l) = got {
                    leases.push((l, (t, k)));
                }
            }
            Op::Advance { s: secs } => h.advance(Duration::from_secs(secs)),
            Op::Forget { t, k } => {
                let existed = s.forget(tenant(t), KEYS[k]).await.unwrap();
                if model.live((t, k)).is_some() {
                    assert!(existed, "{ctx}");
                }
                model.recs.remove(&(t, k));
            }
            Op::Sweep { limit } => {
                s.sweep(limit).await.unwrap();
            }
            Op::EntityPut { t, k, ex, val } => {
                let e = model.entity_expect((t, k), ex);
                let want = model
                    .entity_write((t, k), e, Some(vec![val]))
                    .map(Option::unwrap_or_default);
                let got = s
                    .put_entity(tenant(t), KEYS[k], e, vec![val])
                    .await
                    .unwrap();
                assert_eq!(got, want, "{ctx}");
            }
            Op::EntityDelete { t, k, ex } => {
                let e = model.entity_expect((t, k), ex);
                let want = model.entity_write((t, k), e, None);
                let got = s.delete_entity(tenant(t), KEYS[k], e).await.unwrap();
                assert_eq!(got, want, "{ctx}");
            }
            Op::Reserve { v, owner } => {
                let want = model.reserve(v, MRes::Plain(owner));
                let got = s
                    .reserve(&index, &[VALUES[v]], OWNERS[owner])
                    .await
                    .unwrap();
                assert_eq!(got, want, "{ctx}");
            }
            Op::Release { v, owner } => {
                let want = match model.reservation(v) {
                    None => Released::Absent,
                    Some(MRes::Plain(o)) if o == owner => {
                        model.res.remove(&v);
                        Released::Released
                    }
                    Some(cur) => Released::NotOwner {
                        owner: Model::owner_bytes(cur),
                    },
                };
                let got = s
                    .release_reservation(&index, &[VALUES[v]], OWNERS[owner])
                    .await
                    .unwrap();
                assert_eq!(got, want, "{ctx}");
            }
            Op::Mark { p, offset } => {
                s.mark_processed(&group, "topic", p, offset).await.unwrap();
                model.offsets[p as usize].insert(offset);
            }
            Op::Watermark { p, offset } => {
                s.commit_watermark(&group, "topic", p, offset)
                    .await
                    .unwrap();
                model.offsets[p as usize].extend(0..=offset);
            }
            Op::Begin { m } => {
                let id = (MESSAGES, m);
                if model.live(id).is_none() {
                    model.poisoned.remove(&m);
                }
                let got = s
                    .begin(&group, format!("m{m}"), consumer_opts())
                    .await
                    .unwrap();
                // A delivery is a claim with an empty fingerprint; one that would acquire a
                // fourth attempt poisons the message instead (the store acquires, then stores
                // the poison as a terminal failure).
                let now = model.now;
                let next_attempt = model.live(id).and_then(|r| match r.state {
                    MState::Released => Some(r.attempts + 1),
                    MState::Pending(u) if u <= now => Some(r.attempts + 1),
                    _ => None,
                });
                let want = if let Some(a) = next_attempt.filter(|a| *a > 3) {
                    let r = model.recs.get_mut(&id).unwrap();
                    r.attempts = a;
                    r.takeovers += u32::from(matches!(r.state, MState::Pending(_)));
                    r.expires_at = r.expires_at.max(now + 10_000);
                    r.checkpoint = None;
                    r.state = MState::Failed(Response::new(Vec::new()), now);
                    // The token it drew is not seen; later ones are still checked to grow.
                    model.poisoned.insert(m, a - 1);
                    Begin::Poisoned { attempts: a - 1 }
                } else {
                    let as_claim = match &got {
                        Begin::Process(l) => Claim::Acquired(l.clone()),
                        _ => Claim::Mismatch,
                    };
                    match model.claim(id, b"", 10, 90, &as_claim) {
                        Claim::Acquired(l) => Begin::Process(l),
                        Claim::Completed(r) => Begin::Completed(r),
                        Claim::Failed(r) => match model.poisoned.get(&m) {
                            Some(a) => Begin::Poisoned { attempts: *a },
                            None => Begin::Failed(r),
                        },
                        Claim::InProgress { retry_after } => Begin::InProgress { retry_after },
                        other => panic!("one fingerprint per message, got {other:?}"),
                    }
                };
                assert_eq!(got, want, "{ctx}");
                if let Begin::Process(l) = got {
                    leases.push((l, id));
                }
            }
            _ if leases.is_empty() => {}
            Op::FailMessage { lease } => {
                // Only the leases of consumer messages.
                let mine: Vec<&(Lease, (usize, usize))> =
                    leases.iter().filter(|(_, id)| id.0 == MESSAGES).collect();
                let Some((l, id)) = mine.get(lease % mine.len().max(1)).copied() else {
                    continue;
                };
                let now = model.now;
                let attempts = l.attempt();
                let want = model.holder(*id, l.fence()).map(|r| {
                    if attempts >= 3 {
                        r.checkpoint = None;
                        r.state = MState::Failed(Response::new(Vec::new()), now);
                        MessageFailed::Poisoned { attempts }
                    } else {
                        r.state = MState::Released;
                        MessageFailed::WillRetry { attempts }
                    }
                });
                if matches!(want, Ok(MessageFailed::Poisoned { .. })) {
                    model.poisoned.insert(id.1, attempts);
                }
                let got = s.fail_message(l, consumer_opts()).await.unwrap();
                assert_eq!(got, want, "{ctx}");
            }
            Op::ReserveFor { lease, v } => {
                let (l, id) = &leases[lease % leases.len()];
                let want = match model.holder(*id, l.fence()) {
                    Err(lost) => Err(lost),
                    Ok(_) => Ok(model.reserve(v, MRes::Bound(*id, l.fence()))),
                };
                let got = s.reserve_for(l, &index, &[VALUES[v]]).await.unwrap();
                assert_eq!(got, want, "{ctx}");
            }
            Op::CommitPutComplete {
                t,
                k,
                ex,
                val,
                lease,
                body,
            } => {
                let (l, id) = &leases[lease % leases.len()];
                let e = model.entity_expect((t, k), ex);
                let now = model.now;
                let want = if !model.holds((t, k), e) {
                    Err(CommitConflict::Condition {
                        op: 0,
                        current: model.entity((t, k)),
                    })
                } else {
                    match model.holder(*id, l.fence()) {
                        Err(lost) => Err(CommitConflict::Lease { op: 1, lost }),
                        Ok(r) => {
                            r.checkpoint = None;
                            r.state = MState::Completed(resp(body), now);
                            let v = model.entity_write((t, k), e, Some(vec![val]));
                            Ok(vec![v.ok().flatten(), None])
                        }
                    }
                };
                let got = s
                    .commit()
                    .put(tenant(t), KEYS[k], e, vec![val])
                    .complete(l, resp(body))
                    .apply()
                    .await
                    .unwrap()
                    .map(|c| c.versions);
                assert_eq!(got, want, "{ctx}");
            }
            Op::Complete { lease, body } | Op::FailTerminal { lease, body } => {
                let (l, id) = &leases[lease % leases.len()];
                let terminal = matches!(op, Op::FailTerminal { .. });
                let got = if terminal {
                    s.fail(l, FailKind::Terminal(resp(body))).await.unwrap()
                } else {
                    s.complete(l, resp(body)).await.unwrap()
                };
                let now = model.now;
                let want = model.holder(*id, l.fence()).map(|r| {
                    r.checkpoint = None;
                    r.state = if terminal {
                        MState::Failed(resp(body), now)
                    } else {
                        MState::Completed(resp(body), now)
                    };
                });
                assert_eq!(got, want, "{ctx}");
            }
            Op::FailRetry { lease } => {
                let (l, id) = &leases[lease % leases.len()];
                let got = s.fail(l, FailKind::Retryable).await.unwrap();
                let want = model
                    .holder(*id, l.fence())
                    .map(|r| r.state = MState::Released);
                assert_eq!(got, want, "{ctx}");
            }
            Op::Renew { lease, s: secs } => {
                let i = lease % leases.len();
                let (id, fence) = (leases[i].1, leases[i].0.fence());
                let got = s
                    .renew(&mut leases[i].0, Duration::from_secs(secs))
                    .await
                    .unwrap();
                let until = model.now + secs * 1000;
                let want = model.holder(id, fence).map(|r| {
                    r.state = MState::Pending(until);
                    r.expires_at = r.expires_at.max(until);
                });
                assert_eq!(got, want, "{ctx}");
            }
            Op::Checkpoint { lease, phase } => {
                let (l, id) = &leases[lease % leases.len()];
                let cp = Checkpoint {
                    phase: format!("p{phase}"),
                    state: vec![phase; 2],
                };
                let got = s
                    .checkpoint(l, cp.phase.clone(), cp.state.clone())
                    .await
                    .unwrap();
                let want = model
                    .holder(*id, l.fence())
                    .map(|r| r.checkpoint = Some(cp));
                assert_eq!(got, want, "{ctx}");
            }
        }
        model.now = s.now().await.unwrap();
        for t in 0..TENANTS.len() {
            for (k, key) in KEYS.iter().enumerate() {
                let got = s.get(tenant(t), key).await.unwrap();
                assert_eq!(
                    got,
                    model.info((t, k)),
                    "{ctx}: state of {}/{key}",
                    tenant(t)
                );
                let got = s.get_entity(tenant(t), key).await.unwrap();
                assert_eq!(
                    got,
                    model.entity((t, k)),
                    "{ctx}: entity {}/{key}",
                    tenant(t)
                );
            }
        }
        for (v, value) in VALUES.iter().enumerate() {
            let got = s.reservation_owner(&index, &[value]).await.unwrap();
            let want = model.reservation(v).map(Model::owner_bytes);
            assert_eq!(got, want, "{ctx}: owner of value {v}");
        }
        for (p, set) in model.offsets.iter().enumerate() {
            let w = s
                .offset_window(&group, "topic", u32::try_from(p).unwrap())
                .await
                .unwrap();
            for o in 0..12 {
                assert_eq!(w.contains(o), set.contains(&o), "{ctx}: offset {o} of {p}");
            }
            let mark = (0..).take_while(|o| set.contains(o)).last();
            assert_eq!(w.watermark(), mark, "{ctx}: watermark of {p}");
        }
    }
}

/// Proptest drives the cases (and shrinks a failing one) on this thread, each case run to its
/// end on the test's runtime; every case (shrinking steps too) uses tenants of its own.
async fn check(h: &Harness) {
    let rt = tokio::runtime::Handle::current();
    let cases = std::sync::atomic::AtomicUsize::new(0);
    let strategy = proptest::collection::vec(op(), 1..60);
    let result = tokio::task::block_in_place(|| {
        let mut runner = TestRunner::new(PtConfig {
            cases: 48,
            failure_persistence: None,
            ..PtConfig::default()
        });
        runner.run(&strategy, |ops| {
            let case = cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            rt.block_on(run(h, case, ops));
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

on_both_backends!(check);
