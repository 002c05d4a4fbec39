//! Atomic commits through the async API. Invariant: a commit means what the embedded store's
//! [`Commit`](crate::Commit) means (the same operations, argument checks, conflicts and
//! versions), on either backend: on PostgreSQL it is one transaction, which may also hold the
//! application's own statements ([`AsyncStore::transaction`]), so that "request done" or
//! "message processed" commits with the business change or not at all.

use super::{blocking, AsyncStore, Backend};
use crate::commit::{CommitConflict, Committed};
use crate::error::{Error, Result};
use crate::record::{FailKind, Lease, Response};
use crate::versions::Expect;

/// One operation, as given.
enum Op {
    Entity {
        tenant: Vec<u8>,
        id: Vec<u8>,
        expect: Expect,
        /// `None`: a check; `Some(None)`: a delete.
        write: Option<Option<Vec<u8>>>,
    },
    Lease {
        lease: Lease,
        end: FailOrComplete,
    },
    Reserve {
        index: Vec<u8>,
        value: Vec<Vec<u8>>,
        owner: Vec<u8>,
    },
}

enum FailOrComplete {
    Complete(Response),
    Fail(FailKind),
}

/// A set of conditions and writes applied all or nothing, built with [`AsyncStore::commit`]:
/// the same builder as the embedded store's [`Commit`](crate::Commit). Apply it with
/// [`AsyncCommit::apply`], or inside the application's transaction with
/// [`SqlTransaction::commit_with`](crate::SqlTransaction::commit_with) (PostgreSQL).
#[must_use = "a commit does nothing until it is applied"]
pub struct AsyncCommit<'s> {
    store: &'s AsyncStore,
    ops: Vec<Op>,
    error: Option<Error>,
}

impl AsyncStore {
    /// Starts an atomic commit, as [`Store::commit`](crate::Store::commit).
    pub fn commit(&self) -> AsyncCommit<'_> {
        AsyncCommit {
            store: self,
            ops: Vec::new(),
            error: None,
        }
    }

    /// Begins a transaction of the application's own on a pooled connection (PostgreSQL): its
    /// statements, then idemdb's commit, commit together or not at all (the transactional inbox;
    /// see [`SqlTransaction`](crate::SqlTransaction)). The embedded store has no SQL: there,
    /// keep the business data in the commit itself (entities written by
    /// [`AsyncCommit::put`]), and this is refused with `InvalidInput::Config`.
    #[cfg(feature = "postgres")]
    pub async fn transaction(&self) -> Result<crate::postgres::SqlTransaction> {
        match &self.backend {
            Backend::Postgres(pg) => crate::postgres::SqlTransaction::begin(pg.clone()).await,
            Backend::Embedded(_) => Err(crate::InvalidInput::Config(
                "the application's SQL transaction needs the PostgreSQL backend; on the \
                 embedded store write the business data in the commit (AsyncCommit::put)"
                    .into(),
            )
            .into()),
        }
    }
}

