//! Request idempotency records: claim, complete, fail, renew, checkpoint, execute, and the
//! operator's get and forget. Invariants: a claim that acquires writes a pending record with a new
//! fencing token under the key's stripe, and of any number of concurrent claimers exactly one
//! acquires; an answer that writes nothing (a replay, a mismatch, in progress) is given from one
//! read, with or without the stripe; only the holder of the current token leaves `Pending`.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::clock::{duration_millis, Millis};
use crate::embedded::core::check_holder;
use crate::embedded::engine::Cf;
use crate::embedded::{codec, Store};
use crate::error::Result;
use crate::format::{self, Namespace};
use crate::record::{
    check_duration, Checkpoint, Claim, ClaimOptions, FailKind, Lease, Record, RecordInfo, Replay,
    ReplayView, Response, ResponseView, State, StateView,
};
use crate::requests::{
    check_checkpoint, check_claim, check_names_and_fingerprint, check_response, claim_step,
    ClaimStep, Execution, Found, Seen,
};
use crate::telemetry::counters::Metrics;
use crate::telemetry::spans::{lease_outcome, Op, OpKind};

impl Store {
    /// Claims `key` of `tenant` for a request with this `fingerprint`. Exactly one of any number
    /// of concurrent claimers acquires; the others see [`Claim::InProgress`] or the stored result.
    pub fn claim(
        &self,
        tenant: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
        fingerprint: impl AsRef<[u8]>,
        opts: impl std::borrow::Borrow<ClaimOptions>,
    ) -> Result<Claim> {
        let opts = *opts.borrow();
        let (tenant, key, fingerprint) = (tenant.as_ref(), key.as_ref(), fingerprint.as_ref());
        let Some(wait) = opts.wait.filter(|w| !w.is_zero()) else {
            return self.claim_in(Namespace::Requests, tenant, key, fingerprint, opts);
        };
        // Waits for a lease held by another caller to end (`ClaimOptions::wait`): woken by its
        // end in this process, by the lease running out, or at the bound.
        let deadline = Instant::now() + wait;
        loop {
            let ticket = self.core.finished.ticket();
            let claim = self.claim_in(Namespace::Requests, tenant, key, fingerprint, opts)?;
            let Claim::InProgress { retry_after } = claim else {
                return Ok(claim);
            };
            let now = Instant::now();
            if now >= deadline {
                return Ok(claim);
            }
            // At the bound the answer is this claim's (as `AsyncStore::claim`'s).
            if !ticket.wait(retry_after.min(deadline - now)) && deadline - now < retry_after {
                return Ok(Claim::InProgress {
                    retry_after: retry_after.saturating_sub(now.elapsed()),
                });
            }
        }
    }

    pub(crate) fn claim_in(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        opts: ClaimOptions,
    ) -> Result<Claim> {
        let op = Op::start(OpKind::of_claim(ns), &self.core.cfg.common, tenant, key);
        let r = self.claim_decide(ns, tenant, key, fingerprint, opts);
        if let Ok(Claim::Acquired(l)) = &r {
            op.fence(l.fence);
        }
        op.end_with(r, Claim::outcome)
    }

