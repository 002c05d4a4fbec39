//! idemdb's part of a commit on PostgreSQL, run inside a transaction (the application's, or one
//! of its own). Invariant: the operations run in one fixed order of tables and keys (entities,
//! then reservations, then request rows; by key within each), so two commits never wait on each
//! other in a cycle; each is decided by the database under its row's lock; every operation is
//! evaluated and the conflict reported is the one of the first operation in the order the caller
//! added them (as on the embedded store); the caller rolls back on any conflict.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use super::entities::{condition, WriteOutcome};
use super::errors::classify;
use super::rows::{from_i64, lost_from_row, ns_code, to_i64, HolderCall, HolderChange};
use super::send::Session;
use super::statements as sql;
use super::store::{one, PgStore};
use std::sync::Arc;

use super::transaction::SqlTransaction;
use super::Postgres;
use crate::commit::{CommitConflict, Committed, EntityWrite, LeaseEnd, Plan, PlanOp};
use crate::entities::{Expect, StoredEntity, Version};
use crate::error::{corrupted, Error, Result};
use crate::record::{FailKind, Lease};
use crate::telemetry::counters::Metrics;
use crate::telemetry::spans::{Op, OpKind};
use crate::unique::Reservation;

/// One operation of a commit, as PostgreSQL runs it.
pub(crate) enum PgOp {
    /// An entity's condition and write (`None`: a check only; `Some(None)`: a delete).
    Entity {
        tenant: Vec<u8>,
        id: Vec<u8>,
        expect: Expect,
        write: Option<Option<Vec<u8>>>,
    },
    /// A plain reservation (`value` is the composite encoding).
    Reserve {
        index: Vec<u8>,
        value: Vec<u8>,
        owner: Vec<u8>,
    },
    /// The end of a lease: completion, terminal failure or release.
    Lease { lease: Lease, call: HolderCall },
}

impl PgOp {
    /// The statement the operation starts with.
    fn first_statement(&self) -> &'static str {
        match self {
            PgOp::Entity { write: None, .. } => sql::ENTITY_HOLD,
            PgOp::Entity { .. } => sql::ENTITY_PUT,
            PgOp::Reserve { .. } => sql::RESERVE,
            PgOp::Lease { call, .. } => call.sql,
        }
    }

    /// Where the operation runs in the fixed lock order.
    fn order_key(&self) -> (u8, &[u8], &[u8], i16) {
        match self {
            PgOp::Entity { tenant, id, .. } => (0, tenant, id, 0),
            PgOp::Reserve { index, value, .. } => (1, index, value, 0),
            PgOp::Lease { lease, .. } => (2, &lease.tenant, &lease.key, ns_code(lease.ns)),
        }
    }
}

/// What one pipelined step answered: nothing (`BEGIN`), or an operation's index and outcome.
type StepOutcome = Option<(usize, std::result::Result<Option<Version>, CommitConflict>)>;

