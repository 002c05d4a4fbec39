//! The store: request idempotency records on the engine. Invariants: every decision that writes a
//! key is made under that key's lock stripe, from one read no older than the stripe's last write,
//! and written with one atomic batch that carries the record and its expiry-index entry; an answer
//! that writes nothing is given from one read, with or without the stripe; a fencing token is
//! handed out only after a high-water mark at or above it was written; time never goes backwards
//! from the store's view; an expired record is treated as absent by every read.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::clock::{duration_millis, Millis};
use crate::codec;
use crate::config::Config;
use crate::engine::{
    Cf, Engine, EngineOptions, EngineProperty, META_FENCE, META_FORMAT, META_STORE_ID, META_TIME,
};
use crate::error::{corrupted, Error, InvalidInput, Result};
use crate::format::{self, Namespace};
use crate::metrics::{Metrics, Stats};
use crate::record::{
    check_duration, Checkpoint, Claim, ClaimOptions, FailKind, Lease, LeaseLost, Record,
    RecordInfo, Replay, Response, ResponseView, State, StateView,
};
use crate::stripes::{Locked, Stripe, StripeGuard, Stripes};

/// Fencing tokens are reserved in blocks of this many: one write of the high-water mark per
/// block instead of one per claim. A restart skips what is left of the block.
const FENCE_BLOCK: u64 = 1 << 16;

/// Store time is reserved this far ahead: `meta/time_high_water` is written (with the store's
/// durability) before the store's time passes the mark, one write per this much time. After a
/// crash the store's time resumes at the mark, up to this much ahead of the last time it used.
const TIME_STEP: Millis = 1_000;

/// Longest request fingerprint accepted, in bytes.
pub const MAX_FINGERPRINT_LEN: usize = 1024;

/// An open idempotency store. Cheap to clone; all clones share one database. Safe to use from
/// any number of threads.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    cfg: Config,
    store_id: u128,
    next_fence: AtomicU64,
    /// Every token up to this one is covered by a written `meta/fence_high_water`.
    fence_reserved: AtomicU64,
    /// Held while a new block of tokens is reserved.
    fence_reserving: Mutex<()>,
    /// The store's time never passes this mark, which is durable in `meta/time_high_water`.
    time_reserved: AtomicU64,
    /// Held while the time mark is moved forward.
    time_reserving: Mutex<()>,
    stripes: Stripes,
    metrics: Metrics,
    waiters: AtomicUsize,
    finished: (Mutex<u64>, Condvar),
    sweeper: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
    /// Where the next sweep starts: the last index entry an earlier sweep deleted (empty: the
    /// start). Held for the whole sweep, so sweeps run one at a time.
    sweep_from: Mutex<Vec<u8>>,
}

/// What [`Store::execute`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Execution {
    /// This call ran the operation; its result is stored (or, for a retryable failure, the key was
    /// released).
    Ran(std::result::Result<Response, FailKind>),
    /// A stored completion, replayed.
    Replayed(Replay),
    /// A stored terminal failure, replayed.
    ReplayedFailure(Replay),
    /// Another caller is running it; try again after this long.
    InProgress {
        /// Time until that caller's lease ends.
        retry_after: Duration,
    },
    /// The key was first used with a different fingerprint.
    Mismatch,
    /// The operation ran but its lease was taken over meanwhile; its result was not stored.
    LeaseLost(LeaseLost),
}

