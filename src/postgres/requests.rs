//! Request idempotency records on PostgreSQL: claim, complete, fail, renew, checkpoint, and the
//! operator's get and forget (the sweep is `sweep.rs`). Invariants: the arguments are checked by
//! the same code as the embedded store's (`crate::requests`); a claim is decided by one
//! statement (or the `idemdb_claim` function) and a holder's call by one `UPDATE ... WHERE fence
//! = $n AND state = pending`; each call is counted and traced as the embedded store counts and
//! traces it; the replay tier answers only replays, and forgets what `forget` deletes.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Row;

use super::group_commit::{self, Coalescer, Kind, Turn};
use super::rows::{
    checkpoint, encode_meta, from_i32, from_i64, lost_from_row, ns_code, replay, seen_state,
    to_i64, HolderCall, HolderChange, COMPLETED, FAILED, PENDING, RELEASED,
};
use super::send::Param;
use super::store::PgStore;
use super::{statements, Postgres};
use crate::clock::{duration_millis, Millis};
use crate::config::fleet::StatementMode;
use crate::error::{Error, Result};
use crate::format::Namespace;
use crate::record::{
    check_duration, Checkpoint, Claim, ClaimOptions, FailKind, Lease, LeaseLost, RecordInfo,
    RecordState, Response,
};
use crate::requests::{
    check_checkpoint, check_claim, check_response, claim_step, ClaimStep, Found,
};
use crate::telemetry::counters::Metrics;
use crate::telemetry::spans::{lease_outcome, Op, OpKind, Stamp};

use crate::record::LeaseResult;

/// How often a statement whose snapshot disagreed with its lock is rerun before giving up.
const RERUNS: u32 = 8;

/// Where a claim on PostgreSQL is answered.
pub(crate) enum ClaimAsk {
    /// Here, at once: refused arguments, or a replay from the local tier (counted and traced).
    Answered(Result<Claim>),
    /// By the database, with the checked arguments.
    Database(Checked),
}

/// A claim's arguments as checked: its lease and retention in milliseconds, and whether its
/// pending record must be durable when the claim answers (`ClaimOptions::durable_pending`,
/// consumer messages) rather than made durable by the completion's flush.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checked {
    lease_ms: Millis,
    retention_ms: Millis,
    durable: bool,
}

/// What a claim's read first found ([`Postgres::read_first`]).
pub(crate) enum ReadFirst {
    /// The claim's answer, decided from the row read (counted and traced).
    Answered(Result<Claim>),
    /// The claim goes on to the database.
    Pending(Pending),
}

/// A claim that goes on to its statement: its checked arguments, and the row it read first when
/// that row looked acquirable (the statement then starts with the takeover).
pub(crate) struct Pending {
    checked: Checked,
    read: Option<Row>,
}

impl Postgres {
    /// The part of a claim that needs no round trip: the arguments' check and the replay tier.
    /// The async layer (`async_store/postgres.rs`) runs the read first and
    /// [`Postgres::claim_in_database`] for the rest, to its end even if its
    /// caller goes away (then it releases what it acquired).
    pub(crate) fn claim_here(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        opts: ClaimOptions,
    ) -> ClaimAsk {
        let (lease_ms, retention_ms) =
            match check_claim(&self.cfg.common, tenant, key, fingerprint, opts) {
                Ok(checked) => checked,
                Err(e) => {
                    let op = Op::start(OpKind::of_claim(ns), &self.cfg.common, tenant, key);
                    return ClaimAsk::Answered(op.end_with(Err(e), Claim::outcome));
                }
            };
        if let Some(tier) = &self.tier {
            let test_now = self.cfg.backend.test_clock.as_ref().map(|c| c.now_millis());
            if let Some(answer) = tier.get(ns as u8, tenant, key, fingerprint, test_now) {
                let op = Op::start(OpKind::of_claim(ns), &self.cfg.common, tenant, key);
                self.metrics.count_claim(&answer);
                return ClaimAsk::Answered(op.end_with(Ok(answer), Claim::outcome));
            }
        }
        ClaimAsk::Database(Checked {
            lease_ms,
            retention_ms,
            durable: opts.durable_pending,
        })
    }