    fn claim_decide(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        opts: ClaimOptions,
    ) -> Result<Claim> {
        self.core.engine.check_writable()?;
        let (lease_ms, retention_ms) =
            check_claim(&self.core.cfg.common, tenant, key, fingerprint, opts)?;
        let m = &self.core.metrics;

        let rkey = format::record_key(ns, tenant, key);
        let answered = |answer: Claim| {
            if matches!(answer, Claim::InProgress { .. }) {
                Metrics::bump(&m.in_progress);
            }
            Ok(answer)
        };
        // Read first without the stripe lock. An answer that writes nothing (a replay, a mismatch,
        // in progress) is given from that read and takes effect at it. A claim that acquires
        // locks the stripe and keeps the read if nothing was written under the stripe since (the
        // usual case), or reads again under the lock.
        let noted = self.core.stripes.note(&rkey);
        let now = self.now();
        let found = match self.inspect(&rkey, fingerprint, now)? {
            Inspected::Answer(answer) => return answered(answer),
            found => found,
        };
        let (mut stripe, unchanged) = self.core.stripes.lock_noted(noted);
        // An in-memory record is the key's record, above what is stored. (The unlocked read
        // above never answers for a key that has one: an in-memory record only ever replaces a
        // stored record that was absent, expired, released or past its lease, none of which
        // answers a claim; and it stays above it until it is written.)
        let in_memory = stripe
            .volatile(&rkey)
            .map(|v| (v.rec.clone(), v.stored_slot));
        // Where the stored record below an in-memory one has its index entry (`Some(None)`:
        // nothing stored below it); `None`: the key has no in-memory record.
        let below_memory = in_memory.as_ref().map(|(_, slot)| *slot);
        let (now, found) = if let Some((rec, slot)) = in_memory {
            let now = self.now();
            (now, self.inspect_record(rec, slot, fingerprint, now))
        } else if unchanged {
            (now, found)
        } else {
            let now = self.now();
            (now, self.inspect(&rkey, fingerprint, now)?)
        };
        let lease_until = now.saturating_add(lease_ms);
        let (old_slot, old) = match found {
            Inspected::Answer(answer) => return answered(answer),
            Inspected::Absent => (None, None),
            Inspected::Expired(slot) => {
                Metrics::bump(&m.expired);
                (slot, None)
            }
            Inspected::Open(rec, takeover) => (Some(rec.index_slot()), Some((rec, takeover))),
        };
        let takeover = old.as_ref().is_some_and(|(_, t)| *t);
        let new = match old {
            None => Record {
                expires_at: now.saturating_add(retention_ms),
                fingerprint: fingerprint.to_vec(),
                created_at: now,
                fence: self.core.next_fence()?,
                attempts: 1,
                takeovers: 0,
                checkpoint: None,
                state: State::Pending { lease_until },
            },
            Some((mut rec, _)) => {
                // Released for a retry, or a lease that ran out: acquire (a takeover).
                rec.expires_at = rec.expires_at.max(lease_until);
                rec.fence = self.core.next_fence()?;
                rec.attempts = rec.attempts.saturating_add(1);
                rec.takeovers += u32::from(takeover);
                rec.state = State::Pending { lease_until };
                rec
            }
        };
        // The slot of the stored record the new one replaces (an in-memory record stands above
        // one, or none).
        let stored_slot = below_memory.unwrap_or(old_slot);
        let written = opts.durable_pending || opts.written_pending;
        let kept = !written && (below_memory.is_some() || self.core.memory_room());
        let lease = Lease {
            tenant: tenant.to_vec(),
            key: key.to_vec(),
            fence: new.fence,
            until: lease_until,
            attempt: new.attempts,
            takeover,
            checkpoint: new.checkpoint.clone(),
            store_id: self.core.store_id,
            ns,
        };
        if kept {
            self.core
                .keep_in_memory(&mut stripe, &rkey, stored_slot, new);
        } else {
            // Unsynced only when asked for and not overruled by `durable_pending` (a claim past
            // the in-memory cap writes as the store's durability says).
            let durable = opts.durable_pending || !opts.written_pending;
            self.core
                .persist_with(&mut stripe, &rkey, stored_slot, new, durable)?;
        }
        drop(stripe);
        Metrics::bump(&m.acquired);
        if takeover {
            Metrics::bump(&m.takeover);
        }
        Ok(Claim::Acquired(lease))
    }

    /// Stores `response` as the result of the leased operation. Later claims replay it.
    pub fn complete(
        &self,
        lease: &Lease,
        response: Response,
    ) -> Result<crate::record::LeaseResult> {
        let op = Op::held(OpKind::Complete, &self.core.cfg.common, lease);
        let r = check_response(&self.core.cfg.common, "response", &response).and_then(|()| {
            self.with_lease(lease, true, |rec, now| {
                rec.complete(response, now);
                Ok(())
            })
        });
        if let Ok(Ok(())) = r {
            Metrics::bump(&self.core.metrics.completed);
        }
        op.end_with(r, lease_outcome("completed"))
    }

