//! The RocksDB boundary, the bottom floor. Invariants: this is the only module that names
//! `rocksdb`, and it imports nothing above it (only errors and the time unit): what a column family
//! holds is not its business, so the layers above hand it, per column family, the merge fold and
//! the compaction filter's test it runs ([`CfHooks`]); every column family is configured
//! explicitly (including `default`); RocksDB errors are classified here, once; the callbacks it
//! installs only call those hooks, which must be total functions that never panic and never read
//! the clock (the filter gets its cut-off from an atomic the store updates).

use std::ffi::CStr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};
use rocksdb::{
    BlockBasedOptions, BottommostLevelCompaction, Cache, ColumnFamilyDescriptor, CompactOptions,
    DBCompressionType, DataBlockIndexType, ErrorKind, FlushOptions, LogLevel, Options, ReadOptions,
    WriteBatch, WriteOptions, DB,
};

mod group_commit;

use crate::clock::Millis;
use crate::error::{Error, Result};

/// The column families, in the order they are opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Cf {
    Default,
    Records,
    Versions,
    Expiry,
    Meta,
}

impl Cf {
    pub(crate) const ALL: [Cf; 5] = [Cf::Default, Cf::Records, Cf::Versions, Cf::Expiry, Cf::Meta];

    pub(crate) const fn name(self) -> &'static str {
        match self {
            Cf::Default => "default",
            Cf::Records => "records",
            Cf::Versions => "versions",
            Cf::Expiry => "expiry",
            Cf::Meta => "meta",
        }
    }
}

/// A merge fold: the value of `key` from its existing value (if any) and its operands, in order.
pub(crate) type MergeFn = fn(key: &[u8], existing: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8>;

/// A compaction filter's test: whether `(key, value)` may be dropped at cut-off time `cutoff`.
pub(crate) type ExpiredFn = fn(key: &[u8], value: &[u8], cutoff: Millis) -> bool;

/// What the layers above run inside RocksDB for one column family. Both must be total,
/// deterministic, panic-free and clock-free (a panic in a RocksDB callback aborts the process; a
/// failed merge turns the database read-only).
#[derive(Clone, Copy, Default)]
pub(crate) struct CfHooks {
    /// The merge operator's name (stored in RocksDB's OPTIONS file: never rename) and fold.
    pub merge: Option<(&'static str, MergeFn)>,
    /// The compaction filter: an entry for which it says `true` is dropped.
    pub expired: Option<ExpiredFn>,
}

/// What the engine needs from the layers above.
pub(crate) struct EngineOptions {
    /// Sync the WAL on every [`Engine::write`] (through group commit).
    pub sync: bool,
    pub cache_bytes: usize,
    pub write_buffer_bytes: usize,
    /// Keep every file in this in-memory environment instead of on disk (tests and fuzzing only;
    /// see [`MemEnv`]).
    pub in_memory: Option<MemEnv>,
    /// The hooks of each column family.
    pub hooks: fn(Cf) -> CfHooks,
    /// The store format this build writes, named when a directory holds something else.
    pub format: u8,
    /// Open as a read-only follower (a RocksDB secondary instance) of a database another process
    /// may hold open; every write is refused with [`Error::ReadOnly`].
    pub read_only: bool,
}

/// RocksDB's in-memory environment (`NewMemEnv`): files live in a map owned by the environment,
/// threads and the clock are the default environment's. Clones share the same files, so a store
/// reopened with a clone finds what the previous one wrote; nothing reaches the disk. For tests
/// and the fuzz targets only (exposed, opaque, as `idemdb::__internal::InMemory`).
#[derive(Clone)]
pub(crate) struct MemEnv(rocksdb::Env);

impl MemEnv {
    /// A new, empty in-memory environment.
    #[cfg_attr(not(any(test, feature = "__internal")), allow(dead_code))]
    pub(crate) fn new() -> Result<Self> {
        rocksdb::Env::mem_env().map(Self).map_err(classify)
    }
}

/// Turns a RocksDB error into ours. The only place that looks at RocksDB error kinds.
fn classify(e: rocksdb::Error) -> Error {
    let msg = e.to_string();
    match e.kind() {
        ErrorKind::Busy | ErrorKind::TryAgain | ErrorKind::TimedOut | ErrorKind::Incomplete => {
            Error::Busy(msg)
        }
        ErrorKind::Corruption => Error::Corrupted {
            what: "storage engine data",
            reason: msg,
        },
        ErrorKind::IOError => crate::error::io_from_message(msg),
        _ => Error::Engine(msg),
    }
}

/// A set of writes applied atomically (all column families share one WAL).
pub(crate) struct Batch<'a> {
    engine: &'a Engine,
    inner: WriteBatch,
    missing_cf: Option<Cf>,
}

impl Batch<'_> {
    fn with_cf(&mut self, cf: Cf, f: impl FnOnce(&mut WriteBatch, &rocksdb::ColumnFamily)) {
        match self.engine.db.cf_handle(cf.name()) {
            Some(h) => f(&mut self.inner, h),
            None => self.missing_cf = Some(cf),
        }
    }
    pub(crate) fn put(&mut self, cf: Cf, key: &[u8], value: &[u8]) {
        self.with_cf(cf, |b, h| b.put_cf(h, key, value));
    }
    pub(crate) fn delete(&mut self, cf: Cf, key: &[u8]) {
        self.with_cf(cf, |b, h| b.delete_cf(h, key));
    }
    pub(crate) fn merge(&mut self, cf: Cf, key: &[u8], value: &[u8]) {
        self.with_cf(cf, |b, h| b.merge_cf(h, key, value));
    }
}