    /// A claim's read first, in the caller's task (it acquires nothing, so a caller that goes
    /// away leaves nothing to release; a lost claim of this store's it releases is also released
    /// in the background): while most recent claims found their row (a run of
    /// retries), the key's row is read by a plain `SELECT` ([`statements::CLAIM_READ`]) and a
    /// row that answers is the answer (counted, traced and put in the tier as the claim's own
    /// would be); no row, or one that looks acquirable, goes on to the claim statement.
    pub(crate) async fn read_first(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        checked: Checked,
    ) -> ReadFirst {
        let go = |read| ReadFirst::Pending(Pending { checked, read });
        // A claim of this store whose answer was lost first releases what it may hold
        // (`lost_claims.rs`), before anything reads the key: this claim is then a new attempt,
        // not a 409 for the lost claim's lease nor, after it, a takeover of it.
        if let Err(e) = self.sql.settle_lost_claim(ns, tenant, key).await {
            let op = Op::start(OpKind::of_claim(ns), &self.cfg.common, tenant, key);
            return ReadFirst::Answered(op.end_with(Err(e), Claim::outcome));
        }
        if !self.sql.reads_first() {
            return go(None);
        }
        let asked = Stamp::now();
        let op = || Op::start(OpKind::of_claim(ns), &self.cfg.common, tenant, key).since(asked);
        let row = match self.sql.read(ns, tenant, key).await {
            Ok(Some(row)) => row,
            Ok(None) => return go(None),
            Err(e) => return ReadFirst::Answered(op().end_with(Err(e), Claim::outcome)),
        };
        match decide(&row, fingerprint) {
            Ok(Decided::Answer(claim, expires_at, now)) => {
                self.sql.hits.note(true);
                self.metrics.count_claim(&claim);
                if let Some(tier) = &self.tier {
                    tier.put(ns as u8, tenant, key, fingerprint, &claim, expires_at, now);
                }
                ReadFirst::Answered(op().end_with(Ok(claim), Claim::outcome))
            }
            Ok(Decided::Acquirable) => go(Some(row)),
            Err(e) => ReadFirst::Answered(op().end_with(Err(e), Claim::outcome)),
        }
    }

    /// The claim's statement, in its span; counted, and a finished record put in the tier.
    pub(crate) async fn claim_in_database(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        Pending { checked, read }: Pending,
    ) -> Result<Claim> {
        let op = Op::start(OpKind::of_claim(ns), &self.cfg.common, tenant, key);
        let claim = self
            .sql
            .claim(ns, tenant, key, fingerprint, checked, read)
            .await
            .map(|(claim, expires_at, now)| {
                self.metrics.count_claim(&claim);
                if let Some(tier) = &self.tier {
                    tier.put(ns as u8, tenant, key, fingerprint, &claim, expires_at, now);
                }
                claim
            });
        if let Ok(Claim::Acquired(l)) = &claim {
            op.fence(l.fence);
        }
        op.end_with(claim, Claim::outcome)
    }

    /// A lease holder's call (`checked`: the arguments' check), in its span and counted as the
    /// embedded store counts it; the lease's new end if it applied.
    async fn held(
        &self,
        lease: &Lease,
        checked: Result<()>,
        change: HolderChange,
    ) -> Result<LeaseResult<Millis>> {
        use HolderChange as H;
        let m = &self.metrics;
        let (kind, ok, count) = match &change {
            H::Complete(_) => (OpKind::Complete, "completed", &m.completed),
            H::Release => (OpKind::Fail, "released", &m.failed_retryable),
            H::FailTerminal(_) => (OpKind::Fail, "failed", &m.failed_terminal),
            H::Renew(_) => (OpKind::Renew, "renewed", &m.renewed),
            H::Checkpoint(_) => (OpKind::Checkpoint, "checkpointed", &m.checkpointed),
        };
        let op = Op::held(kind, &self.cfg.common, lease);
        let r = match checked {
            Ok(()) => self.sql.holder(lease, change).await,
            Err(e) => Err(e),
        };
        match &r {
            Ok(Ok(_)) => Metrics::bump(count),
            Ok(Err(_)) => Metrics::bump(&m.lease_lost),
            Err(_) => {}
        }
        op.end_with(r, lease_outcome(ok))
    }