    /// Ends the leased operation as failed: either releases the key for a retry or stores a
    /// terminal failure that later claims replay.
    pub fn fail(&self, lease: &Lease, kind: FailKind) -> Result<crate::record::LeaseResult> {
        let op = Op::held(OpKind::Fail, &self.core.cfg.common, lease);
        let terminal = matches!(kind, FailKind::Terminal(_));
        let checked = match &kind {
            FailKind::Terminal(resp) => check_response(&self.core.cfg.common, "failure", resp),
            FailKind::Retryable => Ok(()),
        };
        let r = checked.and_then(|()| {
            self.with_lease(lease, true, |rec, now| {
                rec.fail(kind, now);
                Ok(())
            })
        });
        if let Ok(Ok(())) = r {
            let m = &self.core.metrics;
            Metrics::bump(if terminal {
                &m.failed_terminal
            } else {
                &m.failed_retryable
            });
        }
        op.end_with(
            r,
            lease_outcome(if terminal { "failed" } else { "released" }),
        )
    }

    /// Extends the lease to `extra` from now (and the record's retention if it would end
    /// sooner). Updates `lease` in place.
    pub fn renew(&self, lease: &mut Lease, extra: Duration) -> Result<crate::record::LeaseResult> {
        let op = Op::held(OpKind::Renew, &self.core.cfg.common, lease);
        let extra_ms = duration_millis(extra);
        // A renewal keeps an in-memory record in memory (it has nothing new to keep).
        let r = check_duration("renewal", extra, self.core.cfg.common.max_lease).and_then(|()| {
            self.with_lease(lease, false, |rec, now| {
                let until = now.saturating_add(extra_ms);
                rec.state = State::Pending { lease_until: until };
                rec.expires_at = rec.expires_at.max(until);
                Ok(until)
            })
        });
        let r = r.map(|held| {
            held.map(|until| {
                lease.until = until;
                Metrics::bump(&self.core.metrics.renewed);
            })
        });
        op.end_with(r, lease_outcome("renewed"))
    }

    /// Stores a recovery point. Whoever acquires the key after this holder crashes or fails
    /// retryably receives it in [`Lease::checkpoint`].
    pub fn checkpoint(
        &self,
        lease: &Lease,
        phase: impl Into<String>,
        state: impl Into<Vec<u8>>,
    ) -> Result<crate::record::LeaseResult> {
        let cp = Checkpoint {
            phase: phase.into(),
            state: state.into(),
        };
        let op = Op::held(OpKind::Checkpoint, &self.core.cfg.common, lease);
        // A recovery point must reach the next acquirer after a crash: written, with the record.
        let r = check_checkpoint(&self.core.cfg.common, &cp).and_then(|()| {
            self.with_lease(lease, true, |rec, _| {
                rec.checkpoint = Some(cp);
                Ok(())
            })
        });
        if let Ok(Ok(())) = r {
            Metrics::bump(&self.core.metrics.checkpointed);
        }
        op.end_with(r, lease_outcome("checkpointed"))
    }

