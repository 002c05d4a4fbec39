//! The model-based test, on both backends: the one reference model and runner of `tests/model/`
//! (the proptest test's and the fuzz target's), driven through `AsyncStore`. Random sequences of
//! claims, completions, failures, renewals, checkpoints, forgets, sweeps and clock steps; entity
//! writes and deletes under every kind of condition; plain and lease-bound reservations and their
//! releases; offset marks and watermarks; commits of an entity write with a lease's completion;
//! consumer deliveries and failed attempts (poisoning at the limit). Every outcome and, after
//! every step, the state of every key, entity, reserved value and offset window must equal the
//! model's, and the claim/CAS invariants must hold.
//!
//! What differs from the embedded run is said by the target, not by a second model: the fencing
//! tokens are taken from the store (`Fences::Adopt`: blocks on disk, a sequence on PostgreSQL,
//! and a store shared by every case), each case names its own tenants, groups and index
//! (`Names::of_run`), and there are no compactions or reopens (steps the async API has not).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use idemdb::{
    Begin, Claim, ClaimOptions, CommitConflict, Conflict, ConsumerOptions, Expect, FailKind, Lease,
    LeaseLost, MessageFailed, OffsetWindow, RecordInfo, Released, Reservation, Response, Versioned,
};
use proptest::test_runner::{Config as PtConfig, TestRunner};

use crate::harness::Harness;

#[path = "../model/mod.rs"]
mod model;
#[path = "../model/strategy.rs"]
mod strategy;

use model::{Fences, Names, Target};

/// An `AsyncStore` under test, with the names of one case.
struct OnAsync<'a> {
    h: &'a Harness,
    names: Names,
}