    /// Stores `response` as the result of the leased operation.
    pub(crate) async fn complete(&self, lease: &Lease, response: Response) -> Result<LeaseResult> {
        let checked = check_response(&self.cfg.common, "response", &response);
        let change = HolderChange::Complete(response);
        Ok(self.held(lease, checked, change).await?.map(drop))
    }

    /// Ends the leased operation as failed: released for a retry, or a stored failure.
    pub(crate) async fn fail(&self, lease: &Lease, kind: FailKind) -> Result<LeaseResult> {
        let (checked, change) = match kind {
            FailKind::Retryable => (Ok(()), HolderChange::Release),
            FailKind::Terminal(r) => (
                check_response(&self.cfg.common, "failure", &r),
                HolderChange::FailTerminal(r),
            ),
        };
        Ok(self.held(lease, checked, change).await?.map(drop))
    }

    /// Extends the lease to `extra` from the database's now; the lease's new end.
    pub(crate) async fn renew(
        &self,
        lease: &Lease,
        extra: Duration,
    ) -> Result<LeaseResult<Millis>> {
        let checked = check_duration("renewal", extra, self.cfg.common.max_lease);
        let change = HolderChange::Renew(duration_millis(extra));
        self.held(lease, checked, change).await
    }

    /// Stores a recovery point for whoever acquires the key next.
    pub(crate) async fn checkpoint(&self, lease: &Lease, cp: Checkpoint) -> Result<LeaseResult> {
        let checked = check_checkpoint(&self.cfg.common, &cp);
        let change = HolderChange::Checkpoint(cp);
        Ok(self.held(lease, checked, change).await?.map(drop))
    }

    /// An operator's view of a request record, or `None` if absent or expired.
    pub(crate) async fn get(&self, tenant: &[u8], key: &[u8]) -> Result<Option<RecordInfo>> {
        self.cfg.common.check_names(tenant, key)?;
        self.sql.get(Namespace::Requests, tenant, key).await
    }

    /// Deletes a record of namespace `ns` whatever its state (and the tier's copy); whether one
    /// was stored. Counted as `forgotten`, as on the embedded store.
    pub(crate) async fn forget(&self, ns: Namespace, tenant: &[u8], key: &[u8]) -> Result<bool> {
        self.cfg.common.check_names(tenant, key)?;
        if let Some(tier) = &self.tier {
            tier.remove(ns as u8, tenant, key);
        }
        let found = self.sql.forget(ns, tenant, key).await?;
        if found {
            Metrics::bump(&self.metrics.forgotten);
        }
        Ok(found)
    }
}

/// The statements: each call is one decision of the database.
impl PgStore {
    /// Whether a claim reads its row first (see [`Postgres::read_first`]): in the prepared mode,
    /// while most recent claims found their row, coalescing or not (measured in one run at 64
    /// tasks: plain reads one by one answered more replays a second than coalesced claims).
    fn reads_first(&self) -> bool {
        self.mode == StatementMode::Prepared && self.hits.likely()
    }

    /// The key's row as [`statements::CLAIM_READ`] reads it.
    async fn read(&self, ns: Namespace, tenant: &[u8], key: &[u8]) -> Result<Option<Row>> {
        let (ns_c, now) = (ns_code(ns), self.now_param());
        self.query(statements::CLAIM_READ, &[&ns_c, &tenant, &key, &now])
            .await
    }