impl Store {
    /// Opens the store described by `cfg` (see [`Config`]).
    pub fn open(cfg: Config) -> Result<Store> {
        cfg.validate()?;
        std::fs::create_dir_all(&cfg.path)
            .map_err(|e| Error::Io(format!("cannot create {}: {e}", cfg.path.display())))?;
        let (engine, created) = Engine::open(
            &cfg.path,
            &EngineOptions {
                sync: cfg.durability == crate::config::Durability::Synced,
                cache_bytes: cfg.cache_bytes,
                write_buffer_bytes: cfg.write_buffer_bytes,
                in_memory: cfg.in_memory.clone(),
                hooks: crate::schema::hooks,
                format: format::FORMAT,
            },
        )?;
        let store_id = init_meta(&engine, created)?;
        let high_water = read_meta_u64(&engine, META_FENCE, "meta/fence_high_water")?;
        // Store time resumes where it was (never earlier), whatever the clock says now.
        let time_mark = read_meta_u64(&engine, META_TIME, "meta/time_high_water")?;
        engine.observe_time(time_mark);
        let stripes = Stripes::new(cfg.lock_stripes, crate::keys::random_u128() as u64);
        let sweep_interval = cfg.sweep_interval;
        let inner = Arc::new(Inner {
            engine,
            cfg,
            store_id,
            next_fence: AtomicU64::new(high_water + 1),
            fence_reserved: AtomicU64::new(high_water),
            fence_reserving: Mutex::new(()),
            time_reserved: AtomicU64::new(time_mark),
            time_reserving: Mutex::new(()),
            stripes,
            metrics: Metrics::default(),
            waiters: AtomicUsize::new(0),
            finished: (Mutex::new(0), Condvar::new()),
            sweeper: Mutex::new(None),
            sweep_from: Mutex::new(Vec::new()),
        });
        let store = Store { inner };
        store.now();
        if let Some(every) = sweep_interval {
            store.start_sweeper(every);
        }
        Ok(store)
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// Claims `key` of `tenant` for a request with this `fingerprint`. Exactly one of any number
    /// of concurrent claimers acquires; the others see [`Claim::InProgress`] or the stored result.
    pub fn claim(
        &self,
        tenant: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
        fingerprint: impl AsRef<[u8]>,
        opts: ClaimOptions,
    ) -> Result<Claim> {
        self.claim_in(
            Namespace::Requests,
            tenant.as_ref(),
            key.as_ref(),
            fingerprint.as_ref(),
            opts,
        )
    }

    pub(crate) fn claim_in(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        opts: ClaimOptions,
    ) -> Result<Claim> {
        self.check_names(tenant, key)?;
        if fingerprint.len() > MAX_FINGERPRINT_LEN {
            return Err(InvalidInput::TooLarge {
                what: "fingerprint",
                len: fingerprint.len(),
                max: MAX_FINGERPRINT_LEN,
            }
            .into());
        }
        let cfg = &self.inner.cfg;
        let lease_d = opts.lease.unwrap_or(cfg.lease);
        let retention_d = opts.retention.unwrap_or(cfg.retention);
        check_duration("lease", lease_d, cfg.max_lease)?;
        check_duration("retention", retention_d, cfg.max_retention)?;
        if lease_d > retention_d {
            return Err(InvalidInput::Duration {
                what: "lease",
                reason: format!("{lease_d:?} is longer than the retention {retention_d:?}"),
            }
            .into());
        }
        let (lease_ms, retention_ms) = (duration_millis(lease_d), duration_millis(retention_d));
        let m = &self.inner.metrics;

        let rkey = format::record_key(ns, tenant, key);
        let answered = |answer: Claim| {
            if matches!(answer, Claim::InProgress { .. }) {
                Metrics::bump(&m.in_progress);
            }
            Ok(answer)
        };
        // Read first without the stripe lock. An answer that writes nothing (a replay, a mismatch,
        // in progress) is given from that read and takes effect at it. A claim that acquires
        // locks the stripe and keeps the read if nothing was written under the stripe since (the
        // usual case), or reads again under the lock.
        let noted = self.inner.stripes.note(&rkey);
        let now = self.now();
        let found = match self.inspect(&rkey, fingerprint, now)? {
            Inspected::Answer(answer) => return answered(answer),
            found => found,
        };
        let (mut stripe, unchanged) = self.inner.stripes.lock_noted(noted);
        let (now, found) = if unchanged {
            (now, found)
        } else {
            let now = self.now();
            (now, self.inspect(&rkey, fingerprint, now)?)
        };
        let lease_until = now.saturating_add(lease_ms);
        let (old_slot, old) = match found {
            Inspected::Answer(answer) => return answered(answer),
            Inspected::Absent => (None, None),
            Inspected::Expired(slot) => {
                Metrics::bump(&m.expired);
                (Some(slot), None)
            }
            Inspected::Open(rec) => (Some(rec.index_slot()), Some(rec)),
        };
        let mut takeover = false;
        let new = match old {
            None => Record {
                expires_at: now.saturating_add(retention_ms),
                fingerprint: fingerprint.to_vec(),
                created_at: now,
                fence: self.next_fence()?,
                attempts: 1,
                takeovers: 0,
                checkpoint: None,
                state: State::Pending { lease_until },
            },
            Some(mut rec) => {
                // Released for a retry, or a lease that ran out: acquire (a takeover).
                takeover = matches!(rec.state, State::Pending { .. });
                rec.expires_at = rec.expires_at.max(lease_until);
                rec.fence = self.next_fence()?;
                rec.attempts = rec.attempts.saturating_add(1);
                rec.takeovers += u32::from(takeover);
                rec.state = State::Pending { lease_until };
                rec
            }
        };
        self.write_record(&rkey, old_slot, &new)?;
        let lease = Lease {
            tenant: tenant.to_vec(),
            key: key.to_vec(),
            fence: new.fence,
            until: lease_until,
            attempt: new.attempts,
            takeover,
            checkpoint: new.checkpoint.clone(),
            store_id: self.inner.store_id,
            ns,
        };
        stripe.written(&rkey, new);
        drop(stripe);
        Metrics::bump(&m.acquired);
        if takeover {
            Metrics::bump(&m.takeover);
        }
        Ok(Claim::Acquired(lease))
    }

    /// Stores `response` as the result of the leased operation. Later claims replay it.
    pub fn complete(
        &self,
        lease: &Lease,
        response: Response,
    ) -> Result<std::result::Result<(), LeaseLost>> {
        self.check_size("response", response.size())?;
        let r = self.with_lease(lease, |rec, now| {
            rec.complete(response, now);
            Ok(())
        })?;
        if r.is_ok() {
            Metrics::bump(&self.inner.metrics.completed);
        }
        Ok(r)
    }

    /// Ends the leased operation as failed: either releases the key for a retry or stores a
    /// terminal failure that later claims replay.
    pub fn fail(
        &self,
        lease: &Lease,
        kind: FailKind,
    ) -> Result<std::result::Result<(), LeaseLost>> {
        if let FailKind::Terminal(resp) = &kind {
            self.check_size("failure", resp.size())?;
        }
        let terminal = matches!(kind, FailKind::Terminal(_));
        let r = self.with_lease(lease, |rec, now| {
            rec.fail(kind, now);
            Ok(())
        })?;
        if r.is_ok() {
            let m = &self.inner.metrics;
            Metrics::bump(if terminal {
                &m.failed_terminal
            } else {
                &m.failed_retryable
            });
        }
        Ok(r)
    }

    /// Extends the lease to `extra` from now (and the record's retention if it would end
    /// sooner). Updates `lease` in place.
    pub fn renew(
        &self,
        lease: &mut Lease,
        extra: Duration,
    ) -> Result<std::result::Result<(), LeaseLost>> {
        check_duration("renewal", extra, self.inner.cfg.max_lease)?;
        let extra_ms = duration_millis(extra);
        let r = self.with_lease(lease, |rec, now| {
            let until = now.saturating_add(extra_ms);
            rec.state = State::Pending { lease_until: until };
            rec.expires_at = rec.expires_at.max(until);
            Ok(until)
        })?;
        Ok(r.map(|until| {
            lease.until = until;
            Metrics::bump(&self.inner.metrics.renewed);
        }))
    }

    /// Stores a recovery point. Whoever acquires the key after this holder crashes or fails
    /// retryably receives it in [`Lease::checkpoint`].
    pub fn checkpoint(
        &self,
        lease: &Lease,
        phase: impl Into<String>,
        state: impl Into<Vec<u8>>,
    ) -> Result<std::result::Result<(), LeaseLost>> {
        let cp = Checkpoint {
            phase: phase.into(),
            state: state.into(),
        };
        self.check_size("checkpoint", cp.phase.len() + cp.state.len())?;
        let r = self.with_lease(lease, |rec, _| {
            rec.checkpoint = Some(cp);
            Ok(())
        })?;
        if r.is_ok() {
            Metrics::bump(&self.inner.metrics.checkpointed);
        }
        Ok(r)
    }

    /// Claims, runs `f` if acquired, stores its result, and returns what happened. A duplicate
    /// that arrives while another thread of this process runs the same key waits up to
    /// [`Config::duplicate_wait`] for its result. If `f` panics the key is released for a retry
    /// and the panic continues.
    pub fn execute<F>(
        &self,
        tenant: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
        fingerprint: impl AsRef<[u8]>,
        f: F,
    ) -> Result<Execution>
    where
        F: FnOnce(&Lease) -> std::result::Result<Response, FailKind>,
    {
        let (tenant, key, fingerprint) = (tenant.as_ref(), key.as_ref(), fingerprint.as_ref());
        let mut budget = self.inner.cfg.duplicate_wait;
        let lease = loop {
            match self.claim(tenant, key, fingerprint, ClaimOptions::default())? {
                Claim::Acquired(l) => break l,
                Claim::Completed(r) => return Ok(Execution::Replayed(r)),
                Claim::Failed(r) => return Ok(Execution::ReplayedFailure(r)),
                Claim::Mismatch => return Ok(Execution::Mismatch),
                Claim::InProgress { retry_after } => {
                    if budget.is_zero() {
                        return Ok(Execution::InProgress { retry_after });
                    }
                    let slice = budget.min(Duration::from_millis(20)).min(retry_after);
                    budget = budget.saturating_sub(slice);
                    self.wait_for_finish(slice);
                }
            }
        };
        let result = match catch_unwind(AssertUnwindSafe(|| f(&lease))) {
            Ok(r) => r,
            Err(panic) => {
                let _ = self.fail(&lease, FailKind::Retryable);
                resume_unwind(panic);
            }
        };
        let stored = match &result {
            Ok(resp) => self.complete(&lease, resp.clone())?,
            Err(kind) => self.fail(&lease, kind.clone())?,
        };
        Ok(match stored {
            Ok(()) => Execution::Ran(result),
            Err(lost) => Execution::LeaseLost(lost),
        })
    }

    /// An operator's view of a record, or `None` if absent or expired.
    pub fn get(
        &self,
        tenant: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<RecordInfo>> {
        let (tenant, key) = (tenant.as_ref(), key.as_ref());
        self.check_names(tenant, key)?;
        let now = self.now();
        let rec = self.load(&format::record_key(Namespace::Requests, tenant, key))?;
        Ok(rec.filter(|r| r.expires_at > now).map(|r| r.info()))
    }

    /// Deletes a record (and its index entry), whatever its state, even if it does not decode.
    /// Returns whether anything was stored for the key. A holder of its lease gets
    /// [`LeaseLost::Gone`].
    pub fn forget(&self, tenant: impl AsRef<[u8]>, key: impl AsRef<[u8]>) -> Result<bool> {
        self.forget_in(Namespace::Requests, tenant.as_ref(), key.as_ref())
    }

    /// Deletes the record of a consumer message (see [`Store::begin`]), whatever its state, even
    /// if it does not decode: a poisoned message gets its attempts back, a processed one will be
    /// processed again if delivered again, and damaged data can be cleared. Returns whether
    /// anything was stored for it. A holder of its lease gets [`LeaseLost::Gone`].
    pub fn forget_message(
        &self,
        group: impl AsRef<[u8]>,
        message_id: impl AsRef<[u8]>,
    ) -> Result<bool> {
        self.forget_in(Namespace::Consumers, group.as_ref(), message_id.as_ref())
    }

    fn forget_in(&self, ns: Namespace, tenant: &[u8], key: &[u8]) -> Result<bool> {
        self.check_names(tenant, key)?;
        let rkey = format::record_key(ns, tenant, key);
        let mut stripe = self.lock(&rkey);
        stripe.forget(&rkey);
        let Some(raw) = self.inner.engine.get(Cf::Records, &rkey)? else {
            return Ok(false);
        };
        let mut batch = self.inner.engine.batch();
        batch.delete(Cf::Records, &rkey);
        if let Ok(rec) = codec::decode_record(&raw) {
            batch.delete(
                Cf::Expiry,
                &format::index_key(rec.expires_at, rec.fence, &rkey),
            );
        }
        self.inner.engine.write(batch)?;
        Metrics::bump(&self.inner.metrics.forgotten);
        self.notify_finished();
        Ok(true)
    }

    /// Deletes up to `limit` expired records, oldest expiry first, with their index entries, and
    /// drops stale index entries met on the way. Returns how many records were deleted. A record
    /// whose expiry was extended is never deleted by its old index entry.
    pub fn sweep(&self, limit: usize) -> Result<usize> {
        if limit == 0 {
            return Ok(0);
        }
        // Every entry a sweep visits is deleted, so the next sweep starts where this one stopped
        // instead of walking the deletions again until compaction drops them (the cost grew with
        // every sweep before). An entry written below that point later would have expired before
        // it was written; the compaction filter still drops it.
        let mut from = self.inner.sweep_from.lock();
        let now = self.now();
        let upper = format::index_bound(now.saturating_add(1));
        let mut entries = Vec::new();
        self.inner
            .engine
            .scan(Cf::Expiry, &from, Some(&upper), |k, _| {
                entries.push(k.to_vec());
                entries.len() < limit
            })?;
        let mut swept = 0;
        for entry in &entries {
            let mut batch = self.inner.engine.batch();
            batch.delete(Cf::Expiry, entry);
            if let Some((_, rkey)) = format::split_index_key(entry) {
                let mut stripe = self.lock(rkey);
                // Only the record's index slot matters: read it from a borrowed view.
                let slot = self.inner.engine.get_with(Cf::Records, rkey, |v| {
                    v.and_then(|b| codec::decode_record_view(b).ok())
                        .map(|rec| rec.index_slot())
                })?;
                if let Some((expires_at, fence)) = slot {
                    let is_current = format::index_key(expires_at, fence, rkey) == *entry;
                    if is_current && expires_at <= now {
                        stripe.forget(rkey);
                        batch.delete(Cf::Records, rkey);
                        swept += 1;
                    }
                }
                // Deletes of expired data need no sync: if lost, the record is still expired.
                self.inner.engine.write_buffered(batch)?;
            } else {
                self.inner.engine.write_buffered(batch)?;
            }
            from.clone_from(entry);
        }
        drop(from);
        self.inner
            .metrics
            .swept
            .fetch_add(swept as u64, Ordering::Relaxed);
        Ok(swept)
    }

    /// Flushes memtables and compacts every column family fully, so the compaction filter drops
    /// every record expired by now. Slow on large stores; for tests and maintenance windows.
    pub fn compact(&self) -> Result<()> {
        self.now();
        self.inner.engine.compact_all()
    }

    /// Syncs the write-ahead log: with [`crate::Durability::Buffered`], everything acknowledged
    /// before this call now survives power loss.
    pub fn sync(&self) -> Result<()> {
        self.inner.engine.sync_wal()
    }

    /// Outcome counters and RocksDB's estimates.
    pub fn stats(&self) -> Result<Stats> {
        let e = &self.inner.engine;
        let mut counters = self.inner.metrics.snapshot();
        counters.compaction_dropped = e.filtered(Cf::Records);
        let mut live_sst_bytes = 0;
        let mut memtable_bytes = 0;
        for cf in Cf::ALL {
            live_sst_bytes += e.int_property(cf, EngineProperty::LiveSstBytes)?;
            memtable_bytes += e.int_property(cf, EngineProperty::MemtableBytes)?;
        }
        Ok(Stats {
            counters,
            estimated_records: e.int_property(Cf::Records, EngineProperty::EstimatedKeys)?,
            estimated_index_entries: e.int_property(Cf::Expiry, EngineProperty::EstimatedKeys)?,
            live_sst_bytes,
            memtable_bytes,
        })
    }

    /// Counts the records physically present (expired or not) by iterating the records column
    /// family, and the index entries. For tests and operators; O(n).
    pub fn physical_counts(&self) -> Result<(u64, u64)> {
        let count = |cf| -> Result<u64> {
            let mut n = 0;
            self.inner.engine.scan(cf, &[], None, |_, _| {
                n += 1;
                true
            })?;
            Ok(n)
        };
        Ok((count(Cf::Records)?, count(Cf::Expiry)?))
    }

    /// The store's current time: the clock's reading, never earlier than a time the store used
    /// before, in this process or before a restart (see [`crate::Clock`]).
    pub fn now(&self) -> Millis {
        let inner = &self.inner;
        let clock = inner.cfg.clock.now_millis();
        let t = if clock <= inner.time_reserved.load(Ordering::Acquire) {
            clock
        } else {
            self.reserve_time(clock)
        };
        // The largest time seen (also the compaction cut-off): never past the durable mark.
        inner.engine.observe_time(t)
    }

    /// Moves the durable time mark to `t + TIME_STEP` before time `t` is used, and returns the
    /// time that may be used: `t`, or the old mark if that write failed (leases and records then
    /// last longer, never shorter, until a later call writes it).
    #[cold]
    fn reserve_time(&self, t: Millis) -> Millis {
        let inner = &self.inner;
        let _reserving = inner.time_reserving.lock();
        let reserved = inner.time_reserved.load(Ordering::Acquire);
        if t <= reserved {
            return t;
        }
        let mark = t.saturating_add(TIME_STEP);
        let mut batch = inner.engine.batch();
        batch.put(Cf::Meta, META_TIME, &mark.to_be_bytes());
        if inner.engine.write(batch).is_err() {
            return reserved;
        }
        inner.time_reserved.store(mark, Ordering::Release);
        // As for the fence reservation: a flushed `meta` lets the WAL files behind it go.
        let _ = inner.engine.flush_in_background(Cf::Meta);
        t
    }

    /// Stops the background sweeper, syncs the WAL and closes the database, so that the directory
    /// can be reopened as soon as this returns `Ok`. Dropping the last handle does the same
    /// without reporting errors. If other handles of this store are alive (clones held by other
    /// threads, the HTTP layer, a consumer), nothing is closed: this handle is dropped, the
    /// others keep working, and the call returns [`Error::InUse`]; the database closes when the
    /// last of them is dropped.
    pub fn close(self) -> Result<()> {
        // The sweeper holds the store only while it sweeps: stop it first so it is not counted.
        self.stop_sweeper();
        let other_handles = Arc::strong_count(&self.inner) - 1;
        if other_handles > 0 {
            if let Some(every) = self.inner.cfg.sweep_interval {
                self.start_sweeper(every);
            }
            return Err(Error::InUse { other_handles });
        }
        self.inner.engine.sync_wal()?;
        drop(self);
        Ok(())
    }

    /// Issues a fencing token. A token above the reserved block first reserves the next block:
    /// the high-water mark is written (with the store's durability) before the token is handed
    /// out, so every record carrying a token follows, in the WAL, a high-water mark at or above
    /// it, and a reopened store never issues it again.
    fn next_fence(&self) -> Result<u64> {
        let inner = &self.inner;
        let fence = inner.next_fence.fetch_add(1, Ordering::Relaxed);
        if fence <= inner.fence_reserved.load(Ordering::Acquire) {
            return Ok(fence);
        }
        let _reserving = inner.fence_reserving.lock();
        if fence > inner.fence_reserved.load(Ordering::Acquire) {
            let upto = fence.saturating_add(FENCE_BLOCK);
            let mut batch = inner.engine.batch();
            batch.merge(Cf::Meta, META_FENCE, &upto.to_be_bytes());
            inner.engine.write(batch)?;
            inner.fence_reserved.store(upto, Ordering::Release);
            // The reservation is durable through the WAL already; flushing it lets the WAL files
            // behind it be deleted (nothing else writes to `meta` for another block). A failed
            // request only delays that until `max_total_wal_size` forces the flush.
            let _ = inner.engine.flush_in_background(Cf::Meta);
        }
        Ok(fence)
    }

    /// Reads a sealed bincode value from the versions CF, or the type's default if absent.
    pub(crate) fn load_sealed<T: serde::de::DeserializeOwned + Default>(
        &self,
        what: &'static str,
        key: &[u8],
    ) -> Result<T> {
        match self.inner.engine.get(Cf::Versions, key)? {
            None => Ok(T::default()),
            Some(b) => format::unseal_bincode(what, &b),
        }
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Locks the stripes of several keys, in stripe order (so two callers never deadlock), each
    /// stripe once.
    pub(crate) fn lock_many<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> Locked<'_> {
        self.inner.stripes.lock_many(keys)
    }

    /// Locks the stripe of `rkey`.
    pub(crate) fn lock(&self, rkey: &[u8]) -> StripeGuard<'_> {
        self.inner.stripes.lock(rkey)
    }

    /// The record of `rkey` as its stripe (held by the caller) remembers it, taken out, or else
    /// as stored. The caller writes the record or leaves it unchanged, so taking it is safe.
    pub(crate) fn take_or_load(&self, stripe: &mut Stripe, rkey: &[u8]) -> Result<Option<Record>> {
        match stripe.take(rkey) {
            Some(rec) => Ok(Some(rec)),
            None => self.load(rkey),
        }
    }

    /// What a claim would answer when the record is final (completed or failed, replayed) or
    /// bound to another fingerprint (mismatch), read without the stripe lock and without writing:
    /// such an answer cannot change until the record expires or is forgotten, so it is the one a
    /// locked claim would give at this instant. `None` when only a claim can decide (absent,
    /// pending, released, expired, or arguments a claim would reject). Used by the HTTP layer.
    #[cfg(feature = "http")]
    pub(crate) fn peek_final(
        &self,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
    ) -> Result<Option<Claim>> {
        if self.check_names(tenant, key).is_err() || fingerprint.len() > MAX_FINGERPRINT_LEN {
            return Ok(None);
        }
        let now = self.now();
        Ok(
            match self.inspect(
                &format::record_key(Namespace::Requests, tenant, key),
                fingerprint,
                now,
            )? {
                Inspected::Answer(Claim::InProgress { .. }) => None,
                Inspected::Answer(answer) => Some(answer),
                _ => None,
            },
        )
    }

    /// Reads the record of `rkey` at `now` for a claim with `fingerprint`: the claim's answer when
    /// the stored record alone decides it (mismatch, replay, in progress), decoded from a borrowed
    /// view so that only the answer is allocated; otherwise what the claim must decide on. Shared
    /// by the claim (before and, if the stripe saw a write meanwhile, again under the stripe) and
    /// the HTTP layer's peek, so both answer alike. Counts mismatches and replays; the caller
    /// counts an in-progress answer if it gives one.
    fn inspect(&self, rkey: &[u8], fingerprint: &[u8], now: Millis) -> Result<Inspected> {
        let m = &self.inner.metrics;
        self.inner.engine.get_with(Cf::Records, rkey, |v| {
            let Some(bytes) = v else {
                return Ok(Inspected::Absent);
            };
            let view = codec::decode_record_view(bytes)?;
            if view.expires_at <= now {
                return Ok(Inspected::Expired(view.index_slot()));
            }
            if view.fingerprint != fingerprint {
                Metrics::bump(&m.mismatch);
                return Ok(Inspected::Answer(Claim::Mismatch));
            }
            let replay = |response: ResponseView<'_>, at| {
                Metrics::bump(&m.replayed);
                Replay {
                    response: response.into_response(),
                    finished_at: at,
                }
            };
            Ok(Inspected::Answer(match view.state {
                StateView::Completed { response, at } => Claim::Completed(replay(response, at)),
                StateView::Failed { response, at } => Claim::Failed(replay(response, at)),
                StateView::Pending { lease_until } if lease_until > now => Claim::InProgress {
                    retry_after: Duration::from_millis(lease_until - now),
                },
                // Released, or a lease that ran out: the claim acquires, from the full record.
                StateView::Pending { .. } | StateView::Released => {
                    return codec::decode_record(bytes).map(Inspected::Open)
                }
            }))
        })?
    }

