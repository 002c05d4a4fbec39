//! The async store: one API over both backends (the embedded store on disk, or PostgreSQL for a
//! fleet). Invariants: every method means the same on both backends (same outcomes, same
//! argument checks, from the same code); a method that reaches the store calls the method of
//! the same name of the one internal trait both backends implement (`backend.rs`: the trait,
//! `embedded.rs` and `postgres.rs`: its two implementations), so no method here names a
//! backend's internals, and no public signature names the PostgreSQL backend's type (the
//! embedded `Store` is public: [`AsyncStore::embedded`] hands it out); no call blocks a tokio
//! worker thread on the network or on a disk sync (the embedded store's synced writes run on
//! the blocking pool; PostgreSQL calls are async). A claim acquired for a caller that went away
//! before the answer arrived is released, not left pending until its lease runs out.

use std::sync::Arc;
use std::time::Duration;
#[cfg(any(feature = "postgres", feature = "http"))]
use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

mod backend;
mod causal;
mod commit;
mod consumers;
mod embedded;
pub use commit::AsyncCommit;
mod entities;
mod offsets;
#[cfg(feature = "postgres")]
mod postgres;
mod unique;

use backend::{dispatch, AnyBackend};

use crate::clock::Millis;
use crate::config::{Common, Config, Durability, OnDisk};
use crate::embedded::Store;
use crate::error::{Error, Result};
use crate::format::Namespace;
use crate::record::{
    Checkpoint, Claim, ClaimOptions, FailKind, Lease, LeaseResult, RecordInfo, Response,
};

/// A store behind the async API, on disk or on PostgreSQL (`Config::open_async`). Cheap to
/// clone; clones share the store. Application code written against it runs on either backend
/// unchanged; [`AsyncStore::embedded`] reaches the embedded store's full synchronous API.
#[derive(Clone)]
pub struct AsyncStore {
    backend: AnyBackend,
}

impl From<Store> for AsyncStore {
    fn from(store: Store) -> Self {
        AsyncStore {
            backend: AnyBackend::Embedded(store),
        }
    }
}

impl std::fmt::Debug for AsyncStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncStore")
            .field("backend", &self.backend_name())
            .finish_non_exhaustive()
    }
}

impl Config<OnDisk> {
    /// Opens the embedded store behind the async API ([`crate::AsyncStore`]): the same store as
    /// [`Config::open`], whose synced writes then run on tokio's blocking pool. Needs a tokio
    /// runtime.
    pub async fn open_async(self) -> Result<crate::AsyncStore> {
        let store = match self.backend.durability {
            Durability::Buffered => Store::open(self)?,
            _ => match tokio::task::spawn_blocking(move || Store::open(self)).await {
                Ok(r) => r?,
                Err(e) => return Err(Error::internal("opening the store", e)),
            },
        };
        Ok(store.into())
    }
}

#[cfg(feature = "postgres")]
impl Config<crate::config::OnPostgres> {
    /// Opens the fleet's store in PostgreSQL behind the async API ([`crate::AsyncStore`]),
    /// applying the schema migrations this build needs unless told not to
    /// ([`Config::migrate_on_open`]), and starts its sweeper. Needs a tokio runtime.
    pub async fn open_async(self) -> Result<crate::AsyncStore> {
        let pg = crate::postgres::Postgres::open(self).await?;
        Ok(AsyncStore {
            backend: AnyBackend::Postgres(pg),
        })
    }
}

