//! The async store: one API over both backends (the embedded store on disk, or PostgreSQL for a
//! fleet). Invariants: every method means the same on both backends (same outcomes, same
//! argument checks, from the same code); nothing here names a backend type; no call blocks a
//! tokio worker thread on the network or on a disk sync (the embedded store's synced writes run
//! on the blocking pool; PostgreSQL calls are async). A claim acquired for a caller that went
//! away before the answer arrived is released, not left pending until its lease runs out.

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
use crate::error::{Error, Result};
use crate::format::Namespace;
#[cfg(feature = "postgres")]
use crate::metrics::Metrics;
#[cfg(feature = "postgres")]
use crate::observe::lease_outcome;
use crate::observe::{Op, OpKind, Stamp};
#[cfg(feature = "postgres")]
use crate::record::Checkpoint;
use crate::record::{Claim, ClaimOptions, FailKind, Lease, LeaseLost, RecordInfo, Response};
use crate::store::Store;

/// A store behind the async API, on disk or on PostgreSQL ([`Config::open_async`]). Cheap to
/// clone; clones share the store. Application code written against it runs on either backend
/// unchanged; [`AsyncStore::embedded`] reaches the embedded store's full synchronous API.
#[derive(Clone)]
pub struct AsyncStore {
    backend: Backend,
    cfg: Arc<Config>,
    /// PostgreSQL only: the local replay tier, if configured.
    #[cfg(feature = "postgres")]
    tier: Option<Arc<crate::replay_tier::ReplayTier>>,
    /// PostgreSQL only: this process's outcome counters (the embedded store keeps its own).
    #[cfg(feature = "postgres")]
    metrics: Arc<crate::metrics::Metrics>,
}

#[derive(Clone)]
enum Backend {
    Embedded(Store),
    #[cfg(feature = "postgres")]
    Postgres(Arc<crate::postgres::PgStore>),
}