    /// Claims, runs `f` if acquired, stores its result, and returns what happened. A duplicate
    /// that arrives while another thread of this process runs the same key waits up to
    /// [`Config::duplicate_wait`] for its result. If `f` panics the key is released for a retry
    /// and the panic continues.
    pub fn execute<F>(
        &self,
        tenant: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
        fingerprint: impl AsRef<[u8]>,
        f: F,
    ) -> Result<Execution>
    where
        F: FnOnce(&Lease) -> std::result::Result<Response, FailKind>,
    {
        let (tenant, key, fingerprint) = (tenant.as_ref(), key.as_ref(), fingerprint.as_ref());
        let deadline = Instant::now() + self.core.cfg.backend.duplicate_wait;
        let lease = loop {
            let ticket = self.core.finished.ticket();
            match self.claim(tenant, key, fingerprint, ClaimOptions::default())? {
                Claim::Acquired(l) => break l,
                Claim::Completed(r) => return Ok(Execution::Completed(r)),
                Claim::Failed(r) => return Ok(Execution::Failed(r)),
                Claim::Mismatch => return Ok(Execution::Mismatch),
                Claim::InProgress { retry_after } => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Ok(Execution::InProgress { retry_after });
                    }
                    let _woken = ticket.wait(retry_after.min(deadline - now));
                }
            }
        };
        let result = match catch_unwind(AssertUnwindSafe(|| f(&lease))) {
            Ok(r) => r,
            Err(panic) => {
                let _ = self.fail(&lease, FailKind::Retryable);
                resume_unwind(panic);
            }
        };
        let stored = match &result {
            Ok(resp) => self.complete(&lease, resp.clone())?,
            Err(kind) => self.fail(&lease, kind.clone())?,
        };
        Ok(match stored {
            Ok(()) => Execution::Ran(result),
            Err(lost) => Execution::LeaseLost(lost),
        })
    }

    /// An operator's view of a record, or `None` if absent or expired.
    pub fn get(
        &self,
        tenant: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<RecordInfo>> {
        let (tenant, key) = (tenant.as_ref(), key.as_ref());
        self.core.check_names(tenant, key)?;
        let rkey = format::record_key(Namespace::Requests, tenant, key);
        let mut stripe = self.core.lock(&rkey);
        let now = self.now();
        let rec = self.core.current(&mut stripe, &rkey)?.rec;
        drop(stripe);
        Ok(rec.filter(|r| r.expires_at > now).map(|r| r.info()))
    }

    /// Deletes a record (and its index entry), whatever its state, even if it does not decode.
    /// Returns whether anything was stored for the key. A holder of its lease gets
    /// [`LeaseLost::Gone`].
    pub fn forget(&self, tenant: impl AsRef<[u8]>, key: impl AsRef<[u8]>) -> Result<bool> {
        self.forget_in(Namespace::Requests, tenant.as_ref(), key.as_ref())
    }

    /// Deletes the record of a consumer message (see [`Store::begin`]), whatever its state, even
    /// if it does not decode: a poisoned message gets its attempts back, a processed one will be
    /// processed again if delivered again, and damaged data can be cleared. Returns whether
    /// anything was stored for it. A holder of its lease gets [`LeaseLost::Gone`].
    pub fn forget_message(
        &self,
        group: impl AsRef<[u8]>,
        message_id: impl AsRef<[u8]>,
    ) -> Result<bool> {
        self.forget_in(Namespace::Consumers, group.as_ref(), message_id.as_ref())
    }

    fn forget_in(&self, ns: Namespace, tenant: &[u8], key: &[u8]) -> Result<bool> {
        self.core.check_names(tenant, key)?;
        let rkey = format::record_key(ns, tenant, key);
        let mut stripe = self.core.lock(&rkey);
        stripe.forget(&rkey);
        let in_memory = stripe.drop_volatile(&rkey);
        let Some(raw) = self.core.engine.get(Cf::Records, &rkey)? else {
            if in_memory {
                // A pending lease kept in memory is gone: its waiters claim again.
                self.core.finished.notify();
            }
            return Ok(in_memory);
        };
        let mut batch = self.core.engine.batch();
        batch.delete(Cf::Records, &rkey);
        if let Ok(rec) = codec::decode_record(&raw) {
            batch.delete(
                Cf::Expiry,
                &format::index_key(rec.expires_at, rec.fence, &rkey),
            );
        }
        self.core.engine.write(batch)?;
        Metrics::bump(&self.core.metrics.forgotten);
        self.core.finished.notify();
        Ok(true)
    }

    /// What a claim would answer when the record is final (completed or failed, replayed) or
    /// bound to another fingerprint (mismatch), read without the stripe lock and without writing:
    /// such an answer cannot change until the record expires or is forgotten, so it is the one a
    /// locked claim would give at this instant. `None` when only a claim can decide (absent,
    /// pending, released, expired, or arguments a claim would reject). Used by the async store (and so the
    /// HTTP layer).
    #[cfg(feature = "async")]
    pub(crate) fn peek_final(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
    ) -> Result<Option<Claim>> {
        if check_names_and_fingerprint(&self.config().common, tenant, key, fingerprint).is_err() {
            return Ok(None);
        }
        let now = self.now();
        Ok(
            match self.inspect(&format::record_key(ns, tenant, key), fingerprint, now)? {
                Inspected::Answer(Claim::InProgress { .. }) => None,
                Inspected::Answer(answer) => Some(answer),
                _ => None,
            },
        )
    }

    /// Answers a duplicate from its stored result without copying it: if `key` of `tenant` holds
    /// a completed or terminally failed record for this `fingerprint`, calls `f` with a view of it
    /// (the body borrowed from the stored bytes) and returns `Some` of what `f` returns; otherwise
    /// (no record, expired, pending or released, another fingerprint) `None`, and the caller
    /// claims as usual, which then gives the full answer ([`Claim::Mismatch`], in progress, or
    /// the lease). One point read and no lock: for callers that only copy the response out (into
    /// a socket, a buffer), a replay that costs what a bare read of the value costs. Counts a
    /// replay when it calls `f`. Arguments are checked as by [`Store::claim`].
    pub fn replay_with<T>(
        &self,
        tenant: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
        fingerprint: impl AsRef<[u8]>,
        f: impl FnOnce(ReplayView<'_>) -> T,
    ) -> Result<Option<T>> {
        let (tenant, key, fingerprint) = (tenant.as_ref(), key.as_ref(), fingerprint.as_ref());
        check_names_and_fingerprint(&self.core.cfg.common, tenant, key, fingerprint)?;
        let now = self.now();
        let rkey = format::record_key(Namespace::Requests, tenant, key);
        // A finished record is never only in memory (it is written when it finishes), and an
        // in-memory record only stands above a stored one that is not finished and live: the
        // stored bytes alone decide, as for a claim's unlocked read.
        self.core.engine.get_with(Cf::Records, &rkey, |v| {
            let Some(bytes) = v else { return Ok(None) };
            let view = codec::decode_record_view(bytes)?;
            if view.expires_at <= now || view.fingerprint != fingerprint {
                return Ok(None);
            }
            let (response, at, failed) = match &view.state {
                StateView::Completed { response, at } => (response, *at, false),
                StateView::Failed { response, at } => (response, *at, true),
                StateView::Pending { .. } | StateView::Released => return Ok(None),
            };
            Metrics::bump(&self.core.metrics.replayed);
            Ok(Some(f(ReplayView {
                body: response.body,
                meta: &response.meta,
                finished_at: at,
                failed,
            })))
        })?
    }

    /// Reads the record of `rkey` at `now` for a claim with `fingerprint`: the claim's answer when
    /// the stored record alone decides it (mismatch, replay, in progress), decoded from a borrowed
    /// view so that only the answer is allocated; otherwise what the claim must decide on. Shared
    /// by the claim (before and, if the stripe saw a write meanwhile, again under the stripe) and
    /// the HTTP layer's peek, so both answer alike. Counts mismatches and replays; the caller
    /// counts an in-progress answer if it gives one.
    fn inspect(&self, rkey: &[u8], fingerprint: &[u8], now: Millis) -> Result<Inspected> {
        self.core.engine.get_with(Cf::Records, rkey, |v| {
            let Some(bytes) = v else {
                return Ok(Inspected::Absent);
            };
            let view = codec::decode_record_view(bytes)?;
            let slot = view.index_slot();
            let state = match view.state {
                StateView::Pending { lease_until } => Seen::Pending { lease_until },
                StateView::Released => Seen::Released,
                StateView::Completed { response, at } => Seen::Completed((response, at)),
                StateView::Failed { response, at } => Seen::Failed((response, at)),
            };
            let found = Found {
                expires_at: view.expires_at,
                fingerprint: view.fingerprint,
                state,
            };
            let step = claim_step(Some(found), fingerprint, now);
            let step = step.map_replay(|(response, at)| Replay {
                response: ResponseView::into_response(response),
                finished_at: at,
            });
            // Released, or a lease that ran out: the claim acquires, from the full record.
            self.inspected(step, Some(slot))
                .try_map_open(|()| codec::decode_record(bytes))
        })?
    }

    /// [`Store::inspect`] for an in-memory record (whose stored record, if any, has its index
    /// entry at `stored_slot`): the same answers, from the record itself.
    fn inspect_record(
        &self,
        rec: Record,
        stored_slot: Option<(Millis, u64)>,
        fingerprint: &[u8],
        now: Millis,
    ) -> Inspected {
        // A finished record is never in memory (it is written at once); answered alike anyway.
        let found = Found {
            expires_at: rec.expires_at,
            fingerprint: &rec.fingerprint,
            state: Seen::of(&rec.state),
        };
        let step = claim_step(Some(found), fingerprint, now).map_replay(|(response, at)| Replay {
            response: response.clone(),
            finished_at: at,
        });
        // An expired in-memory record with nothing stored below it leaves no index entry.
        match self.inspected(step, stored_slot) {
            Inspected::Absent | Inspected::Expired(None) => Inspected::Absent,
            Inspected::Expired(slot) => Inspected::Expired(slot),
            Inspected::Answer(a) => Inspected::Answer(a),
            Inspected::Open((), takeover) => Inspected::Open(rec, takeover),
        }
    }

    /// What a claim step means here, counting mismatches and replays (`slot`: where the stored
    /// record's index entry is, if any).
    fn inspected(&self, step: ClaimStep<Replay>, slot: Option<(Millis, u64)>) -> Inspected<()> {
        let m = &self.core.metrics;
        let replayed = |r| {
            Metrics::bump(&m.replayed);
            r
        };
        match step {
            ClaimStep::Absent => Inspected::Absent,
            ClaimStep::Expired => Inspected::Expired(slot),
            ClaimStep::Mismatch => {
                Metrics::bump(&m.mismatch);
                Inspected::Answer(Claim::Mismatch)
            }
            ClaimStep::Completed(r) => Inspected::Answer(Claim::Completed(replayed(r))),
            ClaimStep::Failed(r) => Inspected::Answer(Claim::Failed(replayed(r))),
            ClaimStep::InProgress { retry_after } => {
                Inspected::Answer(Claim::InProgress { retry_after })
            }
            ClaimStep::Acquire { takeover } => Inspected::Open((), takeover),
        }
    }

    /// Runs `f` on the record of `lease` if `lease` holds it, and stores the result: on disk
    /// (with the index entry), or, for a renewal (`durable` false) of a record that exists only
    /// in memory, in memory again.
    fn with_lease<T>(
        &self,
        lease: &Lease,
        durable: bool,
        f: impl FnOnce(&mut Record, Millis) -> Result<T>,
    ) -> Result<crate::record::LeaseResult<T>> {
        self.core.check_lease_store(lease)?;
        let rkey = lease.record_key();
        let mut stripe = self.core.lock(&rkey);
        let now = self.now();
        let cur = self.core.current(&mut stripe, &rkey)?;
        let mut rec = match check_holder(cur.rec, lease, now) {
            Ok(rec) => rec,
            Err(lost) => {
                Metrics::bump(&self.core.metrics.lease_lost);
                return Ok(Err(lost));
            }
        };
        let out = f(&mut rec, now)?;
        let finished = !matches!(rec.state, State::Pending { .. });
        if cur.volatile && !durable {
            self.core
                .keep_in_memory(&mut stripe, &rkey, cur.stored_slot, rec);
        } else {
            self.core
                .persist(&mut stripe, &rkey, cur.stored_slot, rec)?;
        }
        drop(stripe);
        if finished {
            self.core.finished.notify();
        }
        Ok(Ok(out))
    }
}

/// What [`Store::inspect`] found (`R`: the record a claim acquires, once read in full).
enum Inspected<R = Record> {
    /// No record.
    Absent,
    /// An expired record (treated as absent), whose index entry is at this slot (`None`: an
    /// in-memory record with nothing stored below it).
    Expired(Option<(Millis, u64)>),
    /// The claim's answer, decided by the stored record alone.
    Answer(Claim),
    /// A live record the claim acquires (released, or its lease ran out: then `true`, a
    /// takeover).
    Open(R, bool),
}

impl<R> Inspected<R> {
    fn try_map_open<S>(self, f: impl FnOnce(R) -> Result<S>) -> Result<Inspected<S>> {
        Ok(match self {
            Inspected::Absent => Inspected::Absent,
            Inspected::Expired(slot) => Inspected::Expired(slot),
            Inspected::Answer(a) => Inspected::Answer(a),
            Inspected::Open(r, takeover) => Inspected::Open(f(r)?, takeover),
        })
    }
}
