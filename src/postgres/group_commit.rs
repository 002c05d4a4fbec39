//! Group commit on PostgreSQL, called coalescing (`Config::coalescing`): calls of one kind that
//! wait for the database together go to it as one statement over arrays, one transaction and one
//! WAL flush for all of them (the counterpart of the group commit the embedded engine does for
//! its synced writes, `embedded/engine/group_commit.rs`). Invariants:
//! - no batch wait, and no queue while the pool has room: a call goes at once, alone, by the
//!   one-call path ([`Turn::Alone`]) when the pool would give it a connection at once, or when no
//!   statement of its kind is in flight; only a call that would wait for the pool queues, and
//!   the queue goes as one statement when a statement of its kind ends, sent by one of at most
//!   [`Limits::in_flight`] batch tasks of the kind. So a store whose pool keeps up sends exactly
//!   what it sends without coalescing (a multi-core server runs its statements in parallel), and
//!   a store whose callers outnumber its connections sends their calls in fewer statements;
//! - one row per key in a statement: a call for a key already in the forming batch stays queued
//!   for the next one, so the database decides two calls of one key one after the other;
//! - every queued call gets its own row's answer, or the whole statement's error (a timeout, a
//!   lost connection: every call in it fails closed, as one call's statement would);
//! - a batch is sent by a task of its own, which nobody can drop: once a call is queued, it is
//!   answered, whether or not its caller is still waiting;
//! - a batch holds at most [`Limits::rows`] calls and about [`Limits::bytes`] bytes of values.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::store::PgStore;
use crate::config::fleet::CoalesceLimits as Limits;
use crate::error::{Error, Result};

/// One kind of call that can be coalesced: what a call carries, what its row answers, and the
/// statement that answers a batch of them.
pub(crate) trait Kind: Sized + Send + Sync + 'static {
    type Call: Send + 'static;
    type Answer: Send + 'static;
    /// The row's key: two calls of one key never share a statement.
    fn key(call: &Self::Call) -> (i16, &[u8], &[u8]);
    /// The bytes of values the call adds to the statement.
    fn bytes(call: &Self::Call) -> usize;
    /// This kind's queue in the store.
    fn queue(store: &PgStore) -> &Coalescer<Self>;
    /// One statement for every call in `calls`: the answers in the same order, or the
    /// statement's error.
    fn run(
        store: &PgStore,
        calls: &[Self::Call],
    ) -> impl Future<Output = Result<Vec<Self::Answer>>> + Send;
}

/// A queued call and where its answer goes.
struct Waiting<K: Kind> {
    call: K::Call,
    answer: oneshot::Sender<Result<K::Answer>>,
}

struct Queue<K: Kind> {
    /// Lone calls' statements of this kind in flight.
    alone: usize,
    /// Tasks sending batches of this kind (each one statement at a time).
    drivers: usize,
    waiting: VecDeque<Waiting<K>>,
}

/// The queue of one kind of call.
pub(crate) struct Coalescer<K: Kind> {
    queue: Mutex<Queue<K>>,
    limits: Limits,
    /// Statements of more than one row sent, and the rows they carried.
    pub(crate) batches: AtomicU64,
    pub(crate) batched_rows: AtomicU64,
}

/// How a call goes to the database.
pub(crate) enum Turn<K: Kind> {
    /// Alone, at once, by the one-call path: the pool had a connection for it, or nothing of its
    /// kind was in flight. Keep the guard until the statement has ended: dropping it hands the
    /// calls queued meanwhile to a batch.
    Alone(Lead<K>),
    /// In the next batch: its answer.
    Queued(oneshot::Receiver<Result<K::Answer>>),
}

/// The mark of a lone call in flight; dropped, it starts the batch of what queued behind it.
pub(crate) struct Lead<K: Kind> {
    store: Arc<PgStore>,
    _kind: std::marker::PhantomData<K>,
}

impl<K: Kind> Coalescer<K> {
    pub(crate) fn new(limits: Limits) -> Self {
        Coalescer {
            queue: Mutex::new(Queue {
                alone: 0,
                drivers: 0,
                waiting: VecDeque::new(),
            }),
            limits: Limits {
                rows: limits.rows.max(1),
                bytes: limits.bytes.max(1),
                in_flight: limits.in_flight.max(1),
            },
            batches: AtomicU64::new(0),
            batched_rows: AtomicU64::new(0),
        }
    }

    /// Takes the call's turn: alone if the pool has a connection for it, or nothing of its kind
    /// is in flight; else queued (`call` makes what the batch needs; a lone call never makes
    /// it).
    pub(crate) fn enter(store: &Arc<PgStore>, call: impl FnOnce() -> K::Call) -> Turn<K> {
        let c = K::queue(store);
        let room = super::pool::has_room(&store.pool);
        let mut q = c.queue.lock();
        if room || q.alone + q.drivers == 0 {
            q.alone += 1;
            return Turn::Alone(Lead {
                store: store.clone(),
                _kind: std::marker::PhantomData,
            });
        }
        let (answer, rx) = oneshot::channel();
        q.waiting.push_back(Waiting {
            call: call(),
            answer,
        });
        Turn::Queued(rx)
    }

