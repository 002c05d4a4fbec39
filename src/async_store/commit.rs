//! Atomic commits through the async API. Invariant: a commit means what the embedded store's
//! [`Commit`](crate::Commit) means (the same operations, argument checks, conflicts and
//! versions), on either backend: on PostgreSQL it is one transaction, which may also hold the
//! application's own statements ([`AsyncStore::transaction`]), so that "request done" or
//! "message processed" commits with the business change or not at all.

use super::{dispatch, AsyncStore};
use crate::commit::{plan_builder, CommitConflict, Committed, Plan};
use crate::config::Common;
use crate::error::Result;

/// A set of conditions and writes applied all or nothing, built with [`AsyncStore::commit`]:
/// the same builder as the embedded store's [`Commit`](crate::Commit). Apply it with
/// [`AsyncCommit::apply`], or inside the application's transaction with
/// [`SqlTransaction::commit_with`](crate::SqlTransaction::commit_with) (PostgreSQL).
#[must_use = "a commit does nothing until it is applied"]
pub struct AsyncCommit<'s> {
    store: &'s AsyncStore,
    plan: Plan,
}

impl AsyncStore {
    /// Starts an atomic commit, as [`Store::commit`](crate::Store::commit).
    pub fn commit(&self) -> AsyncCommit<'_> {
        AsyncCommit {
            store: self,
            plan: Plan::default(),
        }
    }

    /// Begins a transaction of the application's own on a pooled connection (PostgreSQL): its
    /// statements, then idemdb's commit, commit together or not at all (the transactional inbox;
    /// see [`SqlTransaction`](crate::SqlTransaction)). The embedded store has no SQL: there,
    /// keep the business data in the commit itself (entities written by
    /// [`AsyncCommit::put`]), and this is refused with `InvalidInput::Config`.
    #[cfg(feature = "postgres")]
    pub async fn transaction(&self) -> Result<crate::postgres::SqlTransaction> {
        dispatch!(&self.backend, transaction().await)
    }
}

impl<'s> AsyncCommit<'s> {
    fn common(&self) -> &'s Common {
        self.store.common()
    }

    plan_builder!();

    /// Checks every condition and applies every write, or writes nothing, as
    /// [`Commit::apply`](crate::Commit::apply). On PostgreSQL: one transaction of its own.
    pub async fn apply(self) -> Result<std::result::Result<Committed, CommitConflict>> {
        dispatch!(&self.store.backend, apply(self.plan).await)
    }
}

#[cfg(feature = "postgres")]
impl crate::postgres::SqlTransaction {
    /// Applies idemdb's operations of `commit` (built with [`AsyncStore::commit`] on the same
    /// store) inside this transaction and commits it: the application's statements and idemdb's
    /// writes are all there afterwards, or none of them. A condition that does not hold rolls
    /// everything back and is returned as the conflict. A commit built on another store is
    /// refused with `InvalidInput::Config`.
    pub async fn commit_with(
        self,
        commit: AsyncCommit<'_>,
    ) -> Result<std::result::Result<Committed, CommitConflict>> {
        dispatch!(&commit.store.backend, apply_in(self, commit.plan).await)
    }
}
