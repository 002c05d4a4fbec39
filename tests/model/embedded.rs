//! The embedded `Store` as a [`Target`]: opened on disk, in RocksDB's in-memory environment, or
//! reused from run to run (the fuzz target); its tokens predicted, its compactions and reopens
//! real.

use std::time::Duration;

use idemdb::__internal::InMemory;
use idemdb::{
    Begin, Claim, ClaimOptions, CommitConflict, Config, Conflict, ConsumerOptions, Durability,
    Expect, FailKind, Lease, LeaseLost, ManualClock, MessageFailed, OffsetWindow, RecordInfo,
    Released, Reservation, Response, Store, Versioned,
};

use super::reference::Fences;
use super::runner::{run_ready, Names, Target};
use super::{Op, MAX_LEASE_S};

/// The model store's `Config::pending_in_memory`: small, so that claims past the cap (written
/// durably) happen too.
const PENDING_IN_MEMORY: usize = 2;

/// Where the runner's store keeps its database.
pub enum Backend<'a> {
    /// Files in a new temporary directory, as every real store (the proptest test).
    Disk,
    /// A new in-memory environment (RocksDB's), shared by the store and its reopens: an input
    /// then costs no file system work.
    InMemory,
    /// The store of a [`Session`], kept open from one run to the next and emptied before each
    /// (`idemdb::__internal::reset`): the fuzz target, for which opening a store per input would
    /// cost more than running it.
    Reused(&'a mut Session),
}

/// A store, its clock and (for the in-memory backends) its environment, reused across runs by
/// [`Backend::Reused`]. A `Reopen` step replaces the store with a reopened one, which the next
/// run reuses.
pub struct Session {
    dir: tempfile::TempDir,
    mem: Option<InMemory>,
    clock: ManualClock,
    store: Option<Store>,
    used: bool,
}

impl Session {
    /// A session whose store lives in a new in-memory environment.
    pub fn in_memory() -> Self {
        Self::new(Some(InMemory::new().unwrap()))
    }

    fn new(mem: Option<InMemory>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let store = open(dir.path(), &clock, mem.as_ref());
        Session {
            dir,
            mem,
            clock,
            store: Some(store),
            used: false,
        }
    }

    /// The store, emptied and with the clock at its start if an earlier run used it: from the
    /// API's side, a new store.
    fn begin(&mut self) -> Store {
        let store = self
            .store
            .take()
            .expect("a session's store is put back after every run");
        if self.used {
            self.clock
                .set(idemdb::Clock::now_millis(&ManualClock::default()));
            idemdb::__internal::reset(&store).unwrap();
        }
        self.used = true;
        store
    }
}

/// A buffered store on the manual clock with small memtables and cache (so flushes happen and
/// opening is cheap: the fuzz target opens one per input) and few lock stripes (so unrelated keys
/// share stripes); in `mem` when given.
fn open(dir: &std::path::Path, clock: &ManualClock, mem: Option<&InMemory>) -> Store {
    let cfg = Config::new(dir)
        .clock(clock.clone())
        .durability(Durability::Buffered)
        .sweep_interval(None)
        .max_lease(Duration::from_secs(MAX_LEASE_S))
        .write_buffer_bytes(1 << 20)
        .cache_bytes(1 << 20)
        .lock_stripes(16)
        .pending_in_memory(PENDING_IN_MEMORY);
    match mem {
        Some(mem) => cfg.in_memory(mem),
        None => cfg,
    }
    .open()
    .unwrap()
}

/// Runs `ops` against a new store (in a new temporary directory, on disk or in a new in-memory
/// environment, or a reused session's store emptied: see [`Backend`]) and the model, comparing
/// every outcome and, after every step, the observable state of every key; panics on the first
/// divergence or broken invariant. `count(operation, outcome)` is called once per step.
pub fn run(ops: Vec<Op>, backend: Backend<'_>, count: &mut dyn FnMut(&'static str, &'static str)) {
    match backend {
        Backend::Disk => run_in(&mut Session::new(None), ops, count),
        Backend::InMemory => run_in(&mut Session::in_memory(), ops, count),
        Backend::Reused(session) => run_in(session, ops, count),
    }
}

fn run_in(session: &mut Session, ops: Vec<Op>, count: &mut dyn FnMut(&'static str, &'static str)) {
    let store = session.begin();
    let mut target = Embedded {
        session,
        store: Some(store),
        names: Names::of_run(""),
    };
    run_ready(super::runner::run_on(&mut target, ops, count));
    target.session.store = target.store.take();
}

/// The store of a session under test.
struct Embedded<'a> {
    session: &'a mut Session,
    /// Always `Some` but while a reopen swaps it.
    store: Option<Store>,
    names: Names,
}

