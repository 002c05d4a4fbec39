//! The core: the one internal type every operation of every domain module goes through, and its
//! contract. Invariants (each domain module relies on them and keeps them):
//! - every decision that writes a key is made under that key's lock stripe ([`Core::lock`], or
//!   [`Core::lock_many`] in stripe order for several keys), from one read no older than the
//!   stripe's last write ([`Core::take_or_load`], [`Core::load`]), and written with one atomic
//!   batch ([`Core::persist_with`] and [`add_record`] carry a record and its expiry-index entry);
//! - a fencing token is handed out only after a high-water mark at or above it was written
//!   ([`Core::next_fence`]);
//! - the store's time never goes backwards, across restarts too ([`Core::now`]);
//! - arguments are checked ([`Core::check_names`], [`Core::check_size`],
//!   [`Config::check_bounded`](crate::config::Config::check_bounded),
//!   [`Core::check_lease_store`]) before anything is read or written;
//! - an expired record is treated as absent by every read;
//! - a key's in-memory record, while its stripe holds one, is that key's record above whatever is
//!   stored ([`Core::current`]); it becomes durable, and leaves memory, in the batch that writes
//!   it ([`Core::persist`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::clock::Millis;
use crate::config::Config;
use crate::embedded::codec;
use crate::embedded::engine::{
    Cf, Engine, EngineOptions, MemEnv, META_FENCE, META_FORMAT, META_STORE_ID, META_TIME,
};
use crate::embedded::stripes::{Locked, Stripe, StripeGuard, Stripes, Volatile};
use crate::embedded::waits::Finished;
use crate::error::{corrupted, Error, Result};
use crate::format;
use crate::record::{Lease, LeaseLost, Record};
use crate::requests::{lease_lost, Holding, Seen};
use crate::telemetry::counters::Metrics;

/// Store time is reserved this far ahead: `meta/time_high_water` is written (with the store's
/// durability) before the store's time passes the mark, one write per this much time. After a
/// crash the store's time resumes at the mark, up to this much ahead of the last time it used.
const TIME_STEP: Millis = 1_000;

/// `meta` is flushed when the time mark enters a new period of this length: an unflushed mark
/// keeps the WAL files written after it for at most this much store time (or until
/// `max_total_wal_size` forces a flush).
const TIME_FLUSH_EVERY: Millis = 60_000;

pub(crate) struct Core {
    pub(crate) engine: Engine,
    pub(crate) cfg: Config,
    pub(crate) store_id: u128,
    pub(crate) next_fence: AtomicU64,
    /// Every token up to this one is covered by a written `meta/fence_high_water`.
    pub(crate) fence_reserved: AtomicU64,
    /// Held while a new block of tokens is reserved.
    pub(crate) fence_reserving: Mutex<()>,
    /// The store's time never passes this mark, which is durable in `meta/time_high_water`.
    pub(crate) time_reserved: AtomicU64,
    /// Held while the time mark is moved forward.
    pub(crate) time_reserving: Mutex<()>,
    pub(crate) stripes: Stripes,
    pub(crate) metrics: Metrics,
    /// Wakes the claims waiting for a lease to end (`waits.rs`).
    pub(crate) finished: std::sync::Arc<Finished>,
    pub(crate) sweeper: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
    /// Where the next sweep starts: the last index entry an earlier sweep deleted (empty: the
    /// start). Held for the whole sweep, so sweeps run one at a time.
    pub(crate) sweep_from: Mutex<Vec<u8>>,
}

impl Core {
    /// Opens the engine and reads (or, for a new store, writes) the store's marks: format,
    /// store id, fencing-token and time high-water marks.
    pub(crate) fn open(cfg: Config) -> Result<Core> {
        cfg.validate()?;
        if !cfg.backend.read_only {
            std::fs::create_dir_all(&cfg.backend.path).map_err(|e| {
                crate::error::io(
                    format_args!("cannot create {}", cfg.backend.path.display()),
                    e,
                )
            })?;
        }
        let (engine, created) = Engine::open(
            &cfg.backend.path,
            &EngineOptions {
                sync: cfg.backend.durability == crate::config::Durability::Synced,
                cache_bytes: cfg.backend.cache_bytes,
                write_buffer_bytes: cfg.backend.write_buffer_bytes,
                in_memory: cfg
                    .backend
                    .in_memory
                    .as_ref()
                    .and_then(|e| e.0.downcast_ref::<MemEnv>())
                    .cloned(),
                hooks: crate::embedded::schema::hooks,
                format: format::FORMAT,
                read_only: cfg.backend.read_only,
            },
        )?;
        let store_id = init_meta(&engine, created)?;
        let high_water = read_meta_u64(&engine, META_FENCE, "meta/fence_high_water")?;
        // Store time resumes where it was (never earlier), whatever the clock says now.
        let time_mark = read_meta_u64(&engine, META_TIME, "meta/time_high_water")?;
        engine.observe_time(time_mark);
        let stripes = Stripes::new(cfg.backend.lock_stripes, crate::keys::random_u128() as u64);
        let core = Core {
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
            finished: std::sync::Arc::default(),
            sweeper: Mutex::new(None),
            sweep_from: Mutex::new(Vec::new()),
        };
        core.now();
        Ok(core)
    }