impl AsyncStore {
    /// Which backend holds the store: `"embedded"` or `"postgres"`.
    pub fn backend_name(&self) -> &'static str {
        dispatch!(&self.backend, name())
    }

    /// The embedded store, with its whole synchronous API; `None` on PostgreSQL.
    pub fn embedded(&self) -> Option<&Store> {
        dispatch!(&self.backend, embedded())
    }

    /// PostgreSQL only: what the local replay tier (`Config::replay_tier`) holds and how often
    /// it answered; `None` without a tier, and on the embedded store.
    #[cfg(feature = "postgres")]
    pub fn replay_tier_stats(&self) -> Option<crate::ReplayTierStats> {
        dispatch!(&self.backend, replay_tier_stats())
    }

    /// The settings both backends read, as the store was opened with them.
    pub(crate) fn common(&self) -> &Common {
        dispatch!(&self.backend, common())
    }

    /// The store's current time: the embedded store's ([`Store::now`]) or the database
    /// server's, in milliseconds since the epoch.
    pub async fn now(&self) -> Result<Millis> {
        dispatch!(&self.backend, now().await)
    }

    /// Claims `key` of `tenant` for a request with this `fingerprint`, as [`Store::claim`]:
    /// exactly one of any number of concurrent claimers (in any instance sharing the store)
    /// acquires. If this future is dropped before it finishes (its caller went away), a lease it
    /// acquires is released, not left pending until it runs out: the claim runs to its end on
    /// its own (on the blocking pool, or as a task of the current runtime) and releases it.
    pub async fn claim(
        &self,
        tenant: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
        fingerprint: impl AsRef<[u8]>,
        opts: impl std::borrow::Borrow<ClaimOptions>,
    ) -> Result<Claim> {
        let (t, k, f) = (tenant.as_ref(), key.as_ref(), fingerprint.as_ref());
        self.claim_with(
            Namespace::Requests,
            t,
            k,
            f,
            *opts.borrow(),
            &NO_RELEASE_REPORT,
        )
        .await
    }

    /// [`AsyncStore::claim`], calling `on_release` with the outcome of each release of a lease
    /// acquired for a caller that went away (the HTTP layer counts them). With
    /// [`ClaimOptions::wait`], a claim that finds the lease held waits for its end and claims
    /// again, until it gets another answer or the bound passes.
    pub(crate) async fn claim_with(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        opts: ClaimOptions,
        on_release: &OnRelease,
    ) -> Result<Claim> {
        // Without a wait, the claim itself. A claim that may wait is boxed: its loop and the
        // wait's state (on PostgreSQL, statements) would otherwise be carried, and moved, by
        // every claim's future, the sub-microsecond answers too (a replay from the tier or the
        // embedded store; docs/benchmarks.md, "The house, third step").
        if opts.wait.is_none_or(|w| w.is_zero()) {
            return dispatch!(
                &self.backend,
                claim(ns, tenant, key, fingerprint, opts, on_release).await
            );
        }
        Box::pin(async move {
            dispatch!(
                &self.backend,
                claim_waiting(ns, tenant, key, fingerprint, opts, on_release).await
            )
        })
        .await
    }

    /// Stores `response` as the result of the leased operation, as [`Store::complete`].
    pub async fn complete(&self, lease: &Lease, response: Response) -> Result<LeaseResult> {
        dispatch!(&self.backend, complete(lease, response).await)
    }

    /// Ends the leased operation as failed, as [`Store::fail`].
    pub async fn fail(&self, lease: &Lease, kind: FailKind) -> Result<LeaseResult> {
        dispatch!(&self.backend, fail(lease, kind).await)
    }

    /// Extends the lease to `extra` from now, as [`Store::renew`]; updates `lease` in place.
    pub async fn renew(&self, lease: &mut Lease, extra: Duration) -> Result<LeaseResult> {
        let renewed = dispatch!(&self.backend, renew(lease, extra).await)?;
        Ok(renewed.map(|until| lease.until = until))
    }

    /// Stores a recovery point for whoever acquires the key next, as [`Store::checkpoint`].
    pub async fn checkpoint(
        &self,
        lease: &Lease,
        phase: impl Into<String>,
        state: impl Into<Vec<u8>>,
    ) -> Result<LeaseResult> {
        let cp = Checkpoint {
            phase: phase.into(),
            state: state.into(),
        };
        dispatch!(&self.backend, checkpoint(lease, cp).await)
    }

    /// An operator's view of a record, or `None` if absent or expired, as [`Store::get`].
    pub async fn get(
        &self,
        tenant: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<RecordInfo>> {
        dispatch!(&self.backend, get(tenant.as_ref(), key.as_ref()).await)
    }

    /// Deletes a record whatever its state, as [`Store::forget`]; whether one was stored.
    pub async fn forget(&self, tenant: impl AsRef<[u8]>, key: impl AsRef<[u8]>) -> Result<bool> {
        let (tenant, key) = (tenant.as_ref(), key.as_ref());
        dispatch!(
            &self.backend,
            forget(Namespace::Requests, tenant, key).await
        )
    }

    /// What a store on PostgreSQL holds, counted by the database in one read-only statement
    /// (`idemdb stats --postgres URL` prints it). The embedded store's counters are
    /// [`Store::stats`], through [`AsyncStore::embedded`]; here it is refused with
    /// [`Error::Unsupported`].
    #[cfg(feature = "postgres")]
    pub async fn postgres_stats(&self) -> Result<crate::postgres::PostgresStats> {
        dispatch!(&self.backend, postgres_stats().await)
    }

    /// Deletes up to `limit` expired records; how many. Embedded: as [`Store::sweep`].
    /// PostgreSQL: once round the table from the sweep's shared cursor, a range of pages per
    /// statement (no index orders the rows by expiry), skipping rows other transactions hold (no
    /// long locks); fewer than `limit` means that the walk left no expired row it could delete.
    /// Then, up to `limit` each, reservations whose lease ended and the version-0 rows commits'
    /// checks of absent entities left (both read as absent already); call it in a loop for
    /// bigger batches.
    pub async fn sweep(&self, limit: usize) -> Result<usize> {
        dispatch!(&self.backend, sweep(limit).await)
    }

    /// This process's outcome counters since the store was opened: the embedded store's own
    /// ([`Store::stats`]), or, on PostgreSQL, those of the calls made through this handle and
    /// its clones (other instances count their own; the database's totals are
    /// [`AsyncStore::postgres_stats`]).
    pub fn counters(&self) -> Result<crate::telemetry::counters::Counters> {
        dispatch!(&self.backend, counters())
    }
}