/// Refuses a batch that lost an operation to a column family that is not open.
fn check_complete(batch: &Batch<'_>) -> Result<()> {
    match batch.missing_cf {
        Some(cf) => Err(Error::Engine(format!(
            "column family {} is not open",
            cf.name()
        ))),
        None => Ok(()),
    }
}

/// The open database, its reused read and write options, and the compaction cut-off.
pub(crate) struct Engine {
    db: DB,
    write_opts: WriteOptions,
    buffered_opts: WriteOptions,
    read_opts: ReadOptions,
    /// Group commit of synced writes; `None` for a buffered store.
    group: Option<group_commit::GroupCommit>,
    /// Records and index entries that expire at or before this time may be dropped by compaction.
    cutoff: Arc<AtomicU64>,
    /// How many entries each column family's compaction filter dropped since open.
    dropped: [Arc<AtomicU64>; 5],
    /// A read-only follower's scratch directory (RocksDB's secondary path), removed on drop;
    /// `None` for a writable database.
    secondary: Option<std::path::PathBuf>,
}

pub(crate) const META_FORMAT: &[u8] = b"format";
pub(crate) const META_STORE_ID: &[u8] = b"store_id";
pub(crate) const META_FENCE: &[u8] = b"fence_high_water";
pub(crate) const META_TIME: &[u8] = b"time_high_water";