    /// Claims a key: one statement decides (acquire, or not); its answer tells what was found,
    /// with the record's expiry and the database's time when it is a finished record (for the
    /// replay tier; zeros otherwise). A buffered claim (`Config::buffered_claims`, not
    /// `durable`) takes its fencing token from the store's block first, and gives it back if it
    /// did not insert a row with it.
    pub(crate) async fn claim(
        self: &Arc<Self>,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        checked: Checked,
        read: Option<Row>,
    ) -> Result<(Claim, Millis, Millis)> {
        let buffered = self.buffered && !checked.durable;
        let nonce = self.lost_claims.nonce();
        // With buffered claims on, every claim that may insert takes its token from the block
        // (a durable one too: tokens a store hands out must increase, and a token drawn past the
        // block would end the block).
        let token = match self.buffered && read.is_none() {
            true => Some(self.take_fence().await?),
            false => None,
        };
        let answer = self
            .claim_with(
                ns,
                tenant,
                key,
                fingerprint,
                (checked, buffered),
                (token, nonce),
                read,
            )
            .await;
        // On an error nothing is noted, and the token is not given back: the statement may have
        // committed with it. An unavailable database may have committed the claim without its
        // answer reaching here: what it may hold is released (`lost_claims.rs`).
        if let Err(Error::Unavailable { .. }) = &answer {
            self.claim_lost(ns, tenant, key, nonce);
        }
        if let Ok((claim, _, _)) = &answer {
            let acquired = match claim {
                Claim::Acquired(l) => Some(l.fence),
                _ => None,
            };
            self.hits.note(acquired.is_none());
            // Not used: a row was found (or taken over, with a token of the function's).
            if let Some(t) = token.filter(|&t| acquired != u64::try_from(t).ok()) {
                self.untake_fence(t);
            }
            // A token drawn past the block (a takeover's) ends what is left of the block below.
            if let Some(fence) = acquired {
                self.issued(fence);
            }
        }
        answer
    }

    /// [`PgStore::claim`] with its token (`None`: a durable claim, the unnamed mode, or a row
    /// read first), its nonce, and the row it read first, if any.
    #[allow(clippy::too_many_arguments)]
    async fn claim_with(
        self: &Arc<Self>,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        (checked, buffered): (Checked, bool),
        (token, nonce): (Option<i64>, i64),
        read: Option<Row>,
    ) -> Result<(Claim, Millis, Millis)> {
        let (lease_ms, retention_ms) = (
            to_i64("lease", checked.lease_ms)?,
            to_i64("retention", checked.retention_ms)?,
        );
        let ns_c = ns_code(ns);
        // The common cases (a new key, a finished record, a live lease, another fingerprint) are
        // decided by the first statement; a row that looks acquirable goes to the function.
        // Unnamed statements are planned at every call: the function's statements are planned
        // once per server connection and cached there (measured: docs/benchmarks.md).
        // A buffered claim sends the statement in either mode (unnamed, it is planned at every
        // call: the flush it saves is worth more).
        let mut fast = self.mode == StatementMode::Prepared || buffered;
        let run = |fast: bool| async move {
            let now = self.now_param();
            let p: [&dyn Param; 10] = [
                &ns_c,
                &tenant,
                &key,
                &fingerprint,
                &lease_ms,
                &retention_ms,
                &now,
                &token,
                &buffered,
                &nonce,
            ];
            match fast {
                // A claim with its store's token inserts first (`CLAIM_TOKEN`).
                true if token.is_some() => self.query(statements::CLAIM_TOKEN, &p).await,
                true => self.query(statements::CLAIM_FAST, &p).await,
                // The function takes the first seven and the nonce.
                false => {
                    let p = [p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[9]];
                    self.query(statements::CLAIM, &p).await
                }
            }
        };
        let mut first = read.map(Some);
        // Coalescing: the first statement goes at once while the pool has a connection for it
        // (see `Coalescer::enter`), else in the next batch ([`statements::CLAIM_BATCH`], whose
        // row answers as this one's would).
        if self.coalescing && first.is_none() {
            let call = || ClaimCall {
                ns: ns_c,
                tenant: tenant.to_vec(),
                key: key.to_vec(),
                fingerprint: fingerprint.to_vec(),
                lease_ms,
                retention_ms,
                fence: token,
                buffered,
                nonce,
            };
            first = Some(match Coalescer::<Claims>::enter(self, call) {
                Turn::Alone(lead) => {
                    let row = run(fast).await;
                    drop(lead);
                    row?
                }
                Turn::Queued(answer) => group_commit::answer(answer).await?,
            });
        }
        for _ in 0..RERUNS {
            let row = match first.take() {
                Some(row) => row,
                None => run(fast).await?,
            };
            // No row, or no decision: the key's row was inserted or changed by another claim
            // after the statement's snapshot; run the claim again to read it.
            let Some(row) = row else {
                continue;
            };
            let Some(acquired) = row.get::<_, Option<bool>>("acquired") else {
                continue;
            };
            if !acquired {
                match decide(&row, fingerprint)? {
                    Decided::Answer(claim, expires_at, now) => return Ok((claim, expires_at, now)),
                    // Expired, released, or a lease run out: taken under the row lock.
                    Decided::Acquirable => fast = false,
                }
                continue;
            }
            let fence = from_i64("fence", row.get("fence"))?;
            self.note_epoch(fence);
            return Ok((
                Claim::Acquired(Lease {
                    tenant: tenant.to_vec(),
                    key: key.to_vec(),
                    fence,
                    until: from_i64("lease_until", row.get("lease_until"))?,
                    attempt: from_i32("attempts", row.get("attempts"))?,
                    takeover: row.get("taken_over"),
                    checkpoint: checkpoint(
                        row.get("checkpoint_phase"),
                        row.get("checkpoint_state"),
                    ),
                    store_id: self.store_id,
                    ns,
                }),
                0,
                0,
            ));
        }
        Err(Error::Contention { attempts: RERUNS })
    }