    /// The next batch: queued calls in arrival order, skipping (and leaving queued) a call whose
    /// key is in the batch already, up to the caps (the first call always goes). Empty: nothing
    /// queued, and the calling batch task ends.
    fn next_batch(&self) -> Vec<Waiting<K>> {
        let mut q = self.queue.lock();
        let mut batch = Vec::new();
        let mut keys: HashSet<(i16, Vec<u8>, Vec<u8>)> = HashSet::new();
        let mut bytes = 0;
        let mut rest = VecDeque::new();
        while let Some(w) = q.waiting.pop_front() {
            let b = K::bytes(&w.call);
            let full = batch.len() >= self.limits.rows
                || (!batch.is_empty() && bytes + b > self.limits.bytes);
            if full {
                q.waiting.push_front(w);
                break;
            }
            let (ns, t, k) = K::key(&w.call);
            if !keys.insert((ns, t.to_vec(), k.to_vec())) {
                rest.push_back(w);
                continue;
            }
            bytes += b;
            batch.push(w);
        }
        while let Some(w) = rest.pop_back() {
            q.waiting.push_front(w);
        }
        if batch.is_empty() {
            q.drivers = q.drivers.saturating_sub(1);
        }
        batch
    }
}

impl<K: Kind> Drop for Lead<K> {
    fn drop(&mut self) {
        let c = K::queue(&self.store);
        {
            let mut q = c.queue.lock();
            q.alone = q.alone.saturating_sub(1);
            // Queued calls are sent by the batch tasks running, or by a new one.
            if q.waiting.is_empty() || q.drivers >= c.limits.in_flight {
                return;
            }
            q.drivers += 1;
        }
        // Calls queued behind this one: a task of its own sends them (and whatever queues
        // behind them), so that no caller's going away can drop a statement others wait for.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let store = self.store.clone();
                rt.spawn(drive::<K>(store));
            }
            Err(_) => {
                let mut q = c.queue.lock();
                q.drivers = q.drivers.saturating_sub(1);
                for w in q.waiting.drain(..) {
                    let _ = w.answer.send(Err(Error::unavailable(
                        "PostgreSQL: no async runtime to send the coalesced statement on",
                    )));
                }
            }
        }
    }
}

/// Sends batches until the queue is empty.
async fn drive<K: Kind>(store: Arc<PgStore>) {
    let c = K::queue(&store);
    loop {
        let batch = c.next_batch();
        if batch.is_empty() {
            return;
        }
        if batch.len() > 1 {
            c.batches.fetch_add(1, Ordering::Relaxed);
            c.batched_rows
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        let (calls, answers): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|w| (w.call, w.answer)).unzip();
        match K::run(&store, &calls).await {
            Ok(rows) if rows.len() == answers.len() => {
                for (row, answer) in rows.into_iter().zip(answers) {
                    let _ = answer.send(Ok(row));
                }
            }
            Ok(rows) => {
                let e = Error::Engine(format!(
                    "PostgreSQL: a coalesced statement of {} calls answered {} rows",
                    answers.len(),
                    rows.len()
                ));
                for answer in answers {
                    let _ = answer.send(Err(e.clone()));
                }
            }
            // A statement refused for its data (one call's bytes the server cannot take, say):
            // each call is asked again by a statement of its own, so that one caller's input
            // never fails another's call. A database away fails them all, as it would alone.
            Err(e) if answers.len() > 1 && !e.is_transient() => {
                for (i, answer) in answers.into_iter().enumerate() {
                    let alone = K::run(&store, calls.get(i..=i).unwrap_or_default()).await;
                    let _ = answer.send(match alone {
                        Ok(mut rows) if rows.len() == 1 => Ok(rows.remove(0)),
                        Ok(rows) => Err(Error::Engine(format!(
                            "PostgreSQL: a statement of one call answered {} rows",
                            rows.len()
                        ))),
                        Err(e) => Err(e),
                    });
                }
            }
            Err(e) => {
                for answer in answers {
                    let _ = answer.send(Err(e.clone()));
                }
            }
        }
    }
}

impl PgStore {
    /// Statements of more than one call sent since the store opened, and the calls they
    /// carried (claims and lease ends together).
    pub(crate) fn coalesced(&self) -> (u64, u64) {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        (
            n(&self.claims.batches) + n(&self.holders.batches),
            n(&self.claims.batched_rows) + n(&self.holders.batched_rows),
        )
    }
}

/// A queued call's answer; a batch task that ended without answering (it cannot, short of a
/// panic) fails the call closed.
pub(crate) async fn answer<A>(rx: oneshot::Receiver<Result<A>>) -> Result<A> {
    rx.await.unwrap_or_else(|_| {
        Err(Error::unavailable(
            "PostgreSQL: the coalesced statement's task ended without an answer",
        ))
    })
}
