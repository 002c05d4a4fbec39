//! The runner: one operation sequence driven through a store under test ([`Target`]) and the
//! reference model, every outcome compared, and after every step the observable state of every
//! key, entity, reservation and offset window. It is written once, as an `async fn`, for every
//! store: the embedded `Store` (whose calls never wait: [`run_ready`] polls it to its end), and
//! the `AsyncStore` of either backend in the conformance suite.

use std::future::Future;
use std::time::Duration;

use idemdb::{
    Begin, Checkpoint, Claim, ClaimOptions, CommitConflict, Conflict, ConsumerOptions, Expect,
    FailKind, Lease, LeaseLost, MessageFailed, OffsetWindow, RecordInfo, Released, Reservation,
    Response, Versioned,
};

use super::reference::{Fences, Holder, MState, Model, Outcome};
use super::watch::Watch;
use super::{Op, CONSUMER, FPS, KEYS, MSG_MAX_ATTEMPTS};

/// The offsets' topic of every run (its group is [`Names::offset_group`]).
const TOPIC: &str = "t";

/// The names one run gives the model's tenants, consumer groups, reservation index and offset
/// group: runs that share a store (the conformance suite's, on PostgreSQL) each take names of
/// their own, and the first consumer group equals the first tenant in every run, so that a
/// delivery and a request of the same key string stay apart only by namespace.
#[derive(Debug, Clone)]
pub struct Names {
    pub tenants: [String; 2],
    pub groups: [String; 2],
    pub index: String,
    pub offset_group: String,
}

impl Names {
    /// The names of run `run`: `"a{run}"`, `"b{run}"` and so on (an empty `run`: the plain
    /// names).
    pub fn of_run(run: &str) -> Self {
        Names {
            tenants: [format!("a{run}"), format!("b{run}")],
            groups: [format!("a{run}"), format!("g2{run}")],
            index: format!("idx{run}"),
            offset_group: format!("g{run}"),
        }
    }
}

/// A store under test, as the runner calls it: the public API's calls with their errors
/// unwrapped (an error fails the run), plus the clock and the steps one backend may lack.
#[allow(async_fn_in_trait)] // driven by one runner on one task, never spawned
pub trait Target {
    /// How the model learns the fencing tokens.
    fn fences(&self) -> Fences;
    /// The store's `Config::pending_in_memory` (0 where every claim is written).
    fn pending_in_memory(&self) -> usize;
    fn names(&self) -> &Names;
    /// Moves the store's clock on.
    fn advance(&self, by: Duration);
    /// Compacts everything; `false` where the backend has no such step.
    async fn compact(&mut self) -> bool;
    /// Closes the store and opens it again; `false` where the backend has no such step.
    async fn reopen(&mut self) -> bool;