/// Called with the outcome of each release of an abandoned lease.
pub(crate) type OnRelease = Arc<dyn Fn(Result<LeaseResult>) + Send + Sync>;

/// The report of a release nobody asked to hear about.
static NO_RELEASE_REPORT: std::sync::LazyLock<OnRelease> =
    std::sync::LazyLock::new(|| Arc::new(drop));

/// A future that is finished even if its owner drops it: polled in place while its owner waits
/// (no task, no channel on the common path); dropped unfinished, the rest runs as a task of the
/// current runtime, followed by `then` with its output if one was given. Outside a runtime the
/// rest cannot run. Used for a claim on PostgreSQL whose statement may already be on its way
/// (`then` releases what it acquired) and by the HTTP layer for a request whose lease is held.
#[cfg(any(feature = "postgres", feature = "http"))]
pub(crate) struct Detached<T: Send + 'static> {
    fut: Option<Pin<Box<dyn Future<Output = T> + Send>>>,
    then: Option<AfterDrop<T>>,
}

#[cfg(any(feature = "postgres", feature = "http"))]
type AfterDrop<T> = Box<dyn FnOnce(T) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

#[cfg(any(feature = "postgres", feature = "http"))]
impl<T: Send + 'static> Detached<T> {
    pub(crate) fn new(fut: impl Future<Output = T> + Send + 'static) -> Self {
        Detached {
            fut: Some(Box::pin(fut)),
            then: None,
        }
    }

    /// As [`Detached::new`], running `then` with the output when the owner dropped it first.
    #[cfg(feature = "postgres")]
    fn then_if_dropped<F>(mut self, then: impl FnOnce(T) -> F + Send + 'static) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.then = Some(Box::new(move |out| Box::pin(then(out))));
        self
    }
}

#[cfg(any(feature = "postgres", feature = "http"))]
impl<T: Send + 'static> Future for Detached<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        let Some(fut) = this.fut.as_mut() else {
            return Poll::Pending; // polled after completion: never ready again
        };
        let out = fut.as_mut().poll(cx);
        if out.is_ready() {
            this.fut = None;
        }
        out
    }
}

#[cfg(any(feature = "postgres", feature = "http"))]
impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        if let (Some(fut), Ok(rt)) = (self.fut.take(), tokio::runtime::Handle::try_current()) {
            let then = self.then.take();
            rt.spawn(async move {
                let out = fut.await;
                if let Some(then) = then {
                    then(out).await;
                }
            });
        }
    }
}
