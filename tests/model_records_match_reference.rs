//! The centerpiece: random operation sequences run against the store and a small in-memory
//! reference model of the record API, over a tiny key space (2 tenants × 3 keys × 2 fingerprints)
//! so that conflicts, takeovers, mismatches and expiries happen all the time. Every outcome is
//! compared, and after every step the observable state of every key (`get`) must equal the model's,
//! whether or not compaction, sweeps or reopen ran in between. Versioned entities (conditional
//! puts and deletes with tombstones), atomic commits, consumer deliveries (with poison) and unique
//! reservations (plain and bound to leases) run in the same sequences against the same model.
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use idemdb::{
    Checkpoint, Claim, ClaimOptions, CommitConflict, Config, Conflict, ConsumerOptions, Durability,
    Expect, FailKind, Lease, LeaseLost, ManualClock, MessageFailed, RecordInfo, RecordState,
    Released, Replay, Reservation, Response, Store, Versioned,
};
use proptest::prelude::*;

const TENANTS: [&str; 2] = ["a", "b"];
const KEYS: [&str; 3] = ["k0", "k1", "k2"];
const FPS: [&[u8]; 2] = [b"fp0", b"fp1"];
const MAX_LEASE_S: u64 = 100;
/// Consumer settings of the model; message ids live at `(g + CONSUMER, k)` in the model's map.
const CONSUMER: usize = 10;
const GROUPS: [&str; 2] = ["a", "g2"];
const MSG_MAX_ATTEMPTS: u32 = 2;

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
    Compact,
    Reopen,
    /// Unique constraint ops on value `v` of one index, by owner `o`.
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
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2usize, 0..3usize, 0..2usize, 1..40u64, 20..120u64).prop_map(|(t, k, fp, lease_s, ret_s)| {
            Op::Claim { t, k, fp, lease_s: lease_s.min(ret_s), ret_s }
        }),
        3 => (any::<usize>(), any::<u8>()).prop_map(|(lease, body)| Op::Complete { lease, body }),
        1 => any::<usize>().prop_map(|lease| Op::FailRetry { lease }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(lease, body)| Op::FailTerminal { lease, body }),
        1 => (any::<usize>(), 1..MAX_LEASE_S).prop_map(|(lease, s)| Op::Renew { lease, s }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(lease, phase)| Op::Checkpoint { lease, phase }),
        1 => (0..2usize, 0..3usize).prop_map(|(t, k)| Op::Forget { t, k }),
        4 => (1..60u64).prop_map(|s| Op::Advance { s }),
        1 => (1..4usize).prop_map(|limit| Op::Sweep { limit }),
        2 => (0..2usize, 0..3usize, 0..4u8, any::<u8>()).prop_map(|(t, k, expect, val)| Op::EntityPut { t, k, expect, val }),
        1 => (0..2usize, 0..3usize, 0..4u8).prop_map(|(t, k, expect)| Op::EntityDelete { t, k, expect }),
        2 => (any::<usize>(), 0..2usize, 0..3usize, 0..4u8, any::<u8>()).prop_map(|(lease, t, k, expect, val)| Op::CommitPutComplete { lease, t, k, expect, val }),
        4 => (0..2usize, 0..2usize).prop_map(|(g, k)| Op::Begin { g, k }),
        3 => any::<usize>().prop_map(|lease| Op::FailMessage { lease }),
        2 => (0..2u8, 0..2u8).prop_map(|(v, o)| Op::Reserve { v, o }),
        2 => (any::<usize>(), 0..2u8).prop_map(|(lease, v)| Op::ReserveFor { lease, v }),
        1 => (0..2u8, 0..2u8).prop_map(|(v, o)| Op::Release { v, o }),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
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

/// The reference model: obviously right, and nothing more.
/// A reservation's owner and, when bound to a lease, the lease's (model id, fence).
type ReservationState = (Vec<u8>, Option<((usize, usize), u64)>);

/// An entity's version and its value (`None`: a tombstone).
type EntityState = (u64, Option<Vec<u8>>);

struct Model {
    now: u64,
    next_fence: u64,
    recs: BTreeMap<(usize, usize), MRec>,
    /// Reservations by value: owner and, when bound, the lease's (model id, fence).
    res: BTreeMap<u8, ReservationState>,
    /// Versioned entities: (version, value or tombstone).
    ents: BTreeMap<(usize, usize), EntityState>,
}

impl Model {
    fn live(&self, id: (usize, usize)) -> Option<&MRec> {
        self.recs.get(&id).filter(|r| r.expires_at > self.now)
    }