    /// A holder's call: one `UPDATE ... WHERE fence = $n AND state = pending` decides; only when
    /// it changed nothing, a read of the row says why (a lost lease costs a second round trip).
    pub(crate) async fn holder(
        self: &Arc<Self>,
        lease: &Lease,
        change: HolderChange,
    ) -> Result<std::result::Result<Millis, LeaseLost>> {
        if lease.store_id != self.store_id {
            return Err(Error::ForeignLease);
        }
        let ns_c = ns_code(lease.ns);
        let fence = to_i64("fence", lease.fence)?;
        // Coalescing a lease's end: alone at once while few are in flight (the one-call path
        // below, holding the turn until it ends), else in the next batch; a call
        // the batch did not apply takes the one-call path too, which says why.
        let _lead;
        if let (true, Some(call)) = (self.coalescing, HolderRow::of(lease, fence, &change)) {
            match Coalescer::<Holders>::enter(self, call) {
                Turn::Alone(lead) => _lead = lead,
                Turn::Queued(answer) => {
                    if let Some(until) = group_commit::answer(answer).await? {
                        return Ok(Ok(from_i64("lease_until", until)?));
                    }
                }
            }
        }
        let call = HolderCall::new(change)?;
        for _ in 0..RERUNS {
            let now = self.now_param();
            if self.mode == StatementMode::Unnamed {
                // One call of the function: it applies the change, or says why not.
                let params = call.function_params([&ns_c, &lease.tenant, &lease.key, &fence, &now]);
                let row = self.query(statements::HOLDER_FN, &params).await?;
                let Some(row) = row else {
                    return Err(Error::Engine(
                        "PostgreSQL: idemdb_holder returned no row".into(),
                    ));
                };
                if let Some(until) = row.get::<_, Option<i64>>("done_until") {
                    return Ok(Ok(from_i64("lease_until", until)?));
                }
                match lost_from_row(&row, fence)? {
                    Some(lost) => return Ok(Err(lost)),
                    None => continue,
                }
            }
            let params = call.params([&ns_c, &lease.tenant, &lease.key, &fence, &now]);
            if let Some(row) = self.query(call.sql, &params).await? {
                return Ok(Ok(from_i64("lease_until", row.get("lease_until"))?));
            }
            // It applied to nothing: read why.
            let Some(row) = self
                .query(
                    statements::HOLDER_WHY,
                    &[&ns_c, &lease.tenant, &lease.key, &now],
                )
                .await?
            else {
                return Ok(Err(LeaseLost::Gone));
            };
            match lost_from_row(&row, fence)? {
                Some(lost) => return Ok(Err(lost)),
                // Ours when read, after the update found it otherwise: ask again.
                None => continue,
            }
        }
        Err(Error::Contention { attempts: RERUNS })
    }

