//! The one internal trait both backends answer through the async API, as lsm-tree's
//! `AbstractTree` over `Tree` and `BlobTree`. Invariants:
//! - every call of the async API that reaches the store is a method of [`Backend`], with one
//!   signature for both backends: `embedded.rs` implements it for the embedded `Store` (on
//!   tokio's blocking pool where a call may sync), `postgres.rs` for the PostgreSQL backend; a
//!   method one backend lacks does not compile;
//! - [`AnyBackend`] holds one of them, and [`dispatch!`] calls the method of the one it holds
//!   through the trait (never an inherent method of the same name, such as the embedded
//!   `Store`'s synchronous ones); `async_store.rs` and its files name no backend's internals;
//! - what a call means, and its argument checks, are the shared floor's: a method here only
//!   carries the call to its backend.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::OnRelease;
use crate::causal::{Siblings, VersionVector};
use crate::clock::Millis;
use crate::commit::{CommitConflict, Committed, Plan};
use crate::config::Common;
use crate::embedded::Store;
use crate::entities::{Conflict, Expect, UpdateOptions, Version, Versioned};
use crate::error::Result;
use crate::format::Namespace;
use crate::offsets::OffsetWindow;
use crate::record::Response;
use crate::record::{Checkpoint, Claim, ClaimOptions, FailKind, Lease, LeaseResult, RecordInfo};
use crate::telemetry::counters::Counters;
use crate::unique::{Released, Reservation};

/// The store behind an [`AsyncStore`](super::AsyncStore): one backend or the other.
#[derive(Clone)]
pub(crate) enum AnyBackend {
    Embedded(Store),
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::Postgres),
}

/// Calls `method` on the backend `any` holds, through [`Backend`]; `.await` after the call
/// awaits it in each arm (the two backends' futures are different types).
macro_rules! dispatch {
    ($any:expr, $method:ident($($arg:expr),* $(,)?).await) => {
        match $any {
            $crate::async_store::backend::AnyBackend::Embedded(b) => {
                $crate::async_store::backend::Backend::$method(b, $($arg),*).await
            }
            #[cfg(feature = "postgres")]
            $crate::async_store::backend::AnyBackend::Postgres(b) => {
                $crate::async_store::backend::Backend::$method(b, $($arg),*).await
            }
        }
    };
    ($any:expr, $method:ident($($arg:expr),* $(,)?)) => {
        match $any {
            $crate::async_store::backend::AnyBackend::Embedded(b) => {
                $crate::async_store::backend::Backend::$method(b, $($arg),*)
            }
            #[cfg(feature = "postgres")]
            $crate::async_store::backend::AnyBackend::Postgres(b) => {
                $crate::async_store::backend::Backend::$method(b, $($arg),*)
            }
        }
    };
}
pub(crate) use dispatch;

/// How a wait for a lease's end ended ([`Backend::wait_for_end`]).
pub(crate) enum Waited {
    /// The lease may have ended (its holder ended it, or it ran out): claim again.
    Ended,
    /// The waiter's bound passed first.
    Bound,
    /// There was no live lease to wait for (it ended after the claim read it): claim again,
    /// after a breath. (PostgreSQL's wait reads the row; the embedded one never answers it.)
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    NoLease,
}

