//! The embedded store behind the async API: each [`Backend`] method is the `Store` method of the
//! same name. Invariant: no call blocks a tokio worker thread on a disk sync: a store that syncs
//! runs its writes on tokio's blocking pool ([`blocking`]), and only reads and a store that never
//! syncs answer inline; a claim acquired on the pool for a caller that went away is released
//! ([`PooledClaim`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::backend::{Backend, Waited};
use super::OnRelease;
use crate::causal::{Siblings, VersionVector};
use crate::clock::Millis;
use crate::commit::{CommitConflict, Committed, Plan};
use crate::config::{Common, Durability};
use crate::embedded::commit::Commit;
use crate::embedded::waits::AsyncTicket;
use crate::embedded::Store;
use crate::entities::{Conflict, Expect, UpdateOptions, Version, Versioned};
use crate::error::{Error, Result};
use crate::format::Namespace;
use crate::offsets::OffsetWindow;
use crate::record::{
    Checkpoint, Claim, ClaimOptions, FailKind, Lease, LeaseResult, RecordInfo, Response,
};
use crate::telemetry::counters::Counters;
use crate::telemetry::spans::{Op, OpKind, Stamp};
use crate::unique::{Released, Reservation};

fn owned(value: &[&[u8]]) -> Vec<Vec<u8>> {
    value.iter().map(|p| p.to_vec()).collect()
}

fn parts(value: &[Vec<u8>]) -> Vec<&[u8]> {
    value.iter().map(Vec::as_slice).collect()
}

impl Backend for Store {
    type Ticket = AsyncTicket;

