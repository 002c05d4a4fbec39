//! Group commit for synced writes. Invariants: a caller returns `Ok` only after a synced RocksDB
//! write that carried its batch succeeded, and with that write's error otherwise (each caller gets
//! the outcome of the write that carried its own batch, never another batch's); batches of one
//! group are applied as one atomic write (so readers never see a batch before it is durable);
//! at most one leader writes at a time, and groups are applied in arrival order.
//!
//! Concurrent synced writers queue their batches; the first to find no leader becomes the leader,
//! takes the whole queue, merges it into one batch and writes it with one WAL sync while the
//! others sleep on a condition variable (no spinning, which matters on two cores). Batches that
//! arrive during that sync form the next group. (On PostgreSQL, the counterpart is coalescing:
//! `postgres/group_commit.rs`.)

use std::collections::HashMap;

use parking_lot::{Condvar, Mutex};
use rocksdb::WriteBatch;

use crate::error::{Error, Result};

/// Size of a RocksDB write batch header: an 8-byte sequence number and a 4-byte little-endian
/// record count (the WAL record format, stable since LevelDB: `db/write_batch.cc`).
const HEADER: usize = 12;

#[derive(Default)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Default)]
struct State {
    /// Whether a leader is writing a group now.
    leader: bool,
    /// Batches waiting for the next group, with tickets `settled + taken ..`.
    queue: Vec<WriteBatch>,
    /// The ticket the next queued batch gets.
    next_ticket: u64,
    /// Every ticket below this one is settled (written, or failed with an entry in `failures`).
    settled: u64,
    /// Settled tickets whose batch was not written, with the error of the write that carried it;
    /// each is removed when its caller reads it.
    failures: HashMap<u64, Error>,
}