impl AsyncCommit<'_> {
    fn entity(&mut self, tenant: &[u8], id: &[u8], expect: Expect, write: Option<Option<Vec<u8>>>) {
        if self.error.is_some() {
            return;
        }
        let cfg = &self.store.cfg;
        let checked = cfg.check_names(tenant, id).and_then(|()| match &write {
            Some(Some(v)) => cfg.check_size("value", v.len()),
            _ => Ok(()),
        });
        match checked {
            Ok(()) => self.ops.push(Op::Entity {
                tenant: tenant.to_vec(),
                id: id.to_vec(),
                expect,
                write,
            }),
            Err(e) => self.error = Some(e),
        }
    }

    /// A condition on an entity, with no write.
    pub fn check(mut self, tenant: impl AsRef<[u8]>, id: impl AsRef<[u8]>, expect: Expect) -> Self {
        self.entity(tenant.as_ref(), id.as_ref(), expect, None);
        self
    }

    /// Writes `value` to an entity if `expect` holds.
    pub fn put(
        mut self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        expect: Expect,
        value: impl Into<Vec<u8>>,
    ) -> Self {
        let value = value.into();
        self.entity(tenant.as_ref(), id.as_ref(), expect, Some(Some(value)));
        self
    }

    /// Deletes an entity (leaving its version in a tombstone) if `expect` holds.
    pub fn delete(
        mut self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        expect: Expect,
    ) -> Self {
        self.entity(tenant.as_ref(), id.as_ref(), expect, Some(None));
        self
    }

    fn lease(&mut self, lease: &Lease, end: FailOrComplete) {
        if self.error.is_some() {
            return;
        }
        let (what, size) = match &end {
            FailOrComplete::Complete(r) => ("response", r.size()),
            FailOrComplete::Fail(FailKind::Terminal(r)) => ("response", r.size()),
            FailOrComplete::Fail(FailKind::Retryable) => ("response", 0),
        };
        match self.store.cfg.check_size(what, size) {
            Ok(()) => self.ops.push(Op::Lease {
                lease: lease.clone(),
                end,
            }),
            Err(e) => self.error = Some(e),
        }
    }

    /// Completes an idempotency lease (or a consumer message's) in the same commit, only if it
    /// is still held.
    pub fn complete(mut self, lease: &Lease, response: Response) -> Self {
        self.lease(lease, FailOrComplete::Complete(response));
        self
    }

    /// Fails an idempotency lease in the same commit, only if it is still held.
    pub fn fail(mut self, lease: &Lease, kind: FailKind) -> Self {
        self.lease(lease, FailOrComplete::Fail(kind));
        self
    }

    /// Reserves `value` in unique index `index` for `owner`, as part of the commit.
    pub fn reserve(
        mut self,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
        owner: impl AsRef<[u8]>,
    ) -> Self {
        if self.error.is_none() {
            let (index, owner) = (index.as_ref(), owner.as_ref());
            let cfg = &self.store.cfg;
            let encoded = crate::format::composite(value);
            match cfg
                .check_names(index, &encoded)
                .and_then(|()| cfg.check_names(index, owner))
            {
                Ok(()) => self.ops.push(Op::Reserve {
                    index: index.to_vec(),
                    value: value.iter().map(|p| p.to_vec()).collect(),
                    owner: owner.to_vec(),
                }),
                Err(e) => self.error = Some(e),
            }
        }
        self
    }

    /// Checks every condition and applies every write, or writes nothing, as
    /// [`Commit::apply`](crate::Commit::apply). On PostgreSQL: one transaction of its own.
    pub async fn apply(self) -> Result<std::result::Result<Committed, CommitConflict>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        match &self.store.backend {
            Backend::Embedded(s) => {
                let ops = self.ops;
                blocking(s, move |s| {
                    let mut c = s.commit();
                    for op in ops {
                        c = match op {
                            Op::Entity {
                                tenant,
                                id,
                                expect,
                                write,
                            } => match write {
                                None => c.check(tenant, id, expect),
                                Some(Some(v)) => c.put(tenant, id, expect, v),
                                Some(None) => c.delete(tenant, id, expect),
                            },
                            Op::Lease {
                                lease,
                                end: FailOrComplete::Complete(r),
                            } => c.complete(&lease, r),
                            Op::Lease {
                                lease,
                                end: FailOrComplete::Fail(k),
                            } => c.fail(&lease, k),
                            Op::Reserve {
                                index,
                                value,
                                owner,
                            } => {
                                let parts: Vec<&[u8]> = value.iter().map(Vec::as_slice).collect();
                                c.reserve(index, &parts, owner)
                            }
                        };
                    }
                    c.apply()
                })
                .await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => {
                let op = crate::observe::Op::unkeyed(crate::observe::OpKind::Commit);
                op.count(self.ops.len() as u64);
                let r = match crate::postgres::SqlTransaction::deferred(pg.clone()).await {
                    Ok(tx) => tx.commit_with(self).await,
                    Err(e) => Err(e),
                };
                op.end_with(r, |r| if r.is_ok() { "committed" } else { "conflict" })
            }
        }
    }

    /// The operations as PostgreSQL runs them, and the lease ends to count once they commit;
    /// refuses a commit built on another store.
    #[cfg(feature = "postgres")]
    pub(crate) fn into_pg_ops(
        self,
        pg: &std::sync::Arc<crate::postgres::PgStore>,
    ) -> Result<(Vec<crate::postgres::PgOp>, LeaseEnds)> {
        use crate::postgres::{HolderCall, HolderChange, PgOp};
        if let Some(e) = self.error {
            return Err(e);
        }
        match &self.store.backend {
            Backend::Postgres(p) if std::sync::Arc::ptr_eq(p, pg) => {}
            _ => {
                return Err(crate::InvalidInput::Config(
                    "the commit was built on another store than the transaction's".into(),
                )
                .into())
            }
        }
        let mut ends = LeaseEnds {
            metrics: self.store.metrics.clone(),
            completed: 0,
            released: 0,
            failed: 0,
        };
        for op in &self.ops {
            if let Op::Lease { end, .. } = op {
                match end {
                    FailOrComplete::Complete(_) => ends.completed += 1,
                    FailOrComplete::Fail(FailKind::Retryable) => ends.released += 1,
                    FailOrComplete::Fail(FailKind::Terminal(_)) => ends.failed += 1,
                }
            }
        }
        let ops = self
            .ops
            .into_iter()
            .map(|op| {
                Ok(match op {
                    Op::Entity {
                        tenant,
                        id,
                        expect,
                        write,
                    } => PgOp::Entity {
                        tenant,
                        id,
                        expect,
                        write,
                    },
                    Op::Lease { lease, end } => PgOp::Lease {
                        lease,
                        call: HolderCall::new(match end {
                            FailOrComplete::Complete(r) => HolderChange::Complete(r),
                            FailOrComplete::Fail(FailKind::Terminal(r)) => {
                                HolderChange::FailTerminal(r)
                            }
                            FailOrComplete::Fail(FailKind::Retryable) => HolderChange::Release,
                        })?,
                    },
                    Op::Reserve {
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
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((ops, ends))
    }
}

/// The lease ends of a commit on PostgreSQL, counted as the embedded store counts them: each
/// end once the commit is committed, one lost lease when a lease refused it.
#[cfg(feature = "postgres")]
pub(crate) struct LeaseEnds {
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    completed: u64,
    released: u64,
    failed: u64,
}

#[cfg(feature = "postgres")]
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
            crate::metrics::Metrics::bump(&self.metrics.lease_lost);
        }
    }
}