/// What each backend answers. Keys, tenants and values are borrowed; a method's meaning is the
/// embedded `Store` method's of the same name.
pub(crate) trait Backend: Clone + Send + Sync + 'static {
    /// What a claim that will wait for a lease's end takes before it claims, so that an end
    /// between the claim and the wait is not missed.
    type Ticket: Send;

    /// `"embedded"` or `"postgres"`.
    fn name(&self) -> &'static str;

    /// The settings both backends read.
    fn common(&self) -> &Common;

    /// The embedded store itself, with its whole synchronous API; `None` on PostgreSQL.
    fn embedded(&self) -> Option<&Store>;

    /// The store's current time.
    fn now(&self) -> impl Future<Output = Result<Millis>> + Send;

    /// This process's outcome counters.
    fn counters(&self) -> Result<Counters>;

    /// A ticket for the next lease end, taken before a claim that may wait.
    fn ticket(&self) -> Self::Ticket;

    /// One claim, with no wait. A lease acquired for a caller that went away before the answer
    /// is released, and `on_release` hears of it.
    fn claim(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        opts: ClaimOptions,
        on_release: &OnRelease,
    ) -> impl Future<Output = Result<Claim>> + Send;

    /// Waits, at most until `deadline`, for the key's lease (which the claim found held until
    /// about `lease_end`) to end.
    fn wait_for_end(
        &self,
        ticket: Self::Ticket,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        deadline: Instant,
        lease_end: Instant,
    ) -> impl Future<Output = Result<Waited>> + Send;

    fn complete(
        &self,
        lease: &Lease,
        response: Response,
    ) -> impl Future<Output = Result<LeaseResult>> + Send;

    fn fail(
        &self,
        lease: &Lease,
        kind: FailKind,
    ) -> impl Future<Output = Result<LeaseResult>> + Send;

    /// The lease's new end.
    fn renew(
        &self,
        lease: &Lease,
        extra: Duration,
    ) -> impl Future<Output = Result<LeaseResult<Millis>>> + Send;

    fn checkpoint(
        &self,
        lease: &Lease,
        checkpoint: Checkpoint,
    ) -> impl Future<Output = Result<LeaseResult>> + Send;

    fn get(
        &self,
        tenant: &[u8],
        key: &[u8],
    ) -> impl Future<Output = Result<Option<RecordInfo>>> + Send;

    /// Deletes a request record (`Namespace::Requests`) or a consumer message's.
    fn forget(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
    ) -> impl Future<Output = Result<bool>> + Send;

    fn sweep(&self, limit: usize) -> impl Future<Output = Result<usize>> + Send;

    fn get_entity(
        &self,
        tenant: &[u8],
        id: &[u8],
    ) -> impl Future<Output = Result<Option<Versioned>>> + Send;

    /// The conditional write of both entity calls: `value` `None` writes a tombstone.
    fn write_entity(
        &self,
        tenant: &[u8],
        id: &[u8],
        expect: Expect,
        value: Option<Vec<u8>>,
    ) -> impl Future<Output = Result<std::result::Result<Option<Version>, Conflict>>> + Send;

    fn update_entity<F>(
        &self,
        tenant: Vec<u8>,
        id: Vec<u8>,
        opts: UpdateOptions,
        f: F,
    ) -> impl Future<Output = Result<Option<Versioned>>> + Send
    where
        F: FnMut(Option<&[u8]>) -> Option<Vec<u8>> + Send + 'static;

    fn causal_get(&self, tenant: &[u8], id: &[u8])
        -> impl Future<Output = Result<Siblings>> + Send;

    fn causal_put(
        &self,
        tenant: &[u8],
        id: &[u8],
        actor: &str,
        context: &VersionVector,
        value: Vec<u8>,
    ) -> impl Future<Output = Result<Siblings>> + Send;

    fn causal_delete(
        &self,
        tenant: &[u8],
        id: &[u8],
        context: &VersionVector,
    ) -> impl Future<Output = Result<Siblings>> + Send;

    fn merge_replica_vector(
        &self,
        tenant: &[u8],
        id: &[u8],
        vv: &VersionVector,
    ) -> impl Future<Output = Result<()>> + Send;

    fn replica_vector(
        &self,
        tenant: &[u8],
        id: &[u8],
    ) -> impl Future<Output = Result<VersionVector>> + Send;

    fn reserve(
        &self,
        index: &[u8],
        value: &[&[u8]],
        owner: &[u8],
    ) -> impl Future<Output = Result<Reservation>> + Send;

    fn reserve_for(
        &self,
        lease: &Lease,
        index: &[u8],
        value: &[&[u8]],
    ) -> impl Future<Output = Result<LeaseResult<Reservation>>> + Send;

    fn forget_reservation(
        &self,
        index: &[u8],
        value: &[&[u8]],
    ) -> impl Future<Output = Result<bool>> + Send;

    fn release_reservation(
        &self,
        index: &[u8],
        value: &[&[u8]],
        owner: &[u8],
    ) -> impl Future<Output = Result<Released>> + Send;

    fn reservation_owner(
        &self,
        index: &[u8],
        value: &[&[u8]],
    ) -> impl Future<Output = Result<Option<Vec<u8>>>> + Send;

    fn mark_processed(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
        offset: u64,
    ) -> impl Future<Output = Result<()>> + Send;

    fn commit_watermark(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
        watermark: u64,
    ) -> impl Future<Output = Result<()>> + Send;

    fn offset_window(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
    ) -> impl Future<Output = Result<OffsetWindow>> + Send;

    /// Applies a commit's plan: every condition checked and every write made, or nothing.
    fn apply(
        &self,
        plan: Plan,
    ) -> impl Future<Output = Result<std::result::Result<Committed, CommitConflict>>> + Send;

    /// An application SQL transaction (PostgreSQL; the embedded store refuses it).
    #[cfg(feature = "postgres")]
    fn transaction(&self) -> impl Future<Output = Result<crate::postgres::SqlTransaction>> + Send;

    /// Applies a commit's plan inside the application's transaction `tx` (PostgreSQL).
    #[cfg(feature = "postgres")]
    fn apply_in(
        &self,
        tx: crate::postgres::SqlTransaction,
        plan: Plan,
    ) -> impl Future<Output = Result<std::result::Result<Committed, CommitConflict>>> + Send;

    /// What the store holds, counted by the database (PostgreSQL).
    #[cfg(feature = "postgres")]
    fn postgres_stats(&self)
        -> impl Future<Output = Result<crate::postgres::PostgresStats>> + Send;

    /// What the local replay tier holds (PostgreSQL with a tier).
    #[cfg(feature = "postgres")]
    fn replay_tier_stats(&self) -> Option<crate::ReplayTierStats>;

    /// A claim that may wait ([`ClaimOptions::wait`]): the claims after each end of the lease it
    /// found held, until one gets another answer or the bound passes; the same on either
    /// backend.
    fn claim_waiting(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        opts: ClaimOptions,
        on_release: &OnRelease,
    ) -> impl Future<Output = Result<Claim>> + Send {
        async move {
            let deadline = Instant::now() + opts.wait.unwrap_or_default();
            loop {
                // Taken before the claim reads the key, so that an end between the two is not
                // missed.
                let ticket = self.ticket();
                let claim = self
                    .claim(ns, tenant, key, fingerprint, opts, on_release)
                    .await?;
                let Claim::InProgress { retry_after } = claim else {
                    return Ok(claim);
                };
                let now = Instant::now();
                if now >= deadline {
                    return Ok(claim);
                }
                // At the bound the answer is this claim's, its lease's time counted down: a claim
                // is asked again only when the lease ended (its holder's call, or it ran out: a
                // crashed holder never ends it).
                match self
                    .wait_for_end(ticket, ns, tenant, key, deadline, now + retry_after)
                    .await?
                {
                    Waited::Ended => {}
                    Waited::Bound => {
                        return Ok(Claim::InProgress {
                            retry_after: retry_after.saturating_sub(now.elapsed()),
                        })
                    }
                    // Claim again after a breath, so that a key that keeps changing hands cannot
                    // make a loop of statements.
                    Waited::NoLease => {
                        tokio::time::sleep(Duration::from_millis(1).min(deadline - now)).await;
                    }
                }
            }
        }
    }
}