    pub(crate) fn load(&self, rkey: &[u8]) -> Result<Option<Record>> {
        self.inner.engine.get_with(Cf::Records, rkey, |v| {
            v.map(codec::decode_record).transpose()
        })?
    }

    /// Writes `new` for `rkey` in one batch (see [`add_record`]).
    fn write_record(&self, rkey: &[u8], old: Option<(Millis, u64)>, new: &Record) -> Result<()> {
        let mut batch = self.inner.engine.batch();
        add_record(&mut batch, rkey, old, new)?;
        self.inner.engine.write(batch)
    }
}

/// Adds `new` for `rkey` to a batch: the record and its index entry (replacing the entry at the
/// old record's index slot if expiry or fence changed).
pub(crate) fn add_record(
    batch: &mut crate::engine::Batch<'_>,
    rkey: &[u8],
    old: Option<(Millis, u64)>,
    new: &Record,
) -> Result<()> {
    batch.put(Cf::Records, rkey, &codec::encode_record(new)?);
    if old != Some(new.index_slot()) {
        if let Some((expires_at, fence)) = old {
            batch.delete(Cf::Expiry, &format::index_key(expires_at, fence, rkey));
        }
        batch.put(
            Cf::Expiry,
            &format::index_key(new.expires_at, new.fence, rkey),
            &[],
        );
    }
    Ok(())
}