    fn name(&self) -> &'static str {
        "embedded"
    }

    fn common(&self) -> &Common {
        &self.config().common
    }

    fn embedded(&self) -> Option<&Store> {
        Some(self)
    }

    async fn now(&self) -> Result<Millis> {
        Ok(Store::now(self))
    }

    fn counters(&self) -> Result<Counters> {
        Ok(self.stats()?.counters)
    }

    fn ticket(&self) -> AsyncTicket {
        self.lease_end_ticket()
    }

    async fn claim(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        opts: ClaimOptions,
        on_release: &OnRelease,
    ) -> Result<Claim> {
        if self.config().backend.durability == Durability::Buffered {
            return self.claim_in(ns, tenant, key, fingerprint, opts);
        }
        // A replay or mismatch needs no write, so it is read inline (no sync); only a claim that
        // may write (and sync) goes to the blocking pool (where the claim has its own span).
        let asked = Stamp::now();
        if let Ok(Some(answer)) = self.peek_final(ns, tenant, key, fingerprint) {
            Op::start(OpKind::of_claim(ns), Backend::common(self), tenant, key)
                .since(asked)
                .end(answer.outcome());
            return Ok(answer);
        }
        let (t, k, f) = (tenant.to_vec(), key.to_vec(), fingerprint.to_vec());
        PooledClaim::spawn(self.clone(), on_release.clone(), move |s| {
            s.claim_in(ns, &t, &k, &f, opts)
        })
        .await
    }

    async fn wait_for_end(
        &self,
        ticket: AsyncTicket,
        _ns: Namespace,
        _tenant: &[u8],
        _key: &[u8],
        deadline: Instant,
        lease_end: Instant,
    ) -> Result<Waited> {
        // The ticket wakes at any lease end in this store: the claim says whether it was this
        // key's. The lease running out ends it too, with no wake-up.
        let woken = ticket.wait(deadline.min(lease_end)).await;
        Ok(if !woken && deadline < lease_end {
            Waited::Bound
        } else {
            Waited::Ended
        })
    }

    async fn complete(&self, lease: &Lease, response: Response) -> Result<LeaseResult> {
        let lease = lease.clone();
        blocking(self, move |s| s.complete(&lease, response)).await
    }

    async fn fail(&self, lease: &Lease, kind: FailKind) -> Result<LeaseResult> {
        let lease = lease.clone();
        blocking(self, move |s| s.fail(&lease, kind)).await
    }

    async fn renew(&self, lease: &Lease, extra: Duration) -> Result<LeaseResult<Millis>> {
        let mut l = lease.clone();
        blocking(self, move |s| Ok(s.renew(&mut l, extra)?.map(|()| l.until))).await
    }

    async fn checkpoint(&self, lease: &Lease, cp: Checkpoint) -> Result<LeaseResult> {
        let lease = lease.clone();
        blocking(self, move |s| s.checkpoint(&lease, cp.phase, cp.state)).await
    }

    async fn get(&self, tenant: &[u8], key: &[u8]) -> Result<Option<RecordInfo>> {
        Store::get(self, tenant, key)
    }

    async fn forget(&self, ns: Namespace, tenant: &[u8], key: &[u8]) -> Result<bool> {
        let (t, k) = (tenant.to_vec(), key.to_vec());
        blocking(self, move |s| match ns {
            Namespace::Requests => s.forget(t, k),
            Namespace::Consumers => s.forget_message(t, k),
        })
        .await
    }

    async fn sweep(&self, limit: usize) -> Result<usize> {
        blocking(self, move |s| s.sweep(limit)).await
    }

    async fn get_entity(&self, tenant: &[u8], id: &[u8]) -> Result<Option<Versioned>> {
        Store::get_entity(self, tenant, id)
    }

    async fn write_entity(
        &self,
        tenant: &[u8],
        id: &[u8],
        expect: Expect,
        value: Option<Vec<u8>>,
    ) -> Result<std::result::Result<Option<Version>, Conflict>> {
        let (t, i) = (tenant.to_vec(), id.to_vec());
        blocking(self, move |s| match value {
            Some(v) => Ok(s.put_entity(t, i, expect, v)?.map(Some)),
            None => s.delete_entity(t, i, expect),
        })
        .await
    }

    async fn update_entity<F>(
        &self,
        tenant: Vec<u8>,
        id: Vec<u8>,
        opts: UpdateOptions,
        f: F,
    ) -> Result<Option<Versioned>>
    where
        F: FnMut(Option<&[u8]>) -> Option<Vec<u8>> + Send + 'static,
    {
        blocking(self, move |s| s.update_entity(tenant, id, opts, f)).await
    }

    async fn causal_get(&self, tenant: &[u8], id: &[u8]) -> Result<Siblings> {
        Store::causal_get(self, tenant, id)
    }

    async fn causal_put(
        &self,
        tenant: &[u8],
        id: &[u8],
        actor: &str,
        context: &VersionVector,
        value: Vec<u8>,
    ) -> Result<Siblings> {
        let (t, i, a, c) = (
            tenant.to_vec(),
            id.to_vec(),
            actor.to_owned(),
            context.clone(),
        );
        blocking(self, move |s| s.causal_put(t, i, &a, &c, value)).await
    }

    async fn causal_delete(
        &self,
        tenant: &[u8],
        id: &[u8],
        context: &VersionVector,
    ) -> Result<Siblings> {
        let (t, i, c) = (tenant.to_vec(), id.to_vec(), context.clone());
        blocking(self, move |s| s.causal_delete(t, i, &c)).await
    }

    async fn merge_replica_vector(
        &self,
        tenant: &[u8],
        id: &[u8],
        vv: &VersionVector,
    ) -> Result<()> {
        let (t, i, v) = (tenant.to_vec(), id.to_vec(), vv.clone());
        blocking(self, move |s| s.merge_replica_vector(t, i, &v)).await
    }

    async fn replica_vector(&self, tenant: &[u8], id: &[u8]) -> Result<VersionVector> {
        Store::replica_vector(self, tenant, id)
    }

    async fn reserve(&self, index: &[u8], value: &[&[u8]], owner: &[u8]) -> Result<Reservation> {
        let (i, v, o) = (index.to_vec(), owned(value), owner.to_vec());
        blocking(self, move |s| s.reserve(i, &parts(&v), o)).await
    }

    async fn reserve_for(
        &self,
        lease: &Lease,
        index: &[u8],
        value: &[&[u8]],
    ) -> Result<LeaseResult<Reservation>> {
        let (l, i, v) = (lease.clone(), index.to_vec(), owned(value));
        blocking(self, move |s| s.reserve_for(&l, i, &parts(&v))).await
    }

    async fn forget_reservation(&self, index: &[u8], value: &[&[u8]]) -> Result<bool> {
        let (i, v) = (index.to_vec(), owned(value));
        blocking(self, move |s| s.forget_reservation(i, &parts(&v))).await
    }

    async fn release_reservation(
        &self,
        index: &[u8],
        value: &[&[u8]],
        owner: &[u8],
    ) -> Result<Released> {
        let (i, v, o) = (index.to_vec(), owned(value), owner.to_vec());
        blocking(self, move |s| s.release_reservation(i, &parts(&v), o)).await
    }

    async fn reservation_owner(&self, index: &[u8], value: &[&[u8]]) -> Result<Option<Vec<u8>>> {
        Store::reservation_owner(self, index, value)
    }

    async fn mark_processed(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
        offset: u64,
    ) -> Result<()> {
        let (g, t) = (group.to_vec(), topic.to_vec());
        blocking(self, move |s| s.mark_processed(g, t, partition, offset)).await
    }

    async fn commit_watermark(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
        watermark: u64,
    ) -> Result<()> {
        let (g, t) = (group.to_vec(), topic.to_vec());
        blocking(self, move |s| {
            s.commit_watermark(g, t, partition, watermark)
        })
        .await
    }

    async fn offset_window(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
    ) -> Result<OffsetWindow> {
        Store::offset_window(self, group, topic, partition)
    }

    async fn apply(&self, plan: Plan) -> Result<std::result::Result<Committed, CommitConflict>> {
        blocking(self, move |s| Commit::of_plan(s, plan).apply()).await
    }

    #[cfg(feature = "postgres")]
    async fn transaction(&self) -> Result<crate::postgres::SqlTransaction> {
        Err(Error::Unsupported {
            operation: "an application SQL transaction",
            hint: "it needs the PostgreSQL backend; on the embedded store write the business \
                   data in the commit (AsyncCommit::put)",
        })
    }

    #[cfg(feature = "postgres")]
    async fn apply_in(
        &self,
        _tx: crate::postgres::SqlTransaction,
        _plan: Plan,
    ) -> Result<std::result::Result<Committed, CommitConflict>> {
        Err(Error::misuse(
            "the commit was built on another store than the transaction's",
        ))
    }

    #[cfg(feature = "postgres")]
    async fn postgres_stats(&self) -> Result<crate::postgres::PostgresStats> {
        Err(Error::Unsupported {
            operation: "postgres_stats",
            hint: "it counts a store on PostgreSQL; the embedded store's counters are \
                   Store::stats (AsyncStore::embedded)",
        })
    }

    #[cfg(feature = "postgres")]
    fn replay_tier_stats(&self) -> Option<crate::ReplayTierStats> {
        None
    }
}

/// Runs `f` inline on a store that never syncs (microseconds), and on tokio's blocking pool when
/// it does, so that a disk sync never stalls a runtime worker (the HTTP layer's calls too).
async fn blocking<T, F>(store: &Store, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&Store) -> Result<T> + Send + 'static,
{
    if store.config().backend.durability == Durability::Buffered {
        return f(store);
    }
    let s = store.clone();
    match tokio::task::spawn_blocking(move || f(&s)).await {
        Ok(r) => r,
        Err(e) => Err(Error::internal("a store call on the blocking pool", e)),
    }
}

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
