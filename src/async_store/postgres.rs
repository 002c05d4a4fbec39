//! The PostgreSQL backend behind the async API: each [`Backend`] method is the backend's method
//! of the same name. Invariants: a claim runs its three steps here (the checks and the replay
//! tier, with no round trip; the read first, which acquires nothing, in the caller's task; the
//! claim statement detached, so that it runs to its end even if the caller goes away, and a
//! lease it acquired for nobody is released); every other call is one call of the backend.

use std::time::Duration;

use tokio::time::Instant;

use super::backend::{Backend, Waited};
use super::{Detached, OnRelease};
use crate::causal::{Siblings, VersionVector};
use crate::clock::Millis;
use crate::commit::{CommitConflict, Committed, Plan};
use crate::config::Common;
use crate::embedded::Store;
use crate::entities::{Conflict, Expect, UpdateOptions, Version, Versioned};
use crate::error::Result;
use crate::format::Namespace;
use crate::offsets::OffsetWindow;
use crate::postgres::{Checked, ClaimAsk, Postgres, PostgresStats, ReadFirst, SqlTransaction};
use crate::record::{
    Checkpoint, Claim, ClaimOptions, FailKind, Lease, LeaseResult, RecordInfo, Response,
};
use crate::telemetry::counters::Counters;
use crate::unique::{Released, Reservation};

impl Backend for Postgres {
    /// A PostgreSQL wait registers when it marks the row, after the claim: nothing to take.
    type Ticket = ();

