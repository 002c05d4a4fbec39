//! The async store: one API over both backends (the embedded store on disk, or PostgreSQL for a
//! fleet). Invariants: every method means the same on both backends (same outcomes, same
//! argument checks, from the same code); a method that reaches the store is a `match` on the
//! private `Backend` (`Backend::Embedded`, the embedded `Store`; `Backend::Postgres`, the
//! PostgreSQL backend) that calls that backend's method of the same meaning, and no public
//! signature names the PostgreSQL backend's type (the embedded `Store` is public:
//! [`AsyncStore::embedded`] hands it out); no call blocks a tokio worker thread on the network or
//! on a disk sync (the embedded store's synced writes run on the blocking pool; PostgreSQL calls
//! are async). A claim acquired for a caller that went away before the answer arrived is
//! released, not left pending until its lease runs out.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;

mod causal;
mod commit;
mod consumers;
pub use commit::AsyncCommit;
mod entities;
mod offsets;
mod unique;

use crate::clock::Millis;
use crate::config::{Config, Durability};
use crate::embedded::Store;
use crate::error::{Error, Result};
use crate::format::Namespace;
#[cfg(feature = "postgres")]
use crate::record::Checkpoint;
use crate::record::{Claim, ClaimOptions, FailKind, Lease, RecordInfo, Response};
use crate::telemetry::spans::{Op, OpKind, Stamp};

/// A store behind the async API, on disk or on PostgreSQL ([`Config::open_async`]). Cheap to
/// clone; clones share the store. Application code written against it runs on either backend
/// unchanged; [`AsyncStore::embedded`] reaches the embedded store's full synchronous API.
#[derive(Clone)]
pub struct AsyncStore {
    backend: Backend,
    cfg: Arc<Config>,
}

#[derive(Clone)]
enum Backend {
    Embedded(Store),
    #[cfg(feature = "postgres")]
    Postgres(Arc<crate::postgres::Postgres>),
}