impl State {
    /// The outcome of a settled ticket, read once by its caller.
    fn outcome(&mut self, ticket: u64) -> Result<()> {
        match self.failures.remove(&ticket) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl GroupCommit {
    /// Writes `batch` as part of a group; `write` applies one (merged) batch with a WAL sync.
    pub(crate) fn write(
        &self,
        batch: WriteBatch,
        write: impl Fn(WriteBatch) -> Result<()>,
    ) -> Result<()> {
        self.write_merging(batch, write, merge)
    }

    /// [`GroupCommit::write`] with the batch merge as a parameter (tests force the fallback of
    /// one write per batch with a merge that declines).
    fn write_merging(
        &self,
        batch: WriteBatch,
        write: impl Fn(WriteBatch) -> Result<()>,
        merge: impl Fn(&[WriteBatch]) -> Option<WriteBatch>,
    ) -> Result<()> {
        let mut st = self.state.lock();
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.queue.push(batch);
        loop {
            if ticket < st.settled {
                return st.outcome(ticket);
            }
            if !st.leader {
                st.leader = true;
                let group = std::mem::take(&mut st.queue);
                let (first, end) = (st.settled, st.next_ticket);
                drop(st);
                let outcomes = write_group(group, &write, &merge);
                st = self.state.lock();
                st.settled = end;
                for (t, outcome) in (first..end).zip(outcomes) {
                    if let Err(e) = outcome {
                        st.failures.insert(t, e);
                    }
                }
                st.leader = false;
                self.done.notify_all();
                continue;
            }
            self.done.wait(&mut st);
        }
    }
}

/// Applies a group and returns each batch's outcome, in order: one merged write when the batches
/// merge (one outcome shared by all: the write is atomic), else one write per batch (each still
/// synced, in order, each with its own outcome), so a batch format this code does not recognise
/// costs speed, never correctness.
fn write_group(
    mut group: Vec<WriteBatch>,
    write: &impl Fn(WriteBatch) -> Result<()>,
    merge: &impl Fn(&[WriteBatch]) -> Option<WriteBatch>,
) -> Vec<Result<()>> {
    if group.len() == 1 {
        return group.pop().map(write).into_iter().collect();
    }
    match merge(&group) {
        Some(merged) => {
            let outcome = write(merged);
            vec![outcome; group.len()]
        }
        None => group.into_iter().map(write).collect(),
    }
}

/// Concatenates write batches into one, as RocksDB's own `WriteBatchInternal::Append` does: the
/// first header, every batch's records, and the summed record count. `None` if a batch does not
/// have the expected layout.
pub(crate) fn merge(batches: &[WriteBatch]) -> Option<WriteBatch> {
    let total: usize = batches.iter().map(|b| b.data().len()).sum();
    let mut rep = Vec::with_capacity(total);
    let mut count: u32 = 0;
    for b in batches {
        let data = b.data();
        let head = data.get(..HEADER)?;
        let records = data.get(HEADER..)?;
        let n = u32::from_le_bytes(head.get(8..HEADER)?.try_into().ok()?);
        if rep.is_empty() {
            rep.extend_from_slice(head);
        }
        rep.extend_from_slice(records);
        count = count.checked_add(n)?;
    }
    rep.get_mut(8..HEADER)?
        .copy_from_slice(&count.to_le_bytes());
    Some(WriteBatch::from_data(&rep))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn merged_batch_applies_every_record_of_every_batch() {
        let dir = tempfile::tempdir().unwrap();
        let db = rocksdb::DB::open_default(dir.path()).unwrap();
        let mut batches = Vec::new();
        for i in 0..5u8 {
            let mut b = WriteBatch::default();
            b.put([i], [i; 3]);
            b.put([i, i], [i; 300]);
            if i == 3 {
                b.delete([0u8]);
            }
            batches.push(b);
        }
        let merged = merge(&batches).unwrap();
        assert_eq!(merged.len(), 11);
        db.write(merged).unwrap();
        assert_eq!(
            db.get([0u8]).unwrap(),
            None,
            "the delete applies after the put, in order"
        );
        for i in 1..5u8 {
            assert_eq!(db.get([i]).unwrap(), Some(vec![i; 3]));
            assert_eq!(db.get([i, i]).unwrap(), Some(vec![i; 300]));
        }
    }

    #[test]
    fn every_writer_returns_once_its_group_is_written_and_failures_reach_their_group_only() {
        let group = Arc::new(GroupCommit::default());
        let written = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8u8)
            .map(|t| {
                let (group, written) = (group.clone(), written.clone());
                std::thread::spawn(move || {
                    let mut failed = 0;
                    for i in 0..200u8 {
                        let mut b = WriteBatch::default();
                        b.put([t, i], [i]);
                        // A batch whose key ends in 13 makes its whole group fail.
                        let r = group.write(b, |b| {
                            let mut count = Counter(0, false);
                            b.iterate(&mut count);
                            if count.1 {
                                return Err(Error::Engine("planted".into()));
                            }
                            written.fetch_add(count.0, Ordering::SeqCst);
                            Ok(())
                        });
                        if r.is_err() {
                            failed += 1;
                        }
                    }
                    failed
                })
            })
            .collect();
        let failed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        // Every batch was written or reported failed, exactly once.
        assert_eq!(written.load(Ordering::SeqCst) + failed, 8 * 200);
        assert!(failed >= 8, "each thread's planted batch failed");
        assert!(
            group.state.lock().failures.is_empty(),
            "every error was read"
        );
    }

    #[test]
    fn fallback_gives_each_writer_the_outcome_of_its_own_batch() {
        // Writer 0 leads a group alone and is held inside its write until five more writers
        // queued; they form the next group, written one batch at a time (the merge declines),
        // where the batch with key 13 fails: only its own writer may get the error.
        let group = Arc::new(GroupCommit::default());
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(parking_lot::Mutex::new(held));
        let holding = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spawn = |i: u8| {
            let (group, held, holding) = (group.clone(), held.clone(), holding.clone());
            std::thread::spawn(move || {
                let mut b = WriteBatch::default();
                b.put([if i == 0 { 0 } else { 10 + i }], [i]);
                let r = group.write_merging(
                    b,
                    |b| match first_key(&b) {
                        Some(0) => {
                            holding.store(true, Ordering::SeqCst);
                            let _ = held.lock().recv();
                            Ok(())
                        }
                        Some(13) => Err(Error::Engine("planted".into())),
                        _ => Ok(()),
                    },
                    |_| None,
                );
                (i, r.is_ok())
            })
        };
        let mut threads = vec![spawn(0)];
        while !holding.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        threads.extend((1..6).map(spawn));
        while group.state.lock().queue.len() < 5 {
            std::thread::yield_now();
        }
        release.send(()).unwrap();
        for t in threads {
            let (i, ok) = t.join().unwrap();
            assert_eq!(ok, i != 3, "writer {i} got the outcome of another batch");
        }
        assert!(
            group.state.lock().failures.is_empty(),
            "every error was read"
        );
    }

    fn first_key(b: &WriteBatch) -> Option<u8> {
        struct First(Option<u8>);
        impl rocksdb::WriteBatchIterator for First {
            fn put(&mut self, key: &[u8], _: &[u8]) {
                if self.0.is_none() {
                    self.0 = key.first().copied();
                }
            }
            fn delete(&mut self, _: &[u8]) {}
        }
        let mut f = First(None);
        b.iterate(&mut f);
        f.0
    }

    /// Counts a batch's puts and notes whether one of them is the planted failure.
    struct Counter(usize, bool);
    impl rocksdb::WriteBatchIterator for Counter {
        fn put(&mut self, key: &[u8], _: &[u8]) {
            self.0 += 1;
            if key.get(1) == Some(&13) {
                self.1 = true;
            }
        }
        fn delete(&mut self, _: &[u8]) {}
    }
}