impl Engine {
    /// Opens or creates the database. Refuses directories holding column families it does not know.
    /// With `opts.in_memory`, `path` names the database inside that environment and nothing is
    /// read or written under `path` on disk (the RocksDB binding still creates the directory).
    pub(crate) fn open(path: &Path, opts: &EngineOptions) -> Result<(Self, bool)> {
        // Options carrying the environment: every file operation below goes through it.
        let env_opts = || {
            let mut o = Options::default();
            if let Some(mem) = &opts.in_memory {
                o.set_env(&mem.0);
            }
            o
        };
        let found = match &opts.in_memory {
            None if path.join("CURRENT").exists() => {
                Some(DB::list_cf(&Options::default(), path).map_err(classify)?)
            }
            None => None,
            // The in-memory environment has no files on disk to look at: ask it. Reading a
            // missing CURRENT file is the only I/O error it reports (its files never fail);
            // a database that is there but damaged reports corruption, kept as an error.
            Some(_) => match DB::list_cf(&env_opts(), path) {
                Ok(found) => Some(found),
                Err(e) if e.kind() == ErrorKind::IOError => None,
                Err(e) => return Err(classify(e)),
            },
        };
        let exists = found.is_some();
        if opts.read_only && !exists {
            return Err(Error::InvalidInput(crate::error::InvalidInput::Config(
                format!(
                    "{} holds no idemdb store to open read-only (no RocksDB CURRENT file)",
                    path.display()
                ),
            )));
        }
        if let Some(found) = found {
            if let Some(other) = found
                .iter()
                .find(|n| !Cf::ALL.iter().any(|c| c.name() == n.as_str()))
            {
                return Err(Error::IncompatibleFormat {
                    found: format!("a RocksDB database with column family {other:?}"),
                    expected: opts.format,
                });
            }
        }
        let cutoff = Arc::new(AtomicU64::new(0));
        let dropped: [Arc<AtomicU64>; 5] = Default::default();
        let cache = Cache::new_lru_cache(opts.cache_bytes);

        let mut db_opts = env_opts();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.increase_parallelism(2);
        db_opts.set_max_background_jobs(4);
        db_opts.set_bytes_per_sync(1 << 20);
        db_opts.set_max_total_wal_size(256 << 20);
        db_opts.set_log_level(LogLevel::Warn);
        db_opts.set_keep_log_file_num(4);
        if opts.in_memory.is_some() {
            // Opening loads every table of a column family with this many threads, started anew
            // on every open (16 by default: about 75 threads per open). In memory there is no I/O
            // to overlap, and the fuzz target opens a store several times per input.
            db_opts.set_max_file_opening_threads(1);
        }

        let descriptors = Cf::ALL.iter().map(|&cf| {
            let counter = dropped.get(cf as usize).cloned().unwrap_or_default();
            let o = cf_options(cf, opts, &cache, &cutoff, &counter);
            ColumnFamilyDescriptor::new(cf.name(), o)
        });
        let (db, secondary) = if opts.read_only {
            // A follower: RocksDB's secondary instance reads the primary's files and tails its
            // MANIFEST and WAL; it needs a directory of its own (for its info log) and every
            // table file open (`max_open_files` -1), and it never writes to `path`.
            db_opts.create_if_missing(false);
            db_opts.create_missing_column_families(false);
            db_opts.set_max_open_files(-1);
            // Unique among the followers alive on this machine: the process id and a counter.
            static FOLLOWERS: AtomicU64 = AtomicU64::new(0);
            let scratch = std::env::temp_dir().join(format!(
                "idemdb-follower-{}-{}",
                std::process::id(),
                FOLLOWERS.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&scratch).map_err(|e| {
                crate::error::io(format_args!("cannot create {}", scratch.display()), e)
            })?;
            let db = DB::open_cf_descriptors_as_secondary(&db_opts, path, &scratch, descriptors);
            match db {
                Ok(db) => (db, Some(scratch)),
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&scratch);
                    return Err(classify(e));
                }
            }
        } else {
            (
                DB::open_cf_descriptors(&db_opts, path, descriptors).map_err(classify)?,
                None,
            )
        };