    async fn now(&self) -> u64;
    async fn claim(&self, tenant: &str, key: &str, fp: &[u8], opts: ClaimOptions) -> Claim;
    async fn get(&self, tenant: &str, key: &str) -> Option<RecordInfo>;
    async fn complete(&self, lease: &Lease, response: Response) -> Result<(), LeaseLost>;
    async fn fail(&self, lease: &Lease, kind: FailKind) -> Result<(), LeaseLost>;
    async fn renew(&self, lease: &mut Lease, by: Duration) -> Result<(), LeaseLost>;
    async fn checkpoint(
        &self,
        lease: &Lease,
        phase: String,
        state: Vec<u8>,
    ) -> Result<(), LeaseLost>;
    async fn forget(&self, tenant: &str, key: &str) -> bool;
    async fn sweep(&self, limit: usize);
    async fn put_entity(
        &self,
        tenant: &str,
        key: &str,
        e: Expect,
        value: Vec<u8>,
    ) -> Result<u64, Conflict>;
    async fn delete_entity(
        &self,
        tenant: &str,
        key: &str,
        e: Expect,
    ) -> Result<Option<u64>, Conflict>;
    async fn get_entity(&self, tenant: &str, key: &str) -> Option<Versioned>;
    /// One commit: `put` of the entity, then the lease's completion.
    #[allow(clippy::too_many_arguments)]
    async fn commit_put_complete(
        &self,
        tenant: &str,
        key: &str,
        e: Expect,
        value: Vec<u8>,
        lease: &Lease,
        response: Response,
    ) -> Result<Vec<Option<u64>>, CommitConflict>;
    async fn begin(&self, group: &str, message: &str, opts: ConsumerOptions) -> Begin;
    async fn fail_message(
        &self,
        lease: &Lease,
        opts: ConsumerOptions,
    ) -> Result<MessageFailed, LeaseLost>;
    async fn reserve(&self, index: &str, value: &[&[u8]], owner: &[u8]) -> Reservation;
    async fn reserve_for(
        &self,
        lease: &Lease,
        index: &str,
        value: &[&[u8]],
    ) -> Result<Reservation, LeaseLost>;
    async fn release_reservation(&self, index: &str, value: &[&[u8]], owner: &[u8]) -> Released;
    async fn reservation_owner(&self, index: &str, value: &[&[u8]]) -> Option<Vec<u8>>;
    async fn mark_processed(&self, group: &str, topic: &str, partition: u32, offset: u64);
    async fn commit_watermark(&self, group: &str, topic: &str, partition: u32, offset: u64);
    async fn offset_window(&self, group: &str, topic: &str, partition: u32) -> OffsetWindow;
    async fn is_processed(&self, group: &str, topic: &str, partition: u32, offset: u64) -> bool;
}

/// Polls a future that never waits (the runner over the embedded `Store`, whose calls block
/// instead) to its end.
pub fn run_ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("a target whose calls never wait returned Pending"),
    }
}

/// The model's consumer settings (`begin`, `fail_message`).
pub(super) fn consumer_opts() -> ConsumerOptions {
    ConsumerOptions {
        max_attempts: MSG_MAX_ATTEMPTS,
        lease: Some(Duration::from_secs(10)),
        retention: Some(Duration::from_secs(60)),
    }
}