    /// A record as stored, if live.
    pub(crate) async fn get(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
    ) -> Result<Option<RecordInfo>> {
        let ns_c = ns_code(ns);
        let now = self.now_param();
        let row = self
            .query(statements::GET, &[&ns_c, &tenant, &key, &now])
            .await?;
        let Some(row) = row else { return Ok(None) };
        let state = match row.get::<_, i16>("state") {
            PENDING => RecordState::Pending {
                lease_until: from_i64("lease_until", row.get("lease_until"))?,
            },
            RELEASED => RecordState::Released,
            COMPLETED => RecordState::Completed(replay(&row)?),
            FAILED => RecordState::Failed(replay(&row)?),
            other => {
                return Err(crate::error::corrupted(
                    "request row",
                    format!("unknown state {other}"),
                ))
            }
        };
        Ok(Some(RecordInfo {
            state,
            fingerprint: row.get("fingerprint"),
            created_at: from_i64("created_at", row.get("created_at"))?,
            expires_at: from_i64("expires_at", row.get("expires_at"))?,
            fence: from_i64("fence", row.get("fence"))?,
            attempts: from_i32("attempts", row.get("attempts"))?,
            takeovers: from_i32("takeovers", row.get("takeovers"))?,
            checkpoint: checkpoint(row.get("checkpoint_phase"), row.get("checkpoint_state")),
        }))
    }

    /// Deletes a record whatever its state; whether a row was there.
    pub(crate) async fn forget(&self, ns: Namespace, tenant: &[u8], key: &[u8]) -> Result<bool> {
        let ns_c = ns_code(ns);
        let n = self
            .execute(statements::FORGET, &[&ns_c, &tenant, &key])
            .await?;
        Ok(n > 0)
    }
}

/// What a claim's row that it did not acquire decides.
enum Decided {
    /// The claim's answer: a replay, a mismatch or a live lease (with the record's expiry and the
    /// database's time for a finished record, for the replay tier; zeros otherwise).
    Answer(Claim, Millis, Millis),
    /// Expired, released, or a lease run out: taken under the row lock (`idemdb_claim`).
    Acquirable,
}

/// Decides from a key's row as read (by the claim's own read, or by [`statements::CLAIM_READ`]):
/// only what needs no write. The claim rule is [`claim_step`]'s.
fn decide(row: &Row, fingerprint: &[u8]) -> Result<Decided> {
    let now = from_i64("database time", row.get("now"))?;
    let expires_at = from_i64("expires_at", row.get("expires_at"))?;
    let stored_fp: Option<&[u8]> = row.get("fingerprint");
    let state = seen_state(
        row.get("state"),
        from_i64("lease_until", row.get("lease_until"))?,
    )?;
    let found = Found {
        expires_at,
        fingerprint: stored_fp.unwrap_or_default(),
        state,
    };
    Ok(match claim_step(Some(found), fingerprint, now) {
        ClaimStep::Completed(()) => {
            Decided::Answer(Claim::Completed(replay(row)?), expires_at, now)
        }
        ClaimStep::Failed(()) => Decided::Answer(Claim::Failed(replay(row)?), expires_at, now),
        ClaimStep::Mismatch => Decided::Answer(Claim::Mismatch, 0, 0),
        ClaimStep::InProgress { retry_after } => {
            Decided::Answer(Claim::InProgress { retry_after }, 0, 0)
        }
        // Expired, released, or a lease run out: taken under the row lock (`idemdb_claim`).
        ClaimStep::Absent | ClaimStep::Expired | ClaimStep::Acquire { .. } => Decided::Acquirable,
    })
}

/// How often recent claims found their key's row (an average over about the last 8, in
/// 1/65,536ths): while most did, a claim reads first ([`statements::CLAIM_READ`]). Updated
/// without a lock; a lost update only nudges the guess.
#[derive(Default)]
pub(crate) struct Hits(AtomicU32);

impl Hits {
    const ONE: u32 = 1 << 16;