impl Target for OnAsync<'_> {
    fn fences(&self) -> Fences {
        Fences::Adopt
    }

    fn pending_in_memory(&self) -> usize {
        // Without reopens nothing tells an in-memory pending record from a written one.
        0
    }

    fn names(&self) -> &Names {
        &self.names
    }

    fn advance(&self, by: Duration) {
        self.h.advance(by);
    }

    async fn compact(&mut self) -> bool {
        false
    }

    async fn reopen(&mut self) -> bool {
        false
    }

    async fn now(&self) -> u64 {
        self.h.store.now().await.unwrap()
    }

    async fn claim(&self, tenant: &str, key: &str, fp: &[u8], opts: ClaimOptions) -> Claim {
        self.h.store.claim(tenant, key, fp, opts).await.unwrap()
    }

    async fn get(&self, tenant: &str, key: &str) -> Option<RecordInfo> {
        self.h.store.get(tenant, key).await.unwrap()
    }

    async fn complete(&self, lease: &Lease, response: Response) -> Result<(), LeaseLost> {
        self.h.store.complete(lease, response).await.unwrap()
    }

    async fn fail(&self, lease: &Lease, kind: FailKind) -> Result<(), LeaseLost> {
        self.h.store.fail(lease, kind).await.unwrap()
    }

    async fn renew(&self, lease: &mut Lease, by: Duration) -> Result<(), LeaseLost> {
        self.h.store.renew(lease, by).await.unwrap()
    }

    async fn checkpoint(
        &self,
        lease: &Lease,
        phase: String,
        state: Vec<u8>,
    ) -> Result<(), LeaseLost> {
        self.h.store.checkpoint(lease, phase, state).await.unwrap()
    }

    async fn forget(&self, tenant: &str, key: &str) -> bool {
        self.h.store.forget(tenant, key).await.unwrap()
    }

    async fn sweep(&self, limit: usize) {
        self.h.store.sweep(limit).await.unwrap();
    }

    async fn put_entity(
        &self,
        tenant: &str,
        key: &str,
        e: Expect,
        value: Vec<u8>,
    ) -> Result<u64, Conflict> {
        self.h
            .store
            .put_entity(tenant, key, e, value)
            .await
            .unwrap()
    }

    async fn delete_entity(
        &self,
        tenant: &str,
        key: &str,
        e: Expect,
    ) -> Result<Option<u64>, Conflict> {
        self.h.store.delete_entity(tenant, key, e).await.unwrap()
    }

    async fn get_entity(&self, tenant: &str, key: &str) -> Option<Versioned> {
        self.h.store.get_entity(tenant, key).await.unwrap()
    }

    async fn commit_put_complete(
        &self,
        tenant: &str,
        key: &str,
        e: Expect,
        value: Vec<u8>,
        lease: &Lease,
        response: Response,
    ) -> Result<Vec<Option<u64>>, CommitConflict> {
        self.h
            .store
            .commit()
            .put(tenant, key, e, value)
            .complete(lease, response)
            .apply()
            .await
            .unwrap()
            .map(|c| c.versions)
    }

    async fn begin(&self, group: &str, message: &str, opts: ConsumerOptions) -> Begin {
        self.h.store.begin(group, message, opts).await.unwrap()
    }

    async fn fail_message(
        &self,
        lease: &Lease,
        opts: ConsumerOptions,
    ) -> Result<MessageFailed, LeaseLost> {
        self.h.store.fail_message(lease, opts).await.unwrap()
    }

    async fn reserve(&self, index: &str, value: &[&[u8]], owner: &[u8]) -> Reservation {
        self.h.store.reserve(index, value, owner).await.unwrap()
    }

    async fn reserve_for(
        &self,
        lease: &Lease,
        index: &str,
        value: &[&[u8]],
    ) -> Result<Reservation, LeaseLost> {
        self.h.store.reserve_for(lease, index, value).await.unwrap()
    }

    async fn release_reservation(&self, index: &str, value: &[&[u8]], owner: &[u8]) -> Released {
        self.h
            .store
            .release_reservation(index, value, owner)
            .await
            .unwrap()
    }

    async fn reservation_owner(&self, index: &str, value: &[&[u8]]) -> Option<Vec<u8>> {
        self.h.store.reservation_owner(index, value).await.unwrap()
    }

    async fn mark_processed(&self, group: &str, topic: &str, partition: u32, offset: u64) {
        self.h
            .store
            .mark_processed(group, topic, partition, offset)
            .await
            .unwrap();
    }

    async fn commit_watermark(&self, group: &str, topic: &str, partition: u32, offset: u64) {
        self.h
            .store
            .commit_watermark(group, topic, partition, offset)
            .await
            .unwrap();
    }

    async fn offset_window(&self, group: &str, topic: &str, partition: u32) -> OffsetWindow {
        self.h
            .store
            .offset_window(group, topic, partition)
            .await
            .unwrap()
    }

    async fn is_processed(&self, group: &str, topic: &str, partition: u32, offset: u64) -> bool {
        self.h
            .store
            .is_processed(group, topic, partition, offset)
            .await
            .unwrap()
    }
}

/// Proptest drives the cases (and shrinks a failing one) on this thread, each case run to its
/// end on the test's runtime; every case (shrinking steps too) uses names of its own. The
/// outcomes reached are printed (`--nocapture`): the embedded proptest test asserts that every
/// one is reached, over more cases than this one runs.
async fn check(h: &Harness) {
    let rt = tokio::runtime::Handle::current();
    let cases = std::sync::atomic::AtomicUsize::new(0);
    let histogram: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
    let strategy = proptest::collection::vec(strategy::op(false), 1..60);
    let result = tokio::task::block_in_place(|| {
        let mut runner = TestRunner::new(PtConfig {
            cases: 48,
            failure_persistence: None,
            ..PtConfig::default()
        });
        runner.run(&strategy, |ops| {
            let case = cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut target = OnAsync {
                h,
                names: Names::of_run(&format!("-{case}")),
            };
            let mut count = |op: &'static str, outcome: &'static str| {
                let mut h = histogram.lock().unwrap();
                *h.entry(format!("{op}: {outcome}")).or_default() += 1;
            };
            rt.block_on(model::run_on(&mut target, ops, &mut count));
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("the store diverged from the model: {e}");
    }
    println!("outcomes reached: {:?}", histogram.lock().unwrap());
}

on_both_backends!(check);
