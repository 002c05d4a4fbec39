//! Group commit for synced writes. Invariants: a caller returns `Ok` only after a synced RocksDB
//! write that carried its batch succeeded, and with that write's error otherwise; batches of one
//! group are applied as one atomic write (so readers never see a batch before it is durable);
//! at most one leader writes at a time, and groups are applied in arrival order.
//!
//! Concurrent synced writers queue their batches; the first to find no leader becomes the leader,
//! takes the whole queue, merges it into one batch and writes it with one WAL sync while the
//! others sleep on a condition variable (no spinning, which matters on two cores). Batches that
//! arrive during that sync form the next group.

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
    /// Groups whose write failed: their ticket range, how many members have not yet read the
    /// error, and the error.
    failures: Vec<(std::ops::Range<u64>, usize, Error)>,
}

impl State {
    /// The outcome of a settled ticket; each member of a failed group reads its error once.
    fn outcome(&mut self, ticket: u64) -> Result<()> {
        let Some(i) = self
            .failures
            .iter()
            .position(|(r, _, _)| r.contains(&ticket))
        else {
            return Ok(());
        };
        let Some((_, left, e)) = self.failures.get_mut(i) else {
            return Ok(());
        };
        *left = left.saturating_sub(1);
        let e = e.clone();
        if *left == 0 {
            self.failures.swap_remove(i);
        }
        Err(e)
    }
}

impl GroupCommit {
    /// Writes `batch` as part of a group; `write` applies one (merged) batch with a WAL sync.
    pub(crate) fn write(
        &self,
        batch: WriteBatch,
        write: impl Fn(WriteBatch) -> Result<()>,
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
                let result = write_group(group, &write);
                st = self.state.lock();
                st.settled = end;
                if let Err(e) = result {
                    let members = usize::try_from(end - first).unwrap_or(usize::MAX);
                    st.failures.push((first..end, members, e));
                }
                st.leader = false;
                self.done.notify_all();
                continue;
            }
            self.done.wait(&mut st);
        }
    }
}

/// Applies a group: one merged write when the batches merge, else one write per batch (each
/// still synced, in order), so a batch format this code does not recognise costs speed, never
/// correctness.
fn write_group(
    mut group: Vec<WriteBatch>,
    write: &impl Fn(WriteBatch) -> Result<()>,
) -> Result<()> {
    if group.len() == 1 {
        return match group.pop() {
            Some(b) => write(b),
            None => Ok(()),
        };
    }
    match merge(&group) {
        Some(merged) => write(merged),
        None => group.into_iter().try_for_each(write),
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
                                return Err(Error::Io("planted".into()));
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