    /// Whether more than three claims in four found their row lately: a read first then saves
    /// the server the claim's insert branch more often than it costs a second round trip.
    fn likely(&self) -> bool {
        self.0.load(Ordering::Relaxed) > Self::ONE / 4 * 3
    }

    fn note(&self, found: bool) {
        let p = self.0.load(Ordering::Relaxed);
        let to = if found { Self::ONE } else { 0 };
        self.0.store(p - p / 8 + to / 8, Ordering::Relaxed);
    }
}

/// A claim's first statement, queued for a coalesced one.
pub(crate) struct ClaimCall {
    ns: i16,
    tenant: Vec<u8>,
    key: Vec<u8>,
    fingerprint: Vec<u8>,
    lease_ms: i64,
    retention_ms: i64,
    /// Its token from the store's block (`None`: drawn by the statement).
    fence: Option<i64>,
    /// Whether it may commit without waiting for its flush (a batch does only if all may).
    buffered: bool,
    /// Its nonce (`lost_claims.rs`).
    nonce: i64,
}

/// Claims coalesced: [`statements::CLAIM_BATCH`]; each call's row as [`statements::CLAIM_FAST`]
/// would answer it (`None`: no row, ask again).
pub(crate) struct Claims;

impl Kind for Claims {
    type Call = ClaimCall;
    type Answer = Option<Row>;

    fn key(c: &ClaimCall) -> (i16, &[u8], &[u8]) {
        (c.ns, &c.tenant, &c.key)
    }

    fn bytes(c: &ClaimCall) -> usize {
        c.tenant.len() + c.key.len() + c.fingerprint.len() + 32
    }

    fn queue(store: &PgStore) -> &Coalescer<Self> {
        &store.claims
    }

    async fn run(store: &PgStore, calls: &[ClaimCall]) -> Result<Vec<Option<Row>>> {
        let sorted = by_key::<Self>(calls);
        let ns: Vec<i16> = sorted.iter().map(|(_, c)| c.ns).collect();
        let tenants: Vec<&[u8]> = sorted.iter().map(|(_, c)| &c.tenant[..]).collect();
        let keys: Vec<&[u8]> = sorted.iter().map(|(_, c)| &c.key[..]).collect();
        let fps: Vec<&[u8]> = sorted.iter().map(|(_, c)| &c.fingerprint[..]).collect();
        let leases: Vec<i64> = sorted.iter().map(|(_, c)| c.lease_ms).collect();
        let retentions: Vec<i64> = sorted.iter().map(|(_, c)| c.retention_ms).collect();
        let fences: Vec<Option<i64>> = sorted.iter().map(|(_, c)| c.fence).collect();
        let buffered = sorted.iter().all(|(_, c)| c.buffered);
        let nonces: Vec<i64> = sorted.iter().map(|(_, c)| c.nonce).collect();
        let now = store.now_param();
        let rows = store
            .query_rows_in(
                store.mode,
                statements::CLAIM_BATCH,
                &[
                    &ns,
                    &tenants,
                    &keys,
                    &fps,
                    &leases,
                    &retentions,
                    &now,
                    &fences,
                    &buffered,
                    &nonces,
                ],
            )
            .await?;
        let mut out: Vec<Option<Row>> = calls.iter().map(|_| None).collect();
        for row in rows {
            let at = slot(&sorted, row.get("ord"))?;
            if let Some(o) = out.get_mut(at) {
                *o = Some(row);
            }
        }
        Ok(out)
    }
}

/// A lease's end, queued for a coalesced statement.
pub(crate) struct HolderRow {
    ns: i16,
    tenant: Vec<u8>,
    key: Vec<u8>,
    fence: i64,
    /// The new state: 1 released, 2 completed, 3 failed.
    state: i16,
    body: Option<Vec<u8>>,
    meta: Vec<String>,
}