/// The response a poisoned message's record stores.
fn poison(attempts: u32) -> Response {
    Response::new(Vec::new())
        .with_meta("idemdb.poisoned", "true")
        .with_meta("attempts", attempts.to_string())
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

/// Runs `ops` against `target` and the model, comparing every outcome and, after every step,
/// the observable state of every key; panics on the first divergence or broken invariant.
/// `count(operation, outcome)` is called once per step.
pub async fn run_on<T: Target>(
    target: &mut T,
    ops: Vec<Op>,
    count: &mut dyn FnMut(&'static str, &'static str),
) {
    let n = target.names().clone();
    let mut model = Model::new(target.fences(), target.pending_in_memory());
    let mut leases: Vec<(Lease, (usize, usize))> = Vec::new();
    let mut watch = Watch::default();
    let steps = ops.len();
    for (step, op) in ops.into_iter().enumerate() {
        model.now = target.now().await;
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
                    .durable_pending(durable && k % 2 == 0)
                    .written_pending(durable && k % 2 == 1);
                let before = target.get(&n.tenants[t], KEYS[k]).await;
                let got = target.claim(&n.tenants[t], KEYS[k], FPS[fp], opts).await;
                if let Claim::Acquired(l) = &got {
                    watch.acquired(l.fence(), &ctx);
                    watch.acquired_over(before.as_ref(), model.now, &ctx);
                }
                let seen = match &got {
                    Claim::Acquired(l) => Some(l.fence()),
                    _ => None,
                };
                let want = model.claim((t, k), FPS[fp], lease_s, ret_s, durable, seen);
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
                let got = target.complete(l, resp(body)).await;
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
                let got = target.fail(l, FailKind::Retryable).await;
                let want = model
                    .holder_durable(*id, l.fence())
                    .map(|r| r.state = MState::Released);
                assert_eq!(got, want, "{ctx}");
                count("fail retryable", lost_name(&got));
            }
            Op::FailTerminal { lease, body } => {
                let (l, id) = &leases[lease % leases.len()];
                let got = target.fail(l, FailKind::Terminal(resp(body))).await;
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
                let got = target.renew(&mut leases[i].0, Duration::from_secs(s)).await;
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
                let got = target
                    .checkpoint(l, cp.phase.clone(), cp.state.clone())
                    .await;
                let want = model
                    .holder_durable(*id, l.fence())
                    .map(|r| r.checkpoint = Some(cp));
                assert_eq!(got, want, "{ctx}");
                count("checkpoint", lost_name(&got));
            }
            Op::Forget { t, k } => {
                let existed = target.forget(&n.tenants[t], KEYS[k]).await;
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
                target.advance(Duration::from_secs(s));
                count("advance clock", "");
            }
            Op::Sweep { limit } => {
                target.sweep(limit).await;
                model.swept();
                count("sweep", "");
            }
            Op::Compact => {
                let done = target.compact().await;
                count("compact", if done { "" } else { "not on this backend" });
            }
            Op::Reopen if !target.reopen().await => count("reopen", "not on this backend"),
            Op::Reopen => {
                // In-memory records are gone: their keys read as what is stored below them.
                for id in model.reopened() {
                    watch.reverted(id);
                }
                count("reopen", "");
            }
            Op::MarkProcessed { p, offset } => {
                target
                    .mark_processed(&n.offset_group, TOPIC, p, offset)
                    .await;
                model.offsets[p as usize].insert(offset);
                count("mark processed", "");
            }
            Op::CommitWatermark { p, offset } => {
                target
                    .commit_watermark(&n.offset_group, TOPIC, p, offset)
                    .await;
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
                let got = target
                    .put_entity(&n.tenants[t], KEYS[k], e, vec![val])
                    .await;
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
                let got = target
                    .commit_put_complete(&n.tenants[t], KEYS[k], e, vec![val], l, resp(val))
                    .await;
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
                let begun = target.begin(&n.groups[g], KEYS[k], consumer_opts()).await;
                let seen = match &begun {
                    idemdb::Begin::Process(l) => Some(l.fence()),
                    _ => None,
                };
                let got = match begun {
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
                let want = match model.claim(id, &[], 10, 60, true, seen) {
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
                let got = target.fail_message(l, consumer_opts()).await;
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
                let got = target.reserve(&n.index, &[&[v]], owner).await;
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
                let got = target.reserve_for(l, &n.index, &[&[v]]).await;
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
                let got = target.release_reservation(&n.index, &[&[v]], owner).await;
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
                let got = target.delete_entity(&n.tenants[t], KEYS[k], e).await;
                if let Ok(Some(v)) = got {
                    watch.wrote((t, k), v, &ctx);
                }
                assert_eq!(got, want, "{ctx}");
                count("entity delete", if got.is_ok() { "ok" } else { "conflict" });
            }
        }
        // After every step the observable state equals the model's (offsets and entities after
        // every step that can change them, and after the last).
        model.now = target.now().await;
        for (p, set) in model.offsets.iter().enumerate() {
            if !offsets_may_change {
                break;
            }
            let w = target.offset_window(&n.offset_group, TOPIC, p as u32).await;
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
                target
                    .is_processed(&n.offset_group, TOPIC, p as u32, probe)
                    .await,
                set.contains(&probe),
                "{ctx}: is_processed({probe}) of partition {p}"
            );
        }
        for (t, tenant) in n.tenants.iter().enumerate() {
            for (k, key) in KEYS.iter().enumerate() {
                let got = target.get(tenant, key).await;
                watch.record((t, k), got.as_ref(), model.now, &ctx);
                assert_eq!(got, model.info((t, k)), "{ctx}: state of {tenant}/{key}");
                if t == 0 && k < 2 {
                    let v = k as u8;
                    assert_eq!(
                        target.reservation_owner(&n.index, &[&[v]]).await,
                        model.reservation(v),
                        "{ctx}: reservation {v}"
                    );
                }
                if entities_may_change {
                    let ent = target.get_entity(tenant, key).await;
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
}