/// Whether `lease` is the current holder of `rec` at `now`; `Ok` carries the record to change.
pub(crate) fn check_holder(
    rec: Option<Record>,
    lease: &Lease,
    now: Millis,
) -> std::result::Result<Record, LeaseLost> {
    let Some(rec) = rec.filter(|r| r.expires_at > now) else {
        return Err(LeaseLost::Gone);
    };
    match rec.state {
        State::Completed { .. } | State::Failed { .. } => Err(LeaseLost::Finished),
        State::Released => Err(LeaseLost::Released),
        State::Pending { .. } if rec.fence != lease.fence => Err(LeaseLost::TakenOver {
            current_fence: rec.fence,
        }),
        State::Pending { .. } => Ok(rec),
    }
}

impl Store {
    fn with_lease<T>(
        &self,
        lease: &Lease,
        f: impl FnOnce(&mut Record, Millis) -> Result<T>,
    ) -> Result<std::result::Result<T, LeaseLost>> {
        self.check_lease_store(lease)?;
        let rkey = lease.record_key();
        let mut stripe = self.lock(&rkey);
        let now = self.now();
        let mut rec = match check_holder(self.take_or_load(&mut stripe, &rkey)?, lease, now) {
            Ok(rec) => rec,
            Err(lost) => {
                Metrics::bump(&self.inner.metrics.lease_lost);
                return Ok(Err(lost));
            }
        };
        let slot = rec.index_slot();
        let out = f(&mut rec, now)?;
        self.write_record(&rkey, Some(slot), &rec)?;
        let finished = !matches!(rec.state, State::Pending { .. });
        stripe.written(&rkey, rec);
        drop(stripe);
        if finished {
            self.notify_finished();
        }
        Ok(Ok(out))
    }