impl HolderRow {
    /// The row of a change that ends the lease (a renewal or a checkpoint goes alone).
    fn of<'a>(
        lease: &'a Lease,
        fence: i64,
        change: &'a HolderChange,
    ) -> Option<impl FnOnce() -> HolderRow + 'a> {
        let state: i16 = match change {
            HolderChange::Release => 1,
            HolderChange::Complete(_) => 2,
            HolderChange::FailTerminal(_) => 3,
            HolderChange::Renew(_) | HolderChange::Checkpoint(_) => return None,
        };
        Some(move || {
            let (body, meta) = match change {
                HolderChange::Complete(r) | HolderChange::FailTerminal(r) => {
                    (Some(r.body.clone()), encode_meta(&r.meta))
                }
                _ => (None, Vec::new()),
            };
            HolderRow {
                ns: ns_code(lease.ns),
                tenant: lease.tenant.clone(),
                key: lease.key.clone(),
                fence,
                state,
                body,
                meta,
            }
        })
    }
}

/// Lease ends coalesced: [`statements::HOLDER_BATCH`]; each call's lease end if it applied.
pub(crate) struct Holders;

impl Kind for Holders {
    type Call = HolderRow;
    type Answer = Option<i64>;

    fn key(c: &HolderRow) -> (i16, &[u8], &[u8]) {
        (c.ns, &c.tenant, &c.key)
    }

    fn bytes(c: &HolderRow) -> usize {
        let meta: usize = c.meta.iter().map(String::len).sum();
        c.tenant.len() + c.key.len() + c.body.as_ref().map_or(0, Vec::len) + meta + 32
    }

    fn queue(store: &PgStore) -> &Coalescer<Self> {
        &store.holders
    }

    async fn run(store: &PgStore, calls: &[HolderRow]) -> Result<Vec<Option<i64>>> {
        let sorted = by_key::<Self>(calls);
        let ns: Vec<i16> = sorted.iter().map(|(_, c)| c.ns).collect();
        let tenants: Vec<&[u8]> = sorted.iter().map(|(_, c)| &c.tenant[..]).collect();
        let keys: Vec<&[u8]> = sorted.iter().map(|(_, c)| &c.key[..]).collect();
        let fences: Vec<i64> = sorted.iter().map(|(_, c)| c.fence).collect();
        let states: Vec<i16> = sorted.iter().map(|(_, c)| c.state).collect();
        let bodies: Vec<Option<&[u8]>> = sorted.iter().map(|(_, c)| c.body.as_deref()).collect();
        let (mut meta, mut from, mut to) = (Vec::new(), Vec::new(), Vec::new());
        for (_, c) in &sorted {
            let start = i32::try_from(meta.len()).unwrap_or(i32::MAX);
            meta.extend(c.meta.iter().map(String::as_str));
            from.push(start.saturating_add(1));
            to.push(i32::try_from(meta.len()).unwrap_or(i32::MAX));
        }
        let now = store.now_param();
        let rows = store
            .query_rows_in(
                store.mode,
                statements::HOLDER_BATCH,
                &[
                    &ns, &tenants, &keys, &fences, &states, &bodies, &meta, &from, &to, &now,
                ],
            )
            .await?;
        let mut out: Vec<Option<i64>> = vec![None; calls.len()];
        for row in rows {
            let at = slot(&sorted, i64::from(row.get::<_, i32>("ord")))?;
            if let Some(o) = out.get_mut(at) {
                *o = Some(row.get("lease_until"));
            }
        }
        Ok(out)
    }
}

/// The calls with their positions, sorted by key: every coalesced statement takes its rows'
/// locks in key order, so two of them (in any instances) never wait for each other in a circle.
fn by_key<K: Kind>(calls: &[K::Call]) -> Vec<(usize, &K::Call)> {
    let mut sorted: Vec<(usize, &K::Call)> = calls.iter().enumerate().collect();
    sorted.sort_by(|a, b| K::key(a.1).cmp(&K::key(b.1)));
    sorted
}

/// The call a coalesced statement's row answers: its `ord`, the 1-based position in the sorted
/// arrays.
fn slot<C>(sorted: &[(usize, &C)], ord: i64) -> Result<usize> {
    usize::try_from(ord)
        .ok()
        .and_then(|o| o.checked_sub(1))
        .and_then(|o| sorted.get(o))
        .map(|(at, _)| *at)
        .ok_or_else(|| {
            crate::error::corrupted("coalesced statement", format!("a row for call {ord}"))
        })
}