        let mut write_opts = WriteOptions::default();
        write_opts.set_sync(opts.sync);
        let mut read_opts = ReadOptions::default();
        read_opts.set_verify_checksums(true);
        Ok((
            Self {
                db,
                write_opts,
                buffered_opts: WriteOptions::default(),
                read_opts,
                group: opts.sync.then(group_commit::GroupCommit::default),
                cutoff,
                dropped,
                secondary,
            },
            !exists,
        ))
    }

    fn cf(&self, cf: Cf) -> Result<&rocksdb::ColumnFamily> {
        self.db
            .cf_handle(cf.name())
            .ok_or_else(|| Error::Engine(format!("column family {} is not open", cf.name())))
    }

    /// Reads a value and hands the borrowed bytes to `f` (no copy).
    pub(crate) fn get_with<R>(
        &self,
        cf: Cf,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R> {
        let v = self
            .db
            .get_pinned_cf_opt(self.cf(cf)?, key, &self.read_opts)
            .map_err(classify)?;
        Ok(f(v.as_deref()))
    }

    pub(crate) fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(cf, key, |v| v.map(<[u8]>::to_vec))
    }

    /// Refuses with [`Error::ReadOnly`] if the database was opened read-only.
    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.secondary.is_some() {
            Err(Error::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// Whether the database was opened read-only (a follower).
    pub(crate) fn read_only(&self) -> bool {
        self.secondary.is_some()
    }

    /// A follower reads what the primary wrote since it opened or last caught up; a writable
    /// database has nothing to do.
    pub(crate) fn catch_up(&self) -> Result<()> {
        if self.secondary.is_some() {
            self.db.try_catch_up_with_primary().map_err(classify)?;
        }
        Ok(())
    }

    /// An empty batch.
    pub(crate) fn batch(&self) -> Batch<'_> {
        Batch {
            engine: self,
            inner: WriteBatch::default(),
            missing_cf: None,
        }
    }

    /// Applies the batch with the store's durability. Synced batches go through group commit:
    /// concurrent ones share one write and one WAL sync.
    pub(crate) fn write(&self, batch: Batch<'_>) -> Result<()> {
        self.check_writable()?;
        match &self.group {
            None => self.write_with(batch, &self.write_opts),
            Some(group) => {
                check_complete(&batch)?;
                group.write(batch.inner, |b| {
                    self.db.write_opt(b, &self.write_opts).map_err(classify)
                })
            }
        }
    }

    /// Applies the batch without syncing, whatever the store's durability.
    pub(crate) fn write_buffered(&self, batch: Batch<'_>) -> Result<()> {
        self.write_with(batch, &self.buffered_opts)
    }

    /// Applies the batch and syncs the WAL, whatever the store's durability.
    pub(crate) fn write_synced(&self, batch: Batch<'_>) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.write_with(batch, &wo)
    }

    fn write_with(&self, batch: Batch<'_>, wo: &WriteOptions) -> Result<()> {
        self.check_writable()?;
        check_complete(&batch)?;
        self.db.write_opt(batch.inner, wo).map_err(classify)
    }

    /// Visits entries of `cf` in key order from `lower` (inclusive) to `upper` (exclusive) until `f`
    /// returns false.
    pub(crate) fn scan(
        &self,
        cf: Cf,
        lower: &[u8],
        upper: Option<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(lower.to_vec());
        if let Some(u) = upper {
            ro.set_iterate_upper_bound(u.to_vec());
        }
        let mut it = self.db.raw_iterator_cf_opt(self.cf(cf)?, ro);
        it.seek(lower);
        while it.valid() {
            match (it.key(), it.value()) {
                (Some(k), Some(v)) => {
                    if !f(k, v) {
                        return Ok(());
                    }
                }
                _ => break,
            }
            it.next();
        }
        it.status().map_err(classify)
    }

    /// Raises the store's notion of now (also the compaction cut-off) to `t`, never lowering it,
    /// and returns the result: the largest time ever observed.
    pub(crate) fn observe_time(&self, t: Millis) -> Millis {
        // Most calls land in a millisecond already seen: a plain load then, so concurrent callers
        // do not fight over the cache line with read-modify-writes.
        let seen = self.cutoff.load(Ordering::Acquire);
        if t <= seen {
            return seen;
        }
        self.cutoff.fetch_max(t, Ordering::AcqRel).max(t)
    }

    /// Lowers the store's notion of now back to `t` (the test hook that empties a store, see
    /// `Core::reset`): only when nothing that depends on the old time is left.
    #[cfg(feature = "__internal")]
    pub(crate) fn reset_time(&self, t: Millis) {
        self.cutoff.store(t, Ordering::Release);
    }

    /// Records dropped by the compaction filter since open.
    pub(crate) fn filtered(&self, cf: Cf) -> u64 {
        self.dropped
            .get(cf as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Flushes memtables and compacts every column family down to the last level, so the
    /// compaction filters see every key.
    pub(crate) fn compact_all(&self) -> Result<()> {
        self.check_writable()?;
        let handles: Vec<_> = Cf::ALL.iter().map(|&c| self.cf(c)).collect::<Result<_>>()?;
        self.db
            .flush_cfs_opt(&handles, &FlushOptions::default())
            .map_err(classify)?;
        let mut co = CompactOptions::default();
        co.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
        for h in handles {
            self.db
                .compact_range_cf_opt(h, None::<&[u8]>, None::<&[u8]>, &co);
        }
        Ok(())
    }

    /// Asks RocksDB to flush `cf`'s memtable in the background, without waiting. For column
    /// families written rarely (the fence reservation in `meta`): a small memtable that is never
    /// full would otherwise keep every WAL file written since its oldest entry on disk until
    /// `max_total_wal_size` forces a flush.
    pub(crate) fn flush_in_background(&self, cf: Cf) -> Result<()> {
        self.check_writable()?;
        let mut fo = FlushOptions::default();
        fo.set_wait(false);
        self.db.flush_cf_opt(self.cf(cf)?, &fo).map_err(classify)
    }

    /// Flushes the WAL to disk (sync) so that buffered writes survive power loss from here on.
    pub(crate) fn sync_wal(&self) -> Result<()> {
        if self.read_only() {
            return Ok(()); // a follower has no WAL of its own
        }
        self.db.flush_wal(true).map_err(classify)
    }

    /// RocksDB's integer property for a column family, for example its key estimate.
    pub(crate) fn int_property(&self, cf: Cf, name: EngineProperty) -> Result<u64> {
        let prop = match name {
            EngineProperty::EstimatedKeys => rocksdb::properties::ESTIMATE_NUM_KEYS,
            EngineProperty::LiveSstBytes => rocksdb::properties::LIVE_SST_FILES_SIZE,
            EngineProperty::MemtableBytes => rocksdb::properties::CUR_SIZE_ALL_MEM_TABLES,
        };
        Ok(self
            .db
            .property_int_value_cf(self.cf(cf)?, prop)
            .map_err(classify)?
            .unwrap_or(0))
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(scratch) = &self.secondary {
            // Only the follower's own info log is in there (open files may be unlinked).
            let _ = std::fs::remove_dir_all(scratch);
            return;
        }
        let _ = self.db.flush_wal(true);
        self.db.cancel_all_background_work(true);
    }
}

/// RocksDB statistics exposed through `Stats`.
#[derive(Clone, Copy)]
pub(crate) enum EngineProperty {
    EstimatedKeys,
    LiveSstBytes,
    MemtableBytes,
}

fn cf_options(
    cf: Cf,
    opts: &EngineOptions,
    cache: &Cache,
    cutoff: &Arc<AtomicU64>,
    dropped: &Arc<AtomicU64>,
) -> Options {
    let mut o = Options::default();
    o.set_compression_type(DBCompressionType::Lz4);
    o.set_level_compaction_dynamic_level_bytes(true);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    table.set_format_version(6);
    let hooks = (opts.hooks)(cf);
    if let Some((name, fold)) = hooks.merge {
        o.set_merge_operator_associative(name, move |key, existing, operands| {
            let operands: Vec<&[u8]> = operands.iter().collect();
            Some(fold(key, existing, &operands))
        });
    }
    if let Some(expired) = hooks.expired {
        o.set_compaction_filter_factory(FilterFactory {
            cutoff: Arc::clone(cutoff),
            dropped: Arc::clone(dropped),
            expired,
        });
        // Revisit cold files every 6 hours so expired entries do not linger for 30 days.
        o.set_periodic_compaction_seconds(6 * 3600);
    }
    match cf {
        Cf::Records | Cf::Versions => {
            if hooks.merge.is_some() {
                // Fold long runs of merge operands in the memtable, so reads stay cheap.
                o.set_max_successive_merges(64);
            }
            // Point lookups, most of them misses (a new key): bloom filters in the tables and in
            // the memtable, and a hash index inside data blocks.
            table.set_bloom_filter(10.0, false);
            table.set_whole_key_filtering(true);
            table.set_data_block_index_type(DataBlockIndexType::BinaryAndHash);
            table.set_data_block_hash_ratio(0.75);
            table.set_block_size(8 << 10);
            o.set_memtable_prefix_bloom_ratio(0.05);
            o.set_memtable_whole_key_filtering(true);
            o.set_write_buffer_size(opts.write_buffer_bytes);
            o.set_max_write_buffer_number(4);
        }
        Cf::Expiry => {
            o.set_write_buffer_size(opts.write_buffer_bytes / 4);
        }
        Cf::Meta | Cf::Default => {
            o.set_write_buffer_size(4 << 20);
        }
    }
    o.set_block_based_table_factory(&table);
    o
}

/// Makes one [`Filter`] per compaction, with the cut-off of that moment.
struct FilterFactory {
    cutoff: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
    expired: ExpiredFn,
}

struct Filter {
    cutoff: Millis,
    dropped: Arc<AtomicU64>,
    expired: ExpiredFn,
}

impl CompactionFilterFactory for FilterFactory {
    type Filter = Filter;

    fn create(&mut self, _context: CompactionFilterContext) -> Filter {
        Filter {
            cutoff: self.cutoff.load(Ordering::Relaxed),
            dropped: Arc::clone(&self.dropped),
            expired: self.expired,
        }
    }

    fn name(&self) -> &CStr {
        c"idemdb.expiry_factory"
    }
}

impl CompactionFilter for Filter {
    /// Drops an entry only when the column family's hook says it expired at or before the
    /// cut-off; the hooks keep anything they cannot read, so reads report damage instead of it
    /// vanishing.
    fn filter(&mut self, _level: u32, key: &[u8], value: &[u8]) -> Decision {
        if (self.expired)(key, value, self.cutoff) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            Decision::Remove
        } else {
            Decision::Keep
        }
    }

    fn name(&self) -> &CStr {
        c"idemdb.expiry"
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn mem_opts(mem: &MemEnv) -> EngineOptions {
        EngineOptions {
            sync: false,
            cache_bytes: 1 << 20,
            write_buffer_bytes: 1 << 20,
            in_memory: Some(mem.clone()),
            hooks: |_| CfHooks::default(),
            format: 1,
            read_only: false,
        }
    }

    /// In memory, `open` asks the environment (not the disk) whether a database exists: a new one
    /// is created, the same one is found again (and its column families checked), another
    /// environment is empty, and nothing is written into the directory on disk. (The directory
    /// itself must exist: the RocksDB binding creates it on every open, whatever the environment.)
    #[test]
    fn in_memory_open_finds_what_it_created_and_checks_column_families() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let mem = MemEnv::new().unwrap();
        let (engine, created) = Engine::open(&path, &mem_opts(&mem)).unwrap();
        assert!(created);
        let mut b = engine.batch();
        b.put(Cf::Records, b"k", b"v");
        engine.write(b).unwrap();
        drop(engine);

        let (engine, created) = Engine::open(&path, &mem_opts(&mem)).unwrap();
        assert!(
            !created,
            "an existing in-memory database was not recognised"
        );
        assert_eq!(engine.get(Cf::Records, b"k").unwrap(), Some(b"v".to_vec()));
        drop(engine);

        let (engine, created) = Engine::open(&path, &mem_opts(&MemEnv::new().unwrap())).unwrap();
        assert!(created, "another environment shares files");
        assert_eq!(engine.get(Cf::Records, b"k").unwrap(), None);
        drop(engine);

        // A column family this store does not know, added by a plain RocksDB in the same
        // environment, is refused as for a database on disk.
        let mut o = Options::default();
        o.set_env(&mem.0);
        let names: Vec<_> = Cf::ALL.iter().map(|c| c.name()).collect();
        let mut db = DB::open_cf(&o, &path, names).unwrap();
        db.create_cf("foreign", &Options::default()).unwrap();
        drop(db);
        assert!(matches!(
            Engine::open(&path, &mem_opts(&mem)),
            Err(Error::IncompatibleFormat { .. })
        ));
        let on_disk: Vec<_> = std::fs::read_dir(&path).unwrap().collect();
        assert!(on_disk.is_empty(), "written to disk: {on_disk:?}");
    }
}