    /// The store's current time: the clock's reading, never earlier than a time the store used
    /// before, in this process or before a restart (see [`crate::Clock`]).
    pub fn now(&self) -> Millis {
        let inner = self;
        let clock = inner.cfg.backend.clock.now_millis();
        let t = if clock <= inner.time_reserved.load(Ordering::Acquire) || inner.engine.read_only()
        {
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
    pub(crate) fn reserve_time(&self, t: Millis) -> Millis {
        let inner = self;
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
        // As for the fence reservation, a flushed `meta` lets the WAL files behind it go; once a
        // minute of store time is enough (a flush per mark made a table file per second).
        if mark / TIME_FLUSH_EVERY != reserved / TIME_FLUSH_EVERY {
            let _ = inner.engine.flush_in_background(Cf::Meta);
        }
        t
    }

    /// Reads a sealed bincode value from the versions CF, or the type's default if absent.
    pub(crate) fn load_sealed<T: serde::de::DeserializeOwned + Default>(
        &self,
        what: &'static str,
        key: &[u8],
    ) -> Result<T> {
        match self.engine.get(Cf::Versions, key)? {
            None => Ok(T::default()),
            Some(b) => format::unseal_bincode(what, &b),
        }
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Locks the stripes of several keys, in stripe order (so two callers never deadlock), each
    /// stripe once.
    pub(crate) fn lock_many<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> Locked<'_> {
        self.stripes.lock_many(keys)
    }

    /// Locks the stripe of `rkey`.
    pub(crate) fn lock(&self, rkey: &[u8]) -> StripeGuard<'_> {
        self.stripes.lock(rkey)
    }

    /// The record of `rkey` as its stripe (held by the caller) remembers it, taken out, or else
    /// as stored. The caller writes the record or leaves it unchanged, so taking it is safe.
    pub(crate) fn take_or_load(&self, stripe: &mut Stripe, rkey: &[u8]) -> Result<Option<Record>> {
        match stripe.take(rkey) {
            Some(rec) => Ok(Some(rec)),
            None => self.load(rkey),
        }
    }

    /// The record of `rkey` under its held stripe: the in-memory one if the stripe holds one,
    /// else as remembered or stored.
    pub(crate) fn current(&self, stripe: &mut StripeGuard<'_>, rkey: &[u8]) -> Result<Current> {
        if let Some(v) = stripe.volatile(rkey) {
            return Ok(Current {
                rec: Some(v.rec.clone()),
                stored_slot: v.stored_slot,
                volatile: true,
            });
        }
        Ok(Current::stored(self.take_or_load(stripe, rkey)?))
    }

    /// Writes `rec` for `rkey` (whose stored record, if any, has its index entry at
    /// `stored_slot`) in one batch, and drops the key's in-memory record: from now on the stored
    /// one is current.
    pub(crate) fn persist(
        &self,
        stripe: &mut StripeGuard<'_>,
        rkey: &[u8],
        stored_slot: Option<(Millis, u64)>,
        rec: Record,
    ) -> Result<()> {
        self.persist_with(stripe, rkey, stored_slot, rec, true)
    }

    /// [`Core::persist`]; with `durable` false, written without waiting for a sync of the WAL
    /// whatever the store's durability (`ClaimOptions::written_pending`): the write survives a
    /// crash of the process, and the next synced write makes it durable with its own.
    pub(crate) fn persist_with(
        &self,
        stripe: &mut StripeGuard<'_>,
        rkey: &[u8],
        stored_slot: Option<(Millis, u64)>,
        rec: Record,
        durable: bool,
    ) -> Result<()> {
        let mut batch = self.engine.batch();
        add_record(&mut batch, rkey, stored_slot, &rec)?;
        if durable {
            self.engine.write(batch)?;
        } else {
            self.engine.write_buffered(batch)?;
        }
        stripe.drop_volatile(rkey);
        stripe.written(rkey, rec);
        Ok(())
    }

    /// Keeps `rec` as the in-memory record of `rkey`, above the stored record whose index entry
    /// is at `stored_slot` (if any).
    pub(crate) fn keep_in_memory(
        &self,
        stripe: &mut StripeGuard<'_>,
        rkey: &[u8],
        stored_slot: Option<(Millis, u64)>,
        rec: Record,
    ) {
        stripe.set_volatile(rkey, Volatile { rec, stored_slot });
    }

    /// Whether a new in-memory record fits under [`Config::pending_in_memory`].
    pub(crate) fn memory_room(&self) -> bool {
        self.stripes.volatile_count() < self.cfg.backend.pending_in_memory
    }

    pub(crate) fn load(&self, rkey: &[u8]) -> Result<Option<Record>> {
        self.engine.get_with(Cf::Records, rkey, |v| {
            v.map(codec::decode_record).transpose()
        })?
    }

    pub(crate) fn check_lease_store(&self, lease: &Lease) -> Result<()> {
        if lease.store_id != self.store_id {
            return Err(Error::ForeignLease);
        }
        Ok(())
    }

    pub(crate) fn check_names(&self, tenant: &[u8], key: &[u8]) -> Result<()> {
        self.cfg.common.check_names(tenant, key)
    }

    pub(crate) fn check_size(&self, what: &'static str, len: usize) -> Result<()> {
        self.cfg.common.check_size(what, len)
    }
}

/// A key's current record (see [`Core::current`]).
pub(crate) struct Current {
    pub(crate) rec: Option<Record>,
    /// Where the stored record's expiry-index entry is, if one is stored.
    pub(crate) stored_slot: Option<(Millis, u64)>,
    /// Whether `rec` is the in-memory record.
    pub(crate) volatile: bool,
}

impl Current {
    /// The key's record as stored (it has no in-memory record).
    pub(crate) fn stored(rec: Option<Record>) -> Current {
        Current {
            stored_slot: rec.as_ref().map(Record::index_slot),
            rec,
            volatile: false,
        }
    }
}

/// Adds `new` for `rkey` to a batch: the record and its index entry (replacing the entry at the
/// old record's index slot if expiry or fence changed).
pub(crate) fn add_record(
    batch: &mut crate::embedded::engine::Batch<'_>,
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

/// Whether `lease` is the current holder of `rec` at `now` (the holder rule,
/// [`crate::requests::lease_lost`]); `Ok` carries the record to change.
pub(crate) fn check_holder(
    rec: Option<Record>,
    lease: &Lease,
    now: Millis,
) -> std::result::Result<Record, LeaseLost> {
    let holding = rec.as_ref().map(|r| Holding {
        live: r.expires_at > now,
        state: Seen::of(&r.state).map(|_| ()),
        fence: r.fence,
    });
    match (lease_lost(holding, lease.fence), rec) {
        (None, Some(rec)) => Ok(rec),
        (Some(lost), _) => Err(lost),
        (None, None) => Err(LeaseLost::Gone),
    }
}

impl Core {
    /// Tests and fuzzing only: empties the store and puts its state back to a new store's (no
    /// records, entities, index entries or marks; the first fencing token 1; the store's time
    /// free to start at the clock's reading), keeping its engine open, so a fuzz target can run many inputs on one store without
    /// paying for an open per input. The caller guarantees that no other operation runs meanwhile
    /// and that no lease or handle from before is used afterwards.
    #[cfg(feature = "__internal")]
    pub(crate) fn reset(&self) -> Result<()> {
        /// Resets between two compactions of the tombstones they leave.
        const RESET_COMPACT_EVERY: u64 = 64;
        self.stop_sweeper();
        let _fence = self.fence_reserving.lock();
        let _time = self.time_reserving.lock();
        let mut sweep_from = self.sweep_from.lock();
        let mut batch = self.engine.batch();
        for cf in Cf::ALL {
            let mut keys = Vec::new();
            self.engine.scan(cf, &[], None, |k, _| {
                keys.push(k.to_vec());
                true
            })?;
            for k in keys {
                let identity = cf == Cf::Meta && (k == META_FORMAT || k == META_STORE_ID);
                if !identity {
                    batch.delete(cf, &k);
                }
            }
        }
        self.engine.write(batch)?;
        // The deletions stay in the memtables as tombstones, which every later read and the next
        // reset's scan step over: every so often they are flushed and compacted away, so that a
        // long run of resets stays as fast as its first ones.
        static RESETS: AtomicU64 = AtomicU64::new(0);
        if RESETS.fetch_add(1, Ordering::Relaxed) % RESET_COMPACT_EVERY == RESET_COMPACT_EVERY - 1 {
            self.engine.compact_all()?;
        }
        self.stripes.clear();
        sweep_from.clear();
        self.next_fence.store(1, Ordering::Release);
        self.fence_reserved.store(0, Ordering::Release);
        // The time mark stays reserved: times below it need no new mark (a new store would
        // write one at its first reading, which nothing observes but a crash), and a clean close
        // writes the exact last time used, as always.
        self.engine.reset_time(0);
        Ok(())
    }

    pub(crate) fn stop_sweeper(&self) {
        if let Some((tx, h)) = self.sweeper.lock().take() {
            drop(tx);
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Core {
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
            if engine.read_only() {
                return Err(Error::IncompatibleFormat {
                    found: "no format marker (a store never opened writable, or not an idemdb \
                            store)"
                        .into(),
                    expected: format::FORMAT,
                });
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