    pub(crate) fn check_lease_store(&self, lease: &Lease) -> Result<()> {
        if lease.store_id != self.inner.store_id {
            return Err(Error::ForeignLease);
        }
        Ok(())
    }

    pub(crate) fn check_names(&self, tenant: &[u8], key: &[u8]) -> Result<()> {
        let cfg = &self.inner.cfg;
        for (field, v, max) in [
            ("tenant", tenant, cfg.max_tenant_len),
            ("key", key, cfg.max_key_len),
        ] {
            if v.is_empty() {
                return Err(InvalidInput::Empty { field }.into());
            }
            if v.len() > max {
                return Err(InvalidInput::TooLong {
                    field,
                    len: v.len(),
                    max,
                }
                .into());
            }
        }
        Ok(())
    }

    pub(crate) fn check_size(&self, what: &'static str, len: usize) -> Result<()> {
        let max = self.inner.cfg.max_response_bytes;
        if len > max {
            return Err(InvalidInput::TooLarge { what, len, max }.into());
        }
        Ok(())
    }

    /// Refuses a value of `len` encoded bytes that would pass the store's value limit
    /// (`max_response_bytes`) with [`InvalidInput::LimitReached`].
    pub(crate) fn check_bounded(
        &self,
        what: &'static str,
        len: usize,
        hint: &'static str,
    ) -> Result<()> {
        let limit = self.inner.cfg.max_response_bytes;
        if len > limit {
            return Err(InvalidInput::LimitReached { what, limit, hint }.into());
        }
        Ok(())
    }