impl Embedded<'_> {
    fn s(&self) -> &Store {
        self.store
            .as_ref()
            .expect("the store is back after every reopen")
    }
}

impl Target for Embedded<'_> {
    fn fences(&self) -> Fences {
        Fences::Predict
    }

    fn pending_in_memory(&self) -> usize {
        PENDING_IN_MEMORY
    }

    fn names(&self) -> &Names {
        &self.names
    }

    fn advance(&self, by: Duration) {
        self.session.clock.advance(by);
    }

    async fn compact(&mut self) -> bool {
        self.s().compact().unwrap();
        true
    }

    async fn reopen(&mut self) -> bool {
        drop(self.store.take());
        let s = &self.session;
        self.store = Some(open(s.dir.path(), &s.clock, s.mem.as_ref()));
        true
    }

    async fn now(&self) -> u64 {
        self.s().now()
    }

    async fn claim(&self, tenant: &str, key: &str, fp: &[u8], opts: ClaimOptions) -> Claim {
        self.s().claim(tenant, key, fp, opts).unwrap()
    }

    async fn get(&self, tenant: &str, key: &str) -> Option<RecordInfo> {
        self.s().get(tenant, key).unwrap()
    }

    async fn complete(&self, lease: &Lease, response: Response) -> Result<(), LeaseLost> {
        self.s().complete(lease, response).unwrap()
    }

    async fn fail(&self, lease: &Lease, kind: FailKind) -> Result<(), LeaseLost> {
        self.s().fail(lease, kind).unwrap()
    }

    async fn renew(&self, lease: &mut Lease, by: Duration) -> Result<(), LeaseLost> {
        self.s().renew(lease, by).unwrap()
    }

    async fn checkpoint(
        &self,
        lease: &Lease,
        phase: String,
        state: Vec<u8>,
    ) -> Result<(), LeaseLost> {
        self.s().checkpoint(lease, phase, state).unwrap()
    }

    async fn forget(&self, tenant: &str, key: &str) -> bool {
        self.s().forget(tenant, key).unwrap()
    }

    async fn sweep(&self, limit: usize) {
        self.s().sweep(limit).unwrap();
    }

    async fn put_entity(
        &self,
        tenant: &str,
        key: &str,
        e: Expect,
        value: Vec<u8>,
    ) -> Result<u64, Conflict> {
        self.s().put_entity(tenant, key, e, value).unwrap()
    }

    async fn delete_entity(
        &self,
        tenant: &str,
        key: &str,
        e: Expect,
    ) -> Result<Option<u64>, Conflict> {
        self.s().delete_entity(tenant, key, e).unwrap()
    }

    async fn get_entity(&self, tenant: &str, key: &str) -> Option<Versioned> {
        self.s().get_entity(tenant, key).unwrap()
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
        self.s()
            .commit()
            .put(tenant, key, e, value)
            .complete(lease, response)
            .apply()
            .unwrap()
            .map(|c| c.versions)
    }

    async fn begin(&self, group: &str, message: &str, opts: ConsumerOptions) -> Begin {
        self.s().begin(group, message, opts).unwrap()
    }

    async fn fail_message(
        &self,
        lease: &Lease,
        opts: ConsumerOptions,
    ) -> Result<MessageFailed, LeaseLost> {
        self.s().fail_message(lease, opts).unwrap()
    }

    async fn reserve(&self, index: &str, value: &[&[u8]], owner: &[u8]) -> Reservation {
        self.s().reserve(index, value, owner).unwrap()
    }

    async fn reserve_for(
        &self,
        lease: &Lease,
        index: &str,
        value: &[&[u8]],
    ) -> Result<Reservation, LeaseLost> {
        self.s().reserve_for(lease, index, value).unwrap()
    }

    async fn release_reservation(&self, index: &str, value: &[&[u8]], owner: &[u8]) -> Released {
        self.s().release_reservation(index, value, owner).unwrap()
    }

    async fn reservation_owner(&self, index: &str, value: &[&[u8]]) -> Option<Vec<u8>> {
        self.s().reservation_owner(index, value).unwrap()
    }

    async fn mark_processed(&self, group: &str, topic: &str, partition: u32, offset: u64) {
        self.s()
            .mark_processed(group, topic, partition, offset)
            .unwrap();
    }

    async fn commit_watermark(&self, group: &str, topic: &str, partition: u32, offset: u64) {
        self.s()
            .commit_watermark(group, topic, partition, offset)
            .unwrap();
    }

    async fn offset_window(&self, group: &str, topic: &str, partition: u32) -> OffsetWindow {
        self.s().offset_window(group, topic, partition).unwrap()
    }

    async fn is_processed(&self, group: &str, topic: &str, partition: u32, offset: u64) -> bool {
        self.s()
            .is_processed(group, topic, partition, offset)
            .unwrap()
    }
}