/// Polls every future until all are done (they run concurrently on one task, so statements on
/// one connection are sent together); their outputs in the order given.
async fn join_all<F: Future + Unpin>(mut futs: Vec<F>) -> Vec<F::Output> {
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match Pin::new(&mut *f).poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

impl PgStore {
    /// Runs `ops` on `c` (inside a transaction the caller ends; `begin`: this call starts it):
    /// the version after each operation, or the first conflict in the order given. The
    /// statements are pipelined (sent together, `BEGIN` first when asked, then each operation in
    /// the fixed order, which is also the order the server runs them in): one round trip for all
    /// of them while every operation answers in one statement, more only for the operations that
    /// need a second (a lost lease's explanation).
    pub(crate) async fn apply_ops(
        &self,
        c: &deadpool_postgres::Object,
        ops: Vec<PgOp>,
        begin: bool,
    ) -> Result<std::result::Result<Vec<Option<Version>>, CommitConflict>> {
        let n = ops.len();
        let mut ordered: Vec<(usize, PgOp)> = ops.into_iter().enumerate().collect();
        ordered.sort_by(|(_, a), (_, b)| a.order_key().cmp(&b.order_key()));
        if ordered
            .iter()
            .zip(ordered.iter().skip(1))
            .any(|((_, a), (_, b))| a.order_key() == b.order_key())
        {
            return Err(crate::requests::names_twice());
        }
        // Every statement is prepared first (on a connection that has not prepared it yet: one
        // round trip for all of them), so that the executions below go out in the fixed order:
        // an operation waiting for its `Parse` would otherwise be sent after the next one and
        // lock its row out of order.
        let mut first: Vec<&'static str> =
            ordered.iter().map(|(_, op)| op.first_statement()).collect();
        first.sort_unstable();
        first.dedup();
        let prepares: Vec<_> = first
            .into_iter()
            .map(|q| Box::pin(async move { c.ready(self.mode, q).await.map_err(classify) }))
            .collect();
        for prepared in self.timed(async { Ok(join_all(prepares).await) }).await? {
            prepared?;
        }
        type Step<'a> = Pin<Box<dyn Future<Output = Result<StepOutcome>> + Send + 'a>>;
        let mut steps: Vec<Step<'_>> = Vec::with_capacity(n + 1);
        if begin {
            steps.push(Box::pin(async move {
                self.timed(async { c.batch_execute("BEGIN").await.map_err(classify) })
                    .await
                    .map(|()| None)
            }));
        }
        for (i, op) in ordered {
            steps.push(Box::pin(async move {
                self.run_op(c, i, op).await.map(|r| Some((i, r)))
            }));
        }
        let mut versions = vec![None; n];
        let mut first_conflict: Option<CommitConflict> = None;
        let conflict_op = |c: &CommitConflict| match c {
            CommitConflict::Condition { op, .. }
            | CommitConflict::Taken { op, .. }
            | CommitConflict::Lease { op, .. } => *op,
        };
        // The first error in the order sent is the cause (a statement after a failed one in the
        // same transaction only reports that the transaction is aborted).
        for step in join_all(steps).await {
            match step? {
                None => {}
                Some((i, Ok(v))) => {
                    if let Some(slot) = versions.get_mut(i) {
                        *slot = v;
                    }
                }
                Some((_, Err(conflict)))
                    if first_conflict
                        .as_ref()
                        .is_none_or(|f| conflict_op(&conflict) < conflict_op(f)) =>
                {
                    first_conflict = Some(conflict);
                }
                Some((_, Err(_))) => {}
            }
        }
        Ok(match first_conflict {
            Some(c) => Err(c),
            None => Ok(versions),
        })
    }

    async fn run_op(
        &self,
        c: &deadpool_postgres::Object,
        i: usize,
        op: PgOp,
    ) -> Result<std::result::Result<Option<Version>, CommitConflict>> {
        let now = self.now_param();
        match op {
            PgOp::Entity {
                tenant,
                id,
                expect,
                write: Some(value),
            } => {
                let (kind, version) = condition(expect);
                let delete = value.is_none();
                let row = self
                    .timed(one(
                        c,
                        self.mode,
                        sql::ENTITY_PUT,
                        &[&tenant, &id, &kind, &version, &value, &delete],
                    ))
                    .await?
                    .ok_or_else(|| corrupted("idemdb_put_entity", "no row"))?;
                let out: WriteOutcome = super::entities::outcome(&row)?;
                Ok(match out {
                    Ok(v) => Ok(if delete { None } else { v }),
                    Err(conflict) => Err(CommitConflict::Condition {
                        op: i,
                        current: conflict.current,
                    }),
                })
            }
            PgOp::Entity {
                tenant,
                id,
                expect,
                write: None,
            } => {
                // A check: hold the row, in one statement (for an entity with no row, a
                // version-0 tombstone is inserted and held, so a concurrent first write waits
                // too; version 0 reads as absent).
                let row = self
                    .timed(one(c, self.mode, sql::ENTITY_HOLD, &[&tenant, &id]))
                    .await?
                    .ok_or_else(|| corrupted("idemdb_entities", "the held row is gone"))?;
                let version: i64 = row.get(0);
                let cur = StoredEntity {
                    version: from_i64("entity version", version)?,
                    value: row.get(1),
                };
                let live = cur.value.is_some().then_some(cur.version);
                Ok(if expect.holds(Some(&cur)) {
                    Ok(live)
                } else {
                    Err(CommitConflict::Condition {
                        op: i,
                        current: cur.live(),
                    })
                })
            }
            PgOp::Reserve {
                index,
                value,
                owner,
            } => Ok(
                match self
                    .timed(self.reserve_on(c, &index, &value, &owner, None))
                    .await?
                {
                    Ok(Reservation::Taken { owner }) => Err(CommitConflict::Taken { op: i, owner }),
                    Ok(_) => Ok(None),
                    Err(lost) => {
                        return Err(corrupted(
                            "idemdb_reserve",
                            format!("a plain reservation answered {lost:?}"),
                        ))
                    }
                },
            ),
            PgOp::Lease { lease, call } => {
                if lease.store_id != self.store_id {
                    return Err(Error::ForeignLease);
                }
                let ns = ns_code(lease.ns);
                let fence = to_i64("fence", lease.fence)?;
                let params = call.params([&ns, &lease.tenant, &lease.key, &fence, &now]);
                if self
                    .timed(one(c, self.mode, call.sql, &params))
                    .await?
                    .is_some()
                {
                    return Ok(Ok(None));
                }
                let row = self
                    .timed(one(
                        c,
                        self.mode,
                        sql::HOLDER_WHY,
                        &[&ns, &lease.tenant, &lease.key, &now],
                    ))
                    .await?;
                let lost = match row {
                    None => crate::record::LeaseLost::Gone,
                    Some(row) => {
                        lost_from_row(&row, fence)?
                            // Inside this transaction the update saw the newest row: a row that
                            // still reads as ours cannot be; call it what the update found.
                            .unwrap_or(crate::record::LeaseLost::Gone)
                    }
                };
                Ok(Err(CommitConflict::Lease { op: i, lost }))
            }
        }
    }
}

impl PgOp {
    /// A plan's operation as PostgreSQL runs it.
    fn from_plan(op: PlanOp) -> Result<PgOp> {
        Ok(match op {
            PlanOp::Entity {
                tenant,
                id,
                expect,
                write,
            } => PgOp::Entity {
                tenant,
                id,
                expect,
                write: match write {
                    EntityWrite::Check => None,
                    EntityWrite::Put(v) => Some(Some(v)),
                    EntityWrite::Delete => Some(None),
                },
            },
            PlanOp::Lease { lease, end } => PgOp::Lease {
                lease,
                call: HolderCall::new(match end {
                    LeaseEnd::Complete(r) => HolderChange::Complete(r),
                    LeaseEnd::Fail(FailKind::Terminal(r)) => HolderChange::FailTerminal(r),
                    LeaseEnd::Fail(FailKind::Retryable) => HolderChange::Release,
                })?,
            },
            PlanOp::Reserve {
                index,
                value,
                owner,
            } => {
                let parts: Vec<&[u8]> = value.iter().map(Vec::as_slice).collect();
                PgOp::Reserve {
                    index,
                    value: crate::format::composite(&parts),
                    owner,
                }
            }
        })
    }
}

/// A plan as PostgreSQL runs it, and the lease ends to count once it commits.
pub(crate) fn run_form(plan: Plan, metrics: &Arc<Metrics>) -> Result<(Vec<PgOp>, LeaseEnds)> {
    let ops = plan.into_ops()?;
    let mut ends = LeaseEnds {
        metrics: metrics.clone(),
        completed: 0,
        released: 0,
        failed: 0,
    };
    for op in &ops {
        if let PlanOp::Lease { end, .. } = op {
            match end {
                LeaseEnd::Complete(_) => ends.completed += 1,
                LeaseEnd::Fail(FailKind::Retryable) => ends.released += 1,
                LeaseEnd::Fail(FailKind::Terminal(_)) => ends.failed += 1,
            }
        }
    }
    let ops = ops
        .into_iter()
        .map(PgOp::from_plan)
        .collect::<Result<Vec<_>>>()?;
    Ok((ops, ends))
}

impl Postgres {
    /// Applies a commit's plan in a transaction of its own, in its span.
    pub(crate) async fn commit(
        &self,
        plan: Plan,
    ) -> Result<std::result::Result<Committed, CommitConflict>> {
        let op = Op::unkeyed(OpKind::Commit);
        op.count(plan.len() as u64);
        let r = match SqlTransaction::deferred(self.sql.clone()).await {
            Ok(tx) => tx.commit_plan(self, plan).await,
            Err(e) => Err(e),
        };
        op.end_with(r, |r| if r.is_ok() { "committed" } else { "conflict" })
    }
}

/// The lease ends of a commit on PostgreSQL, counted as the embedded store counts them: each
/// end once the commit is committed, one lost lease when a lease refused it.
pub(crate) struct LeaseEnds {
    metrics: Arc<Metrics>,
    completed: u64,
    released: u64,
    failed: u64,
}

impl LeaseEnds {
    /// The commit is committed: every lease it ended is counted.
    pub(crate) fn committed(&self) {
        let m = &self.metrics;
        for (count, n) in [
            (&m.completed, self.completed),
            (&m.failed_retryable, self.released),
            (&m.failed_terminal, self.failed),
        ] {
            if n > 0 {
                count.add(n);
            }
        }
    }

    /// The commit was refused: a lost lease is counted as a holder's refused call is.
    pub(crate) fn refused(&self, conflict: &CommitConflict) {
        if matches!(conflict, CommitConflict::Lease { .. }) {
            Metrics::bump(&self.metrics.lease_lost);
        }
    }
}