    fn claim(&mut self, id: (usize, usize), fp: &[u8], lease_s: u64, ret_s: u64) -> Outcome {
        let now = self.now;
        let lease_until = now + lease_s * 1000;
        let Some(rec) = self.live(id).cloned() else {
            let r = MRec {
                fp: fp.to_vec(),
                created_at: now,
                expires_at: now + ret_s * 1000,
                fence: self.next_fence,
                attempts: 1,
                takeovers: 0,
                checkpoint: None,
                state: MState::Pending { lease_until },
            };
            self.next_fence += 1;
            let out = Outcome::Acquired {
                fence: r.fence,
                until: lease_until,
                attempt: 1,
                takeover: false,
                checkpoint: None,
            };
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
                let fence = self.next_fence;
                self.next_fence += 1;
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

    /// The owner of a live reservation of value `v`.
    fn reservation(&self, v: u8) -> Option<Vec<u8>> {
        let (owner, bound) = self.res.get(&v)?;
        let live = match bound {
            None => true,
            Some((id, fence)) => self.live(*id).is_some_and(|r| {
                r.fence == *fence
                    && matches!(r.state, MState::Pending { lease_until } if lease_until > self.now)
            }),
        };
        live.then(|| owner.clone())
    }

    fn reserve(
        &mut self,
        v: u8,
        owner: Vec<u8>,
        bound: Option<((usize, usize), u64)>,
    ) -> Reservation {
        match self.reservation(v) {
            Some(cur) if cur != owner => Reservation::Taken { owner: cur },
            _ => {
                self.res.insert(v, (owner, bound));
                Reservation::Reserved
            }
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
                until: l.expires_at(),
                attempt: l.attempt(),
                takeover: l.is_takeover(),
                checkpoint: l.checkpoint().cloned(),
            },
            Claim::Completed(r) => Outcome::Completed(r.clone()),
            Claim::Failed(r) => Outcome::Failed(r.clone()),
            Claim::InProgress { retry_after } => Outcome::InProgress(*retry_after),
            Claim::Mismatch => Outcome::Mismatch,
        }
    }
}

static HISTOGRAM: Mutex<Option<BTreeMap<String, u64>>> = Mutex::new(None);

fn count(name: String) {
    let mut h = HISTOGRAM.lock().unwrap();
    *h.get_or_insert_with(BTreeMap::new).entry(name).or_default() += 1;
}

fn open(dir: &std::path::Path, clock: &ManualClock) -> Store {
    Config::new(dir)
        .clock(clock.clone())
        .durability(Durability::Buffered)
        .sweep_interval(None)
        .max_lease(Duration::from_secs(MAX_LEASE_S))
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

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let mut store = open(dir.path(), &clock);
    let mut model = Model {
        now: 0,
        next_fence: 1,
        recs: BTreeMap::new(),
        ents: BTreeMap::new(),
        res: BTreeMap::new(),
    };
    let mut leases: Vec<(Lease, (usize, usize))> = Vec::new();
    for (step, op) in ops.into_iter().enumerate() {
        model.now = store.now();
        let ctx = format!("step {step}: {op:?}");
        match op {
            Op::Claim {
                t,
                k,
                fp,
                lease_s,
                ret_s,
            } => {
                let opts = ClaimOptions::default()
                    .lease(Duration::from_secs(lease_s))
                    .retention(Duration::from_secs(ret_s));
                let got = store.claim(TENANTS[t], KEYS[k], FPS[fp], opts).unwrap();
                let want = model.claim((t, k), FPS[fp], lease_s, ret_s);
                assert_eq!(Outcome::from(&got), want, "{ctx}");
                let name = match &want {
                    Outcome::Acquired { takeover: true, .. } => "claim: takeover",
                    Outcome::Acquired { attempt: 1, .. } => "claim: acquired new",
                    Outcome::Acquired { .. } => "claim: acquired after release",
                    Outcome::Completed(_) => "claim: replay completed",
                    Outcome::Failed(_) => "claim: replay failure",
                    Outcome::InProgress(_) => "claim: in progress",
                    Outcome::Mismatch => "claim: mismatch",
                };
                count(name.into());
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
                let want = model.holder(*id, l.fence()).map(|r| {
                    r.checkpoint = None;
                    r.state = MState::Completed(resp(body), now);
                });
                assert_eq!(got, want, "{ctx}");
                count(format!("complete: {}", lost_name(&got)));
            }
            Op::FailRetry { lease } => {
                let (l, id) = &leases[lease % leases.len()];
                let got = store.fail(l, FailKind::Retryable).unwrap();
                let want = model
                    .holder(*id, l.fence())
                    .map(|r| r.state = MState::Released);
                assert_eq!(got, want, "{ctx}");
                count(format!("fail retryable: {}", lost_name(&got)));
            }
            Op::FailTerminal { lease, body } => {
                let (l, id) = &leases[lease % leases.len()];
                let got = store.fail(l, FailKind::Terminal(resp(body))).unwrap();
                let now = model.now;
                let want = model.holder(*id, l.fence()).map(|r| {
                    r.checkpoint = None;
                    r.state = MState::Failed(resp(body), now);
                });
                assert_eq!(got, want, "{ctx}");
                count(format!("fail terminal: {}", lost_name(&got)));
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
                    assert_eq!(leases[i].0.expires_at(), until);
                }
                count(format!("renew: {}", lost_name(&got)));
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
                    .holder(*id, l.fence())
                    .map(|r| r.checkpoint = Some(cp));
                assert_eq!(got, want, "{ctx}");
                count(format!("checkpoint: {}", lost_name(&got)));
            }
            Op::Forget { t, k } => {
                let existed = store.forget(TENANTS[t], KEYS[k]).unwrap();
                // Physically present (expired or not) unless sweep or compaction removed it, so
                // only a live record is certain to be reported.
                if model.live((t, k)).is_some() {
                    assert!(existed, "{ctx}");
                }
                model.recs.remove(&(t, k));
                count("forget".into());
            }
            Op::Advance { s } => {
                clock.advance(Duration::from_secs(s));
                count("advance clock".into());
            }
            Op::Sweep { limit } => {
                store.sweep(limit).unwrap();
                count("sweep".into());
            }
            Op::Compact => {
                store.compact().unwrap();
                count("compact".into());
            }
            Op::Reopen => {
                drop(store);
                store = open(dir.path(), &clock);
                count("reopen".into());
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
                assert_eq!(got, want, "{ctx}");
                count(format!(
                    "entity put: {}",
                    if got.is_ok() { "ok" } else { "conflict" }
                ));
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
                    match model.holder(*id, l.fence()) {
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
                assert_eq!(got, want, "{ctx}");
                count(format!(
                    "commit: {}",
                    match &got {
                        Ok(_) => "ok",
                        Err(CommitConflict::Condition { .. }) => "condition",
                        Err(_) => "lease",
                    }
                ));
            }
            Op::Begin { g, k } => {
                let id = (g + CONSUMER, k);
                let now = model.now;
                let want = match model.claim(id, &[], 10, 60) {
                    Outcome::Acquired { attempt, fence, .. } if attempt > MSG_MAX_ATTEMPTS => {
                        let r = model.holder(id, fence).expect("just acquired");
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
                let got = match store.begin(GROUPS[g], KEYS[k], &consumer_opts()).unwrap() {
                    idemdb::Begin::Process(l) => {
                        let s = format!(
                            "process {} {} {} {}",
                            l.fence(),
                            l.expires_at(),
                            l.attempt(),
                            l.is_takeover()
                        );
                        leases.push((l, id));
                        s
                    }
                    idemdb::Begin::Duplicate(r) => format!("duplicate {r:?}"),
                    idemdb::Begin::Poisoned { attempts } => format!("poisoned {attempts}"),
                    idemdb::Begin::InFlight { retry_after } => format!("in flight {retry_after:?}"),
                };
                assert_eq!(got, want, "{ctx}");
                count(format!(
                    "begin: {}",
                    got.split(' ').next().unwrap_or_default()
                ));
            }
            Op::FailMessage { .. } if leases.is_empty() => {}
            Op::FailMessage { lease } => {
                // Fail one of the three newest leases: usually a delivery just begun, so that
                // messages reach their attempt limit within a sequence.
                let i = leases.len() - 1 - lease % leases.len().min(3);
                let (l, id) = &leases[i];
                let now = model.now;
                let attempts = l.attempt();
                let want = model.holder(*id, l.fence()).map(|r| {
                    if attempts >= MSG_MAX_ATTEMPTS {
                        r.checkpoint = None;
                        r.state = MState::Failed(poison(attempts), now);
                        MessageFailed::Poisoned { attempts }
                    } else {
                        r.state = MState::Released;
                        MessageFailed::WillRetry { attempts }
                    }
                });
                let got = store.fail_message(l, &consumer_opts()).unwrap();
                assert_eq!(got, want, "{ctx}");
                count(format!(
                    "fail message: {}",
                    match got {
                        Ok(MessageFailed::Poisoned { .. }) => "poisoned",
                        Ok(_) => "retry",
                        Err(_) => "lost",
                    }
                ));
            }
            Op::Reserve { v, o } => {
                let owner = format!("owner-{o}").into_bytes();
                let want = model.reserve(v, owner.clone(), None);
                let got = store.reserve("idx", &[&[v]], &owner).unwrap();
                assert_eq!(got, want, "{ctx}");
                count(format!(
                    "reserve: {}",
                    if got == Reservation::Reserved {
                        "reserved"
                    } else {
                        "taken"
                    }
                ));
            }
            Op::ReserveFor { .. } if leases.is_empty() => {}
            Op::ReserveFor { lease, v } => {
                let (l, id) = &leases[lease % leases.len()];
                let want = match model.holder(*id, l.fence()) {
                    Err(lost) => Err(lost),
                    Ok(_) => Ok(model.reserve(v, l.key().to_vec(), Some((*id, l.fence())))),
                };
                let got = store.reserve_for(l, "idx", &[&[v]]).unwrap();
                assert_eq!(got, want, "{ctx}");
                count(format!(
                    "reserve for lease: {}",
                    match &got {
                        Ok(Reservation::Reserved) => "reserved",
                        Ok(_) => "taken",
                        Err(_) => "lost",
                    }
                ));
            }
            Op::Release { v, o } => {
                let owner = format!("owner-{o}").into_bytes();
                let want = match model.reservation(v) {
                    None => Released::Absent,
                    Some(cur) if cur != owner => Released::NotOwner { owner: cur },
                    Some(_) => {
                        model.res.remove(&v);
                        Released::Released
                    }
                };
                let got = store.release("idx", &[&[v]], &owner).unwrap();
                assert_eq!(got, want, "{ctx}");
                count(format!(
                    "release: {}",
                    match got {
                        Released::Released => "released",
                        Released::Absent => "absent",
                        _ => "not owner",
                    }
                ));
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
                assert_eq!(got, want, "{ctx}");
                count(format!(
                    "entity delete: {}",
                    if got.is_ok() { "ok" } else { "conflict" }
                ));
            }
        }
        // After every step the observable state equals the model's.
        model.now = store.now();
        for (t, tenant) in TENANTS.iter().enumerate() {
            for (k, key) in KEYS.iter().enumerate() {
                let got = store.get(tenant, key).unwrap();
                assert_eq!(got, model.info((t, k)), "{ctx}: state of {tenant}/{key}");
                let ent = store.get_entity(tenant, key).unwrap();
                if t == 0 && k < 2 {
                    let v = k as u8;
                    assert_eq!(
                        store.reservation_owner("idx", &[&[v]]).unwrap(),
                        model.reservation(v),
                        "{ctx}: reservation {v}"
                    );
                }
                assert_eq!(
                    ent,
                    model.live_entity((t, k)),
                    "{ctx}: entity {tenant}/{key}"
                );
            }
        }
    }
}

#[test]
fn store_matches_model() {
    let cases = std::env::var("IDEMDB_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let seqs = proptest::collection::vec(op(), 1..150);
    if let Err(e) = runner.run(&seqs, |ops| {
        run(ops);
        Ok(())
    }) {
        panic!("the store diverged from the model: {e}");
    }
    let h = HISTOGRAM.lock().unwrap().clone().unwrap_or_default();
    println!("outcome histogram over {cases} cases:");
    for (k, v) in &h {
        println!("  {k:<34} {v}");
    }
    // The run must have reached every operation and every outcome, or it proved little.
    for must in [
        "claim: acquired new",
        "claim: acquired after release",
        "claim: takeover",
        "claim: replay completed",
        "claim: replay failure",
        "claim: in progress",
        "claim: mismatch",
        "complete: ok",
        "complete: taken_over",
        "complete: finished",
        "complete: gone",
        "fail retryable: ok",
        "fail terminal: ok",
        "renew: ok",
        "checkpoint: ok",
        "entity put: ok",
        "entity put: conflict",
        "entity delete: ok",
        "entity delete: conflict",
        "begin: process",
        "begin: duplicate",
        "begin: poisoned",
        "begin: in",
        "fail message: retry",
        "fail message: poisoned",
        "reserve: reserved",
        "reserve: taken",
        "reserve for lease: reserved",
        "reserve for lease: taken",
        "release: released",
        "release: not owner",
        "release: absent",
        "commit: ok",
        "commit: condition",
        "commit: lease",
        "forget",
        "advance clock",
        "sweep",
        "compact",
        "reopen",
    ] {
        assert!(
            h.get(must).copied().unwrap_or(0) > 0,
            "the model test never reached {must:?}: {h:?}"
        );
    }
}