impl From<Store> for AsyncStore {
    fn from(store: Store) -> Self {
        AsyncStore {
            cfg: Arc::new(store.config().clone()),
            backend: Backend::Embedded(store),
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

impl Config {
    /// Opens the store behind the async API ([`crate::AsyncStore`]): on disk (the same store as
    /// [`Config::open`], whose synced writes then run on tokio's blocking pool) or, for
    /// [`Config::postgres`], in the database. Needs a tokio runtime.
    #[cfg(feature = "async")]
    pub async fn open_async(self) -> Result<crate::AsyncStore> {
        crate::AsyncStore::open(self).await
    }
}

use crate::record::LeaseResult;

impl AsyncStore {
    pub(crate) async fn open(cfg: Config) -> Result<AsyncStore> {
        #[cfg(feature = "postgres")]
        if let Some(settings) = cfg.postgres.clone() {
            let cfg = Arc::new(cfg);
            let pg = crate::postgres::Postgres::open(cfg.clone(), &settings).await?;
            return Ok(AsyncStore {
                backend: Backend::Postgres(Arc::new(pg)),
                cfg,
            });
        }
        let store = match cfg.durability {
            Durability::Buffered => Store::open(cfg)?,
            _ => match tokio::task::spawn_blocking(move || Store::open(cfg)).await {
                Ok(r) => r?,
                Err(e) => return Err(Error::internal("opening the store", e)),
            },
        };
        Ok(store.into())
    }

    /// Which backend holds the store: `"embedded"` or `"postgres"`.
    pub fn backend_name(&self) -> &'static str {
        match &self.backend {
            Backend::Embedded(_) => "embedded",
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => "postgres",
        }
    }

    /// The embedded store, with its whole synchronous API; `None` on PostgreSQL.
    pub fn embedded(&self) -> Option<&Store> {
        match &self.backend {
            Backend::Embedded(s) => Some(s),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => None,
        }
    }

    /// PostgreSQL only: what the local replay tier ([`Config::replay_tier`]) holds and how often
    /// it answered; `None` without a tier.
    #[cfg(feature = "postgres")]
    pub fn replay_tier_stats(&self) -> Option<crate::ReplayTierStats> {
        match &self.backend {
            Backend::Postgres(pg) => pg.tier_stats(),
            Backend::Embedded(_) => None,
        }
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The store's current time: the embedded store's ([`Store::now`]) or the database
    /// server's, in milliseconds since the epoch.
    pub async fn now(&self) -> Result<Millis> {
        match &self.backend {
            Backend::Embedded(s) => Ok(s.now()),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.now().await,
        }
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
        let Some(wait) = opts.wait.filter(|w| !w.is_zero()) else {
            return self
                .claim_once(ns, tenant, key, fingerprint, opts, on_release)
                .await;
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Embedded: the ticket is taken before the claim reads the key, so an end between
            // the two is not missed. PostgreSQL: the wait registers before it marks the row.
            let ticket = match &self.backend {
                Backend::Embedded(s) => Some(s.lease_end_ticket()),
                #[cfg(feature = "postgres")]
                Backend::Postgres(_) => None,
            };
            let claim = self
                .claim_once(ns, tenant, key, fingerprint, opts, on_release)
                .await?;
            let Claim::InProgress { retry_after } = claim else {
                return Ok(claim);
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(claim);
            }
            // At the bound the answer is this claim's, its lease's time counted down: a claim
            // is asked again only when the lease ended (its holder's call, or it ran out: a
            // crashed holder never ends it).
            let at_bound = || {
                Ok(Claim::InProgress {
                    retry_after: retry_after.saturating_sub(now.elapsed()),
                })
            };
            match (&self.backend, ticket) {
                (Backend::Embedded(_), Some(t)) => {
                    let lease_end = now + retry_after;
                    if !t.wait(deadline.min(lease_end)).await && deadline < lease_end {
                        return at_bound();
                    }
                }
                #[cfg(feature = "postgres")]
                (Backend::Postgres(pg), _) => {
                    match pg.sql.wait_for_end(ns, tenant, key, deadline).await? {
                        crate::postgres::Waited::Ended => {}
                        crate::postgres::Waited::Bound => return at_bound(),
                        // The lease ended between the claim and the mark: claim again, after a
                        // breath, so that a key that keeps changing hands cannot make a loop
                        // of statements.
                        crate::postgres::Waited::NoLease => {
                            tokio::time::sleep(Duration::from_millis(1).min(deadline - now)).await;
                        }
                    }
                }
                (Backend::Embedded(_), None) => return at_bound(),
            }
        }
    }

    /// One claim, with no wait.
    async fn claim_once(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        opts: ClaimOptions,
        on_release: &OnRelease,
    ) -> Result<Claim> {
        // Both backends check the arguments with the same code (`requests::check_claim`): the
        // embedded store inside its claim, PostgreSQL here.
        match &self.backend {
            Backend::Embedded(s) if s.config().durability == Durability::Buffered => {
                s.claim_in(ns, tenant, key, fingerprint, opts)
            }
            Backend::Embedded(s) => {
                // A replay or mismatch needs no write, so it is read inline (no sync); only a
                // claim that may write (and sync) goes to the blocking pool (where the claim has
                // its own span).
                let asked = Stamp::now();
                if let Ok(Some(answer)) = s.peek_final(ns, tenant, key, fingerprint) {
                    Op::start(OpKind::of_claim(ns), &self.cfg, tenant, key)
                        .since(asked)
                        .end(answer.outcome());
                    return Ok(answer);
                }
                let (t, k, f) = (tenant.to_vec(), key.to_vec(), fingerprint.to_vec());
                PooledClaim::spawn(s.clone(), on_release.clone(), move |s| {
                    s.claim_in(ns, &t, &k, &f, opts)
                })
                .await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => {
                let checked = match pg.claim_here(ns, tenant, key, fingerprint, opts) {
                    crate::postgres::ClaimAsk::Answered(answer) => return answer,
                    crate::postgres::ClaimAsk::Database(checked) => checked,
                };
                // A read first (a run of retries) runs here: it acquires nothing.
                let checked = match pg.read_first(ns, tenant, key, fingerprint, checked).await {
                    crate::postgres::ReadFirst::Answered(answer) => return answer,
                    crate::postgres::ReadFirst::Pending(pending) => pending,
                };
                // Run to its end even if this caller goes away, then release what it acquired.
                let (pg, t, k, f) = (
                    pg.clone(),
                    tenant.to_vec(),
                    key.to_vec(),
                    fingerprint.to_vec(),
                );
                let (store, on_release) = (self.clone(), on_release.clone());
                Detached::new(async move { pg.claim_in_database(ns, &t, &k, &f, checked).await })
                    .then_if_dropped(move |claim| async move {
                        if let Ok(Claim::Acquired(lease)) = claim {
                            store.release_abandoned(lease, on_release).await;
                        }
                    })
                    .await
            }
        }
    }

    /// Releases a lease acquired for a caller that went away, and reports the outcome.
    #[cfg(feature = "postgres")]
    async fn release_abandoned(&self, lease: Lease, on_release: OnRelease) {
        on_release(self.fail(&lease, FailKind::Retryable).await);
    }

    /// Stores `response` as the result of the leased operation, as [`Store::complete`].
    pub async fn complete(&self, lease: &Lease, response: Response) -> Result<LeaseResult> {
        match &self.backend {
            Backend::Embedded(s) => {
                let lease = lease.clone();
                blocking(s, move |s| s.complete(&lease, response)).await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.complete(lease, response).await,
        }
    }

    /// Ends the leased operation as failed, as [`Store::fail`].
    pub async fn fail(&self, lease: &Lease, kind: FailKind) -> Result<LeaseResult> {
        match &self.backend {
            Backend::Embedded(s) => {
                let lease = lease.clone();
                blocking(s, move |s| s.fail(&lease, kind)).await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.fail(lease, kind).await,
        }
    }

    /// Extends the lease to `extra` from now, as [`Store::renew`]; updates `lease` in place.
    pub async fn renew(&self, lease: &mut Lease, extra: Duration) -> Result<LeaseResult> {
        let until = match &self.backend {
            Backend::Embedded(s) => {
                let mut l = lease.clone();
                match blocking(s, move |s| Ok(s.renew(&mut l, extra)?.map(|()| l.until))).await? {
                    Ok(until) => until,
                    Err(lost) => return Ok(Err(lost)),
                }
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => match pg.renew(lease, extra).await? {
                Ok(until) => until,
                Err(lost) => return Ok(Err(lost)),
            },
        };
        lease.until = until;
        Ok(Ok(()))
    }

    /// Stores a recovery point for whoever acquires the key next, as [`Store::checkpoint`].
    pub async fn checkpoint(
        &self,
        lease: &Lease,
        phase: impl Into<String>,
        state: impl Into<Vec<u8>>,
    ) -> Result<LeaseResult> {
        let (phase, state) = (phase.into(), state.into());
        match &self.backend {
            Backend::Embedded(s) => {
                let lease = lease.clone();
                blocking(s, move |s| s.checkpoint(&lease, phase, state)).await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.checkpoint(lease, Checkpoint { phase, state }).await,
        }
    }

    /// An operator's view of a record, or `None` if absent or expired, as [`Store::get`].
    pub async fn get(
        &self,
        tenant: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<RecordInfo>> {
        let (tenant, key) = (tenant.as_ref(), key.as_ref());
        match &self.backend {
            Backend::Embedded(s) => s.get(tenant, key),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.get(tenant, key).await,
        }
    }

    /// Deletes a record whatever its state, as [`Store::forget`]; whether one was stored.
    pub async fn forget(&self, tenant: impl AsRef<[u8]>, key: impl AsRef<[u8]>) -> Result<bool> {
        let (tenant, key) = (tenant.as_ref(), key.as_ref());
        match &self.backend {
            Backend::Embedded(s) => {
                let (t, k) = (tenant.to_vec(), key.to_vec());
                blocking(s, move |s| s.forget(t, k)).await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.forget(Namespace::Requests, tenant, key).await,
        }
    }

    /// What a store on PostgreSQL holds, counted by the database in one read-only statement
    /// (`idemdb stats --postgres URL` prints it). The embedded store's counters are
    /// [`Store::stats`], through [`AsyncStore::embedded`]; here it is refused with
    /// `InvalidInput::Config`.
    #[cfg(feature = "postgres")]
    pub async fn postgres_stats(&self) -> Result<crate::postgres::PostgresStats> {
        match &self.backend {
            Backend::Postgres(pg) => pg.stats().await,
            Backend::Embedded(_) => Err(Error::Unsupported {
                operation: "postgres_stats",
                hint: "it counts a store on PostgreSQL; the embedded store's counters are \
                       Store::stats (AsyncStore::embedded)",
            }),
        }
    }

    /// Deletes up to `limit` expired records; how many. Embedded: as [`Store::sweep`].
    /// PostgreSQL: oldest expiry first, in one statement that skips rows other transactions
    /// hold (no long locks); then, up to `limit` each, reservations whose lease ended and the
    /// version-0 rows commits' checks of absent entities left (both read as absent already);
    /// call it in a loop for bigger batches.
    pub async fn sweep(&self, limit: usize) -> Result<usize> {
        match &self.backend {
            Backend::Embedded(s) => blocking(s, move |s| s.sweep(limit)).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.sweep(limit).await,
        }
    }

    /// This process's outcome counters since the store was opened: the embedded store's own
    /// ([`Store::stats`]), or, on PostgreSQL, those of the calls made through this handle and
    /// its clones (other instances count their own; the database's totals are
    /// [`AsyncStore::postgres_stats`]).
    pub fn counters(&self) -> Result<crate::telemetry::counters::Counters> {
        match &self.backend {
            Backend::Embedded(s) => Ok(s.stats()?.counters),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => Ok(pg.counters()),
        }
    }
}

/// Runs `f` inline on a store that never syncs (microseconds), and on tokio's blocking pool when
/// it does, so that a disk sync never stalls a runtime worker (the HTTP layer's calls too).
pub(crate) async fn blocking<T, F>(store: &Store, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&Store) -> Result<T> + Send + 'static,
{
    if store.config().durability == Durability::Buffered {
        return f(store);
    }
    let s = store.clone();
    match tokio::task::spawn_blocking(move || f(&s)).await {
        Ok(r) => r,
        Err(e) => Err(Error::internal("a store call on the blocking pool", e)),
    }
}

/// Called with the outcome of each release of an abandoned lease.
pub(crate) type OnRelease = Arc<dyn Fn(Result<LeaseResult>) + Send + Sync>;

/// The report of a release nobody asked to hear about.
static NO_RELEASE_REPORT: std::sync::LazyLock<OnRelease> =
    std::sync::LazyLock::new(|| Arc::new(drop));

/// A claim running on the blocking pool (an embedded store that syncs). Exactly one side
/// releases a lease nobody will use: the pool thread, if this future was dropped before the
/// answer was sent (the send fails), or this future's drop, if the answer was sent but not taken
/// (the receiver is closed first, so the two cannot both see the lease).
struct PooledClaim {
    rx: Option<oneshot::Receiver<Result<Claim>>>,
    store: Store,
    on_release: OnRelease,
}

impl PooledClaim {
    fn spawn(
        store: Store,
        on_release: OnRelease,
        f: impl FnOnce(&Store) -> Result<Claim> + Send + 'static,
    ) -> Self {
        let s = store.clone();
        let (tx, rx) = oneshot::channel();
        let release = on_release.clone();
        // The pool runs the closure even if nobody waits for its handle any more.
        drop(tokio::task::spawn_blocking(move || {
            if let Err(Ok(Claim::Acquired(lease))) = tx.send(f(&s)) {
                release(s.fail(&lease, FailKind::Retryable));
            }
        }));
        PooledClaim {
            rx: Some(rx),
            store,
            on_release,
        }
    }
}

impl Future for PooledClaim {
    type Output = Result<Claim>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Claim>> {
        let this = self.get_mut();
        let Some(rx) = this.rx.as_mut() else {
            return Poll::Pending; // polled after completion: never ready again
        };
        match Pin::new(rx).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(answer) => {
                this.rx = None;
                Poll::Ready(
                    answer.unwrap_or_else(|e| {
                        Err(Error::internal("a claim on the blocking pool", e))
                    }),
                )
            }
        }
    }
}

impl Drop for PooledClaim {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        rx.close();
        if let Ok(Ok(Claim::Acquired(lease))) = rx.try_recv() {
            let store = self.store.clone();
            let on_release = self.on_release.clone();
            let release = move || on_release(store.fail(&lease, FailKind::Retryable));
            match tokio::runtime::Handle::try_current() {
                // The release may sync: on the pool, not on the worker dropping this future.
                Ok(rt) => drop(rt.spawn_blocking(release)),
                // Outside a runtime no worker can be stalled: release here.
                Err(_) => release(),
            }
        }
    }
}

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
