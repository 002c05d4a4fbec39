//! A commit on either backend: its plan (the operations as given, each checked once as it is
//! added) and its answers. Invariant: a commit that returns [`Committed`] wrote every operation;
//! one that returns a [`CommitConflict`] wrote nothing, and names the first operation, in the
//! order added, whose condition failed; a plan with a refused operation writes nothing.

use crate::config::Common;
use crate::entities::{Expect, Version, Versioned};
use crate::error::{Error, Result};
use crate::record::{FailKind, Lease, LeaseLost, Response};

/// What a successful commit wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// Per operation, in the order added: the entity's version after the commit (`None` for a
    /// lease operation, or for an entity that is absent afterwards).
    pub versions: Vec<Option<Version>>,
}

/// Why a commit wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum CommitConflict {
    /// The condition of operation `op` (0-based, in the order added) did not hold.
    Condition {
        /// Which operation.
        op: usize,
        /// What is there now.
        current: Option<Versioned>,
    },
    /// The value reserved by operation `op` is held by another owner.
    Taken {
        /// Which operation.
        op: usize,
        /// The current owner.
        owner: Vec<u8>,
    },
    /// The lease of operation `op` is no longer current.
    Lease {
        /// Which operation.
        op: usize,
        /// Why.
        lost: LeaseLost,
    },
}

/// How an entity operation of a commit writes.
pub(crate) enum EntityWrite {
    /// A condition only.
    Check,
    Put(Vec<u8>),
    /// A delete, leaving the version in a tombstone.
    Delete,
}

/// How a lease operation of a commit ends the lease.
pub(crate) enum LeaseEnd {
    Complete(Response),
    Fail(FailKind),
}

/// One operation of a commit, as the caller gave it.
pub(crate) enum PlanOp {
    Entity {
        tenant: Vec<u8>,
        id: Vec<u8>,
        expect: Expect,
        write: EntityWrite,
    },
    Lease {
        lease: Lease,
        end: LeaseEnd,
    },
    Reserve {
        index: Vec<u8>,
        /// The value's parts.
        value: Vec<Vec<u8>>,
        owner: Vec<u8>,
    },
}

/// The operations of a commit in the order added, each checked once as it is added (names and
/// sizes, by the configuration's limits); the first refused operation is kept and answered by
/// `apply`, after which nothing else is added. Both backends run a plan: the embedded
/// [`Commit`](crate::Commit), and [`AsyncCommit`](crate::AsyncCommit) on either backend.
#[derive(Default)]
pub(crate) struct Plan {
    ops: Vec<PlanOp>,
    error: Option<Error>,
}

impl Plan {
    fn push(&mut self, checked: Result<()>, op: impl FnOnce() -> PlanOp) {
        if self.error.is_some() {
            return;
        }
        match checked {
            Ok(()) => self.ops.push(op()),
            Err(e) => self.error = Some(e),
        }
    }

    pub(crate) fn entity(
        &mut self,
        cfg: &Common,
        tenant: &[u8],
        id: &[u8],
        expect: Expect,
        write: EntityWrite,
    ) {
        let value = match &write {
            EntityWrite::Put(v) => Some(v.as_slice()),
            EntityWrite::Check | EntityWrite::Delete => None,
        };
        let checked = crate::entities::check_write(cfg, tenant, id, value);
        self.push(checked, || PlanOp::Entity {
            tenant: tenant.to_vec(),
            id: id.to_vec(),
            expect,
            write,
        });
    }

    pub(crate) fn lease(&mut self, cfg: &Common, lease: &Lease, end: LeaseEnd) {
        let checked = match &end {
            LeaseEnd::Complete(r) | LeaseEnd::Fail(FailKind::Terminal(r)) => {
                crate::requests::check_response(cfg, "response", r)
            }
            LeaseEnd::Fail(FailKind::Retryable) => Ok(()),
        };
        self.push(checked, || PlanOp::Lease {
            lease: lease.clone(),
            end,
        });
    }

    pub(crate) fn reserve(&mut self, cfg: &Common, index: &[u8], value: &[&[u8]], owner: &[u8]) {
        let encoded = crate::format::composite(value);
        let checked = cfg
            .check_names(index, &encoded)
            .and_then(|()| cfg.check_names(index, owner));
        self.push(checked, || PlanOp::Reserve {
            index: index.to_vec(),
            value: value.iter().map(|p| p.to_vec()).collect(),
            owner: owner.to_vec(),
        });
    }

    /// How many operations were added.
    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    /// The operations, or the first refusal.
    pub(crate) fn into_ops(self) -> Result<Vec<PlanOp>> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.ops),
        }
    }
}

/// The builder methods of a commit over a [`Plan`]: `Commit` and `AsyncCommit` each have a
/// `plan` field and a `common()` (the settings both backends read), and get the same methods with the same checks.
macro_rules! plan_builder {
    () => {
        /// A condition on an entity, with no write.
        pub fn check(
            mut self,
            tenant: impl AsRef<[u8]>,
            id: impl AsRef<[u8]>,
            expect: $crate::Expect,
        ) -> Self {
            let write = $crate::commit::EntityWrite::Check;
            let cfg = self.common();
            self.plan
                .entity(cfg, tenant.as_ref(), id.as_ref(), expect, write);
            self
        }

        /// Writes `value` to an entity if `expect` holds.
        pub fn put(
            mut self,
            tenant: impl AsRef<[u8]>,
            id: impl AsRef<[u8]>,
            expect: $crate::Expect,
            value: impl Into<Vec<u8>>,
        ) -> Self {
            let write = $crate::commit::EntityWrite::Put(value.into());
            let cfg = self.common();
            self.plan
                .entity(cfg, tenant.as_ref(), id.as_ref(), expect, write);
            self
        }

        /// Deletes an entity (leaving its version in a tombstone) if `expect` holds.
        pub fn delete(
            mut self,
            tenant: impl AsRef<[u8]>,
            id: impl AsRef<[u8]>,
            expect: $crate::Expect,
        ) -> Self {
            let write = $crate::commit::EntityWrite::Delete;
            let cfg = self.common();
            self.plan
                .entity(cfg, tenant.as_ref(), id.as_ref(), expect, write);
            self
        }

        /// Completes an idempotency lease (or a consumer message's) in the same commit, only if
        /// it is still current.
        pub fn complete(mut self, lease: &$crate::Lease, response: $crate::Response) -> Self {
            let end = $crate::commit::LeaseEnd::Complete(response);
            let cfg = self.common();
            self.plan.lease(cfg, lease, end);
            self
        }

        /// Fails an idempotency lease in the same commit, only if it is still current.
        pub fn fail(mut self, lease: &$crate::Lease, kind: $crate::FailKind) -> Self {
            let end = $crate::commit::LeaseEnd::Fail(kind);
            let cfg = self.common();
            self.plan.lease(cfg, lease, end);
            self
        }

        /// Reserves `value` in unique index `index` for `owner`, as part of the commit.
        pub fn reserve(
            mut self,
            index: impl AsRef<[u8]>,
            value: &[&[u8]],
            owner: impl AsRef<[u8]>,
        ) -> Self {
            let cfg = self.common();
            self.plan
                .reserve(cfg, index.as_ref(), value, owner.as_ref());
            self
        }
    };
}
pub(crate) use plan_builder;