    fn name(&self) -> &'static str {
        "postgres"
    }

    fn common(&self) -> &Common {
        &self.cfg.common
    }

    fn embedded(&self) -> Option<&Store> {
        None
    }

    async fn now(&self) -> Result<Millis> {
        Postgres::now(self).await
    }

    fn counters(&self) -> Result<Counters> {
        Ok(Postgres::counters(self))
    }

    fn ticket(&self) {}

    async fn claim(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        opts: ClaimOptions,
        on_release: &OnRelease,
    ) -> Result<Claim> {
        let checked = match self.claim_here(ns, tenant, key, fingerprint, opts) {
            ClaimAsk::Answered(answer) => return answer,
            ClaimAsk::Database(checked) => checked,
        };
        // Boxed: the answers above (a replay from the tier, in well under a microsecond) do not
        // carry the state of the round trips below.
        Box::pin(self.claim_in_database_detached(ns, tenant, key, fingerprint, checked, on_release))
            .await
    }

    async fn wait_for_end(
        &self,
        (): (),
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        deadline: Instant,
        _lease_end: Instant,
    ) -> Result<Waited> {
        use crate::postgres::Waited as W;
        Ok(
            match self.sql.wait_for_end(ns, tenant, key, deadline).await? {
                W::Ended => Waited::Ended,
                W::Bound => Waited::Bound,
                W::NoLease => Waited::NoLease,
            },
        )
    }

    async fn complete(&self, lease: &Lease, response: Response) -> Result<LeaseResult> {
        Postgres::complete(self, lease, response).await
    }

    async fn fail(&self, lease: &Lease, kind: FailKind) -> Result<LeaseResult> {
        Postgres::fail(self, lease, kind).await
    }

    async fn renew(&self, lease: &Lease, extra: Duration) -> Result<LeaseResult<Millis>> {
        Postgres::renew(self, lease, extra).await
    }

    async fn checkpoint(&self, lease: &Lease, cp: Checkpoint) -> Result<LeaseResult> {
        Postgres::checkpoint(self, lease, cp).await
    }

    async fn get(&self, tenant: &[u8], key: &[u8]) -> Result<Option<RecordInfo>> {
        Postgres::get(self, tenant, key).await
    }

    async fn forget(&self, ns: Namespace, tenant: &[u8], key: &[u8]) -> Result<bool> {
        Postgres::forget(self, ns, tenant, key).await
    }

    async fn sweep(&self, limit: usize) -> Result<usize> {
        Postgres::sweep(self, limit).await
    }

    async fn get_entity(&self, tenant: &[u8], id: &[u8]) -> Result<Option<Versioned>> {
        Postgres::get_entity(self, tenant, id).await
    }

    async fn write_entity(
        &self,
        tenant: &[u8],
        id: &[u8],
        expect: Expect,
        value: Option<Vec<u8>>,
    ) -> Result<std::result::Result<Option<Version>, Conflict>> {
        Postgres::write_entity(self, tenant, id, expect, value.as_deref()).await
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
        Postgres::update_entity(self, &tenant, &id, opts, f).await
    }

    async fn causal_get(&self, tenant: &[u8], id: &[u8]) -> Result<Siblings> {
        Postgres::causal_get(self, tenant, id).await
    }

    async fn causal_put(
        &self,
        tenant: &[u8],
        id: &[u8],
        actor: &str,
        context: &VersionVector,
        value: Vec<u8>,
    ) -> Result<Siblings> {
        Postgres::causal_put(self, tenant, id, actor, context, value).await
    }

    async fn causal_delete(
        &self,
        tenant: &[u8],
        id: &[u8],
        context: &VersionVector,
    ) -> Result<Siblings> {
        Postgres::causal_delete(self, tenant, id, context).await
    }

    async fn merge_replica_vector(
        &self,
        tenant: &[u8],
        id: &[u8],
        vv: &VersionVector,
    ) -> Result<()> {
        Postgres::merge_replica_vector(self, tenant, id, vv).await
    }

    async fn replica_vector(&self, tenant: &[u8], id: &[u8]) -> Result<VersionVector> {
        Postgres::replica_vector(self, tenant, id).await
    }

    async fn reserve(&self, index: &[u8], value: &[&[u8]], owner: &[u8]) -> Result<Reservation> {
        Postgres::reserve(self, index, value, owner).await
    }

    async fn reserve_for(
        &self,
        lease: &Lease,
        index: &[u8],
        value: &[&[u8]],
    ) -> Result<LeaseResult<Reservation>> {
        Postgres::reserve_for(self, lease, index, value).await
    }

    async fn forget_reservation(&self, index: &[u8], value: &[&[u8]]) -> Result<bool> {
        Postgres::forget_reservation(self, index, value).await
    }

    async fn release_reservation(
        &self,
        index: &[u8],
        value: &[&[u8]],
        owner: &[u8],
    ) -> Result<Released> {
        Postgres::release_reservation(self, index, value, owner).await
    }

    async fn reservation_owner(&self, index: &[u8], value: &[&[u8]]) -> Result<Option<Vec<u8>>> {
        Postgres::reservation_owner(self, index, value).await
    }

    async fn mark_processed(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
        offset: u64,
    ) -> Result<()> {
        Postgres::mark_processed(self, group, topic, partition, offset).await
    }

    async fn commit_watermark(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
        watermark: u64,
    ) -> Result<()> {
        Postgres::commit_watermark(self, group, topic, partition, watermark).await
    }

    async fn offset_window(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
    ) -> Result<OffsetWindow> {
        Postgres::offset_window(self, group, topic, partition).await
    }

    async fn apply(&self, plan: Plan) -> Result<std::result::Result<Committed, CommitConflict>> {
        Postgres::commit(self, plan).await
    }

    async fn transaction(&self) -> Result<SqlTransaction> {
        SqlTransaction::begin(self.sql.clone()).await
    }

    async fn apply_in(
        &self,
        tx: SqlTransaction,
        plan: Plan,
    ) -> Result<std::result::Result<Committed, CommitConflict>> {
        tx.commit_plan(self, plan).await
    }

    async fn postgres_stats(&self) -> Result<PostgresStats> {
        Postgres::stats(self).await
    }

    fn replay_tier_stats(&self) -> Option<crate::ReplayTierStats> {
        self.tier_stats()
    }
}

impl Postgres {
    /// A claim's steps that need the database: the read first (a run of retries), which
    /// acquires nothing, in the caller's task; then the statement, detached.
    async fn claim_in_database_detached(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        checked: Checked,
        on_release: &OnRelease,
    ) -> Result<Claim> {
        let pending = match self.read_first(ns, tenant, key, fingerprint, checked).await {
            ReadFirst::Answered(answer) => return answer,
            ReadFirst::Pending(pending) => pending,
        };
        // Run to its end even if this caller goes away, then release what it acquired.
        let (pg, t, k, f) = (
            self.clone(),
            tenant.to_vec(),
            key.to_vec(),
            fingerprint.to_vec(),
        );
        let (releaser, on_release) = (self.clone(), on_release.clone());
        Detached::new(async move { pg.claim_in_database(ns, &t, &k, &f, pending).await })
            .then_if_dropped(move |claim| async move {
                if let Ok(Claim::Acquired(lease)) = claim {
                    on_release(releaser.fail(&lease, FailKind::Retryable).await);
                }
            })
            .await
    }
}