impl From<Store> for AsyncStore {
    fn from(store: Store) -> Self {
        AsyncStore {
            cfg: Arc::new(store.config().clone()),
            backend: Backend::Embedded(store),
            #[cfg(feature = "postgres")]
            tier: None,
            #[cfg(feature = "postgres")]
            metrics: Arc::default(),
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

type LeaseResult<T = ()> = std::result::Result<T, LeaseLost>;

impl AsyncStore {
    pub(crate) async fn open(cfg: Config) -> Result<AsyncStore> {
        #[cfg(feature = "postgres")]
        if let Some(settings) = cfg.postgres.clone() {
            cfg.validate()?;
            let clock = cfg.postgres_test_clock.then(|| cfg.clock.clone());
            let pg = Arc::new(crate::postgres::PgStore::open(&settings, clock).await?);
            let metrics = Arc::new(crate::metrics::Metrics::default());
            if let Some(every) = cfg.sweep_interval {
                tokio::spawn(sweep_in_background(
                    Arc::downgrade(&pg),
                    Arc::downgrade(&metrics),
                    every,
                ));
            }
            let tier = (settings.tier_bytes > 0).then(|| {
                Arc::new(crate::replay_tier::ReplayTier::new(
                    settings.tier_bytes,
                    settings.tier_max_age,
                ))
            });
            return Ok(AsyncStore {
                backend: Backend::Postgres(pg),
                cfg: Arc::new(cfg),
                tier,
                metrics,
            });
        }
        let store = match cfg.durability {
            Durability::Buffered => Store::open(cfg)?,
            _ => match tokio::task::spawn_blocking(move || Store::open(cfg)).await {
                Ok(r) => r?,
                Err(e) => return Err(Error::Engine(format!("opening did not finish: {e}"))),
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
        self.tier.as_ref().map(|t| t.stats())
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
    /// acquired for a caller that went away (the HTTP layer counts them).
    pub(crate) async fn claim_with(
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
                let op = Op::start(OpKind::of_claim(ns), &self.cfg, tenant, key);
                let claim = self
                    .claim_on_postgres(pg, ns, tenant, key, fingerprint, opts, on_release)
                    .await;
                if let Ok(Claim::Acquired(l)) = &claim {
                    op.fence(l.fence);
                }
                op.end_with(claim, Claim::outcome)
            }
        }
    }

    #[cfg(feature = "postgres")]
    #[allow(clippy::too_many_arguments)]
    async fn claim_on_postgres(
        &self,
        pg: &Arc<crate::postgres::PgStore>,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        opts: ClaimOptions,
        on_release: &OnRelease,
    ) -> Result<Claim> {
        let (lease_ms, retention_ms) =
            crate::requests::check_claim(&self.cfg, tenant, key, fingerprint, opts)?;
        let tier = self.tier.clone();
        if let Some(tier) = &tier {
            let test_now = self
                .cfg
                .postgres_test_clock
                .then(|| self.cfg.clock.now_millis());
            if let Some(answer) = tier.get(ns as u8, tenant, key, fingerprint, test_now) {
                self.metrics.count_claim(&answer);
                return Ok(answer);
            }
        }
        let (pg, t, k, f) = (
            pg.clone(),
            tenant.to_vec(),
            key.to_vec(),
            fingerprint.to_vec(),
        );
        let (store, on_release) = (self.clone(), on_release.clone());
        let metrics = self.metrics.clone();
        Detached::new(async move {
            let (claim, expires_at, now) = pg.claim(ns, &t, &k, &f, lease_ms, retention_ms).await?;
            // Counted here, so a claim whose caller went away is counted too.
            metrics.count_claim(&claim);
            if let Some(tier) = tier {
                tier.put(ns as u8, &t, &k, &f, &claim, expires_at, now);
            }
            Ok(claim)
        })
        .then_if_dropped(move |claim| async move {
            if let Ok(Claim::Acquired(lease)) = claim {
                store.release_abandoned(lease, on_release).await;
            }
        })
        .await
    }

    /// A lease holder's call on PostgreSQL (`checked`: the arguments' check), in its span and
    /// counted as the embedded store counts it; the lease's new end if it applied.
    #[cfg(feature = "postgres")]
    async fn held(
        &self,
        pg: &crate::postgres::PgStore,
        lease: &Lease,
        checked: Result<()>,
        change: crate::postgres::HolderChange,
    ) -> Result<LeaseResult<Millis>> {
        use crate::postgres::HolderChange as H;
        let m = &self.metrics;
        let (kind, ok, count) = match &change {
            H::Complete(_) => (OpKind::Complete, "completed", &m.completed),
            H::Release => (OpKind::Fail, "released", &m.failed_retryable),
            H::FailTerminal(_) => (OpKind::Fail, "failed", &m.failed_terminal),
            H::Renew(_) => (OpKind::Renew, "renewed", &m.renewed),
            H::Checkpoint(_) => (OpKind::Checkpoint, "checkpointed", &m.checkpointed),
        };
        let op = Op::held(kind, &self.cfg, lease);
        let r = match checked {
            Ok(()) => pg.holder(lease, change).await,
            Err(e) => Err(e),
        };
        match &r {
            Ok(Ok(_)) => Metrics::bump(count),
            Ok(Err(_)) => Metrics::bump(&m.lease_lost),
            Err(_) => {}
        }
        op.end_with(r, lease_outcome(ok))
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
            Backend::Postgres(pg) => {
                let checked = crate::requests::check_response(&self.cfg, "response", &response);
                let change = crate::postgres::HolderChange::Complete(response);
                Ok(self.held(pg, lease, checked, change).await?.map(drop))
            }
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
            Backend::Postgres(pg) => {
                let (checked, change) = match kind {
                    FailKind::Retryable => (Ok(()), crate::postgres::HolderChange::Release),
                    FailKind::Terminal(r) => (
                        crate::requests::check_response(&self.cfg, "failure", &r),
                        crate::postgres::HolderChange::FailTerminal(r),
                    ),
                };
                Ok(self.held(pg, lease, checked, change).await?.map(drop))
            }
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
            Backend::Postgres(pg) => {
                let checked = crate::record::check_duration("renewal", extra, self.cfg.max_lease);
                let ms = crate::clock::duration_millis(extra);
                let change = crate::postgres::HolderChange::Renew(ms);
                match self.held(pg, lease, checked, change).await? {
                    Ok(until) => until,
                    Err(lost) => return Ok(Err(lost)),
                }
            }
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
            Backend::Postgres(pg) => {
                let cp = Checkpoint { phase, state };
                let checked = crate::requests::check_checkpoint(&self.cfg, &cp);
                let change = crate::postgres::HolderChange::Checkpoint(cp);
                Ok(self.held(pg, lease, checked, change).await?.map(drop))
            }
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
            Backend::Postgres(pg) => {
                self.cfg.check_names(tenant, key)?;
                pg.get(Namespace::Requests, tenant, key).await
            }
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
            Backend::Postgres(pg) => {
                self.cfg.check_names(tenant, key)?;
                if let Some(tier) = &self.tier {
                    tier.remove(Namespace::Requests as u8, tenant, key);
                }
                let found = pg.forget(Namespace::Requests, tenant, key).await?;
                if found {
                    Metrics::bump(&self.metrics.forgotten);
                }
                Ok(found)
            }
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
            Backend::Embedded(_) => Err(crate::InvalidInput::Config(
                "postgres_stats counts a store on PostgreSQL; the embedded store's counters are \
                 Store::stats (AsyncStore::embedded)"
                    .into(),
            )
            .into()),
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
            Backend::Postgres(pg) => sweep_counted(pg, &self.metrics, limit).await,
        }
    }

    /// This process's outcome counters since the store was opened: the embedded store's own
    /// ([`Store::stats`]), or, on PostgreSQL, those of the calls made through this handle and
    /// its clones (other instances count their own; the database's totals are
    /// [`AsyncStore::postgres_stats`]).
    pub fn counters(&self) -> Result<crate::metrics::Counters> {
        match &self.backend {
            Backend::Embedded(s) => Ok(s.stats()?.counters),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Ok(self.metrics.snapshot()),
        }
    }
}

/// A sweep on PostgreSQL, in its span and counted.
#[cfg(feature = "postgres")]
async fn sweep_counted(
    pg: &crate::postgres::PgStore,
    metrics: &crate::metrics::Metrics,
    limit: usize,
) -> Result<usize> {
    let op = Op::unkeyed(OpKind::Sweep);
    let r = pg.sweep(limit).await;
    if let Ok(n) = &r {
        metrics.swept.add(*n as u64);
        op.count(*n as u64);
    }
    op.end_with(r, |_| "swept")
}

/// The PostgreSQL store's sweeper: every `every`, batches of expired rows are deleted until a
/// batch comes back short; it ends when the last handle of the store is dropped. A failed batch
/// (database unavailable) waits for the next tick. Instances that sweep at the same moment skip
/// each other's rows (`SKIP LOCKED`).
#[cfg(feature = "postgres")]
async fn sweep_in_background(
    pg: std::sync::Weak<crate::postgres::PgStore>,
    metrics: std::sync::Weak<crate::metrics::Metrics>,
    every: Duration,
) {
    const BATCH: usize = 1_000;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate: sweep one interval after opening
    loop {
        tick.tick().await;
        let (Some(pg), Some(metrics)) = (pg.upgrade(), metrics.upgrade()) else {
            return;
        };
        while let Ok(BATCH) = sweep_counted(&pg, &metrics, BATCH).await {}
    }
}

/// One step of the PostgreSQL schema, as [`Config::schema_status`] reports it.
#[cfg(feature = "postgres")]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchemaStep {
    /// The step's version (1, 2, ...).
    pub version: i32,
    /// What it creates.
    pub name: &'static str,
    /// When it was applied (the database's text form of the time), `None` if it was not.
    pub applied_at: Option<String>,
}

#[cfg(feature = "postgres")]
impl Config {
    fn postgres_settings(&self, operation: &'static str) -> Result<&crate::postgres::Settings> {
        self.postgres.as_ref().ok_or(Error::Unsupported {
            operation,
            hint: "only a store on PostgreSQL (Config::postgres) has a schema",
        })
    }

    /// PostgreSQL only: every step of the schema this build knows, with when each was applied.
    pub async fn schema_status(&self) -> Result<Vec<SchemaStep>> {
        let pg = crate::postgres::PgStore::connect(self.postgres_settings("schema_status")?, None)?;
        let applied = pg.migration_status().await?;
        Ok(crate::postgres::migrations::MIGRATIONS
            .iter()
            .map(|m| SchemaStep {
                version: m.version,
                name: m.name,
                applied_at: applied
                    .iter()
                    .find(|a| a.0 == m.version)
                    .map(|a| a.2.clone()),
            })
            .collect())
    }

    /// PostgreSQL only: moves the schema to version `to` (`None`: the latest this build knows),
    /// applying the steps above the current version or undoing those above `to` (newest first;
    /// undoing drops their tables and data, and `Some(0)` removes every idemdb table). Each step
    /// runs in its own transaction under an advisory lock. Returns the versions applied, or
    /// undone, in the order they ran.
    pub async fn migrate_schema(&self, to: Option<i32>) -> Result<Vec<i32>> {
        let latest = crate::postgres::migrations::current_version();
        let target = to.unwrap_or(latest);
        if !(0..=latest).contains(&target) {
            return Err(crate::error::InvalidInput::Config(format!(
                "schema version {target} is not in 0..={latest}"
            ))
            .into());
        }
        let pg =
            crate::postgres::PgStore::connect(self.postgres_settings("migrate_schema")?, None)?;
        let current = pg.schema_version().await?;
        if target >= current {
            pg.migrate_up(Some(target)).await
        } else {
            pg.migrate_down(target).await
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
        Err(e) => Err(Error::Engine(format!("store call did not finish: {e}"))),
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
                Poll::Ready(answer.unwrap_or_else(|_| {
                    Err(Error::Engine(
                        "the claim on the blocking pool did not finish".into(),
                    ))
                }))
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