    pub(crate) fn notify_finished(&self) {
        if self.inner.waiters.load(Ordering::SeqCst) > 0 {
            let (m, cv) = &self.inner.finished;
            *m.lock() += 1;
            cv.notify_all();
        }
    }

    fn wait_for_finish(&self, at_most: Duration) {
        let (m, cv) = &self.inner.finished;
        self.inner.waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = m.lock();
        let _ = cv.wait_for(&mut g, at_most);
        drop(g);
        self.inner.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    fn start_sweeper(&self, every: Duration) {
        let (tx, rx) = mpsc::channel::<()>();
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let handle = std::thread::Builder::new()
            .name("idemdb-sweeper".into())
            .spawn(move || loop {
                match rx.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let Some(inner) = weak.upgrade() else { return };
                let store = Store { inner };
                // A failed sweep is retried next time; expired records stay invisible meanwhile.
                while matches!(store.sweep(10_000), Ok(n) if n == 10_000) {}
            });
        if let Ok(h) = handle {
            *self.inner.sweeper.lock() = Some((tx, h));
        }
    }

    fn stop_sweeper(&self) {
        self.inner.stop_sweeper();
    }
}

impl Inner {
    fn stop_sweeper(&self) {
        if let Some((tx, h)) = self.sweeper.lock().take() {
            drop(tx);
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop_sweeper();
        // Closing cleanly: the next open resumes at exactly the last time used (not at the mark
        // reserved ahead of it). Best effort: if this write is lost, the mark stands, which is
        // later, never earlier.
        let used = self
            .engine
            .observe_time(0)
            .min(self.time_reserved.load(Ordering::Acquire));
        let mut batch = self.engine.batch();
        batch.put(Cf::Meta, META_TIME, &used.to_be_bytes());
        let _ = self.engine.write_buffered(batch);
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.cfg.path)
            .field("durability", &self.inner.cfg.durability)
            .finish_non_exhaustive()
    }
}

/// A `meta` integer (8 bytes, big-endian), 0 if absent.
fn read_meta_u64(engine: &Engine, key: &[u8], what: &'static str) -> Result<u64> {
    match engine.get(Cf::Meta, key)? {
        None => Ok(0),
        Some(b) => format::decode_u64(&b).ok_or_else(|| corrupted(what, "not an 8-byte integer")),
    }
}

/// Checks (or, for a new store, writes) the format marker; returns the store id.
fn init_meta(engine: &Engine, created: bool) -> Result<u128> {
    let format = engine.get(Cf::Meta, META_FORMAT)?;
    match format.as_deref() {
        Some([v]) if *v == format::FORMAT => {}
        Some(other) => {
            return Err(Error::IncompatibleFormat {
                found: format!("format marker {other:?}"),
                expected: format::FORMAT,
            })
        }
        None => {
            let mut empty = true;
            for cf in [Cf::Records, Cf::Expiry, Cf::Versions] {
                engine.scan(cf, &[], None, |_, _| {
                    empty = false;
                    false
                })?;
            }
            if !created && !empty {
                return Err(Error::IncompatibleFormat {
                    found: "data without a format marker (not an idemdb store, or its meta \
                            column family was lost)"
                        .into(),
                    expected: format::FORMAT,
                });
            }
            let id = crate::keys::random_u128();
            let mut b = engine.batch();
            b.put(Cf::Meta, META_STORE_ID, &id.to_be_bytes());
            b.put(Cf::Meta, META_FORMAT, &[format::FORMAT]);
            engine.write_synced(b)?;
            return Ok(id);
        }
    }
    let id = engine
        .get(Cf::Meta, META_STORE_ID)?
        .and_then(|b| <[u8; 16]>::try_from(b.as_slice()).ok())
        .ok_or_else(|| corrupted("meta/store_id", "missing or not 16 bytes"))?;
    Ok(u128::from_be_bytes(id))
}

/// What [`Store::inspect`] found.
enum Inspected {
    /// No record.
    Absent,
    /// An expired record (treated as absent) whose index entry is at this slot.
    Expired((Millis, u64)),
    /// The claim's answer, decided by the stored record alone.
    Answer(Claim),
    /// A live record the claim acquires (released, or its lease ran out).
    Open(Record),
}
