//! The claim/CAS invariants as assertions over random concurrent runs, without the full model.
//!
//! The input is cut into rounds. In a round, 2 to 4 threads run their own short scripts at once
//! against one store (claims, completions, failures, renewals, conditional entity writes) while
//! the manual clock stands still. After the round the main thread checks what every thread saw
//! and what the store holds, then advances the clock, sometimes sweeps, compacts or reopens the
//! store, and checks the store again:
//!
//! - at most one live lease per key: within a round (time stands still) a key is acquired at most
//!   once, plus once more per retryable failure that released it, and not at all over a lease
//!   that was live or a record that was finished when the round began (unless that lease itself
//!   released it); a key finishes at most once per round, and no fencing token finishes twice;
//! - fencing tokens only increase: every token is above every token of earlier rounds (reopen
//!   included), tokens are unique, and each thread sees its own strictly increasing; a key's
//!   stored token never goes back, except across a reopen, which drops the pending records kept
//!   in memory (claims with and without `durable_pending` are mixed);
//! - entity versions only increase, by exactly one per successful write: the successful writes
//!   of an entity return distinct versions, the stored version is their number, and a conflict
//!   reports a current version that really fails the condition;
//! - a completed or failed record holds the response its lease holder stored, and never changes
//!   until it expires; a pending record names a token that was issued and has not finished;
//! - an expired record is never returned.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Barrier;
use std::time::Duration;

use idemdb::{
    Claim, ClaimOptions, Config, Conflict, Durability, Expect, FailKind, Lease, ManualClock,
    RecordInfo, RecordState, Response, Store,
};
use libfuzzer_sys::fuzz_target;

const TENANT: &str = "t";
const KEYS: [&str; 2] = ["k0", "k1"];
const ENTITIES: [&str; 2] = ["e0", "e1"];
const FPS: [&[u8]; 2] = [b"fp0", b"fp1"];
const MAX_ROUNDS: usize = 8;
const MAX_OPS_PER_THREAD: u8 = 6;

fn open(dir: &std::path::Path, clock: &ManualClock) -> Store {
    Config::new(dir)
        .clock(clock.clone())
        .durability(Durability::Buffered)
        .sweep_interval(None)
        .lease(Duration::from_secs(10))
        .retention(Duration::from_secs(60))
        .write_buffer_bytes(1 << 20)
        .cache_bytes(1 << 20)
        .lock_stripes(16)
        .open()
        .expect("open store")
}

/// What one thread saw, in its own order.
#[derive(Debug)]
enum Event {
    Acquired {
        key: usize,
        fence: u64,
    },
    /// A lease ending the store accepted: a completion or terminal failure stores `response`, a
    /// retryable failure (`None`) releases the key.
    Finished {
        key: usize,
        fence: u64,
        response: Option<Response>,
    },
    Replayed {
        key: usize,
        response: Response,
    },
    Wrote {
        entity: usize,
        version: u64,
    },
    Conflict {
        expected: Expect,
        current: Option<u64>,
    },
}

/// One thread's private state, kept across rounds.
#[derive(Default)]
struct Worker {
    leases: Vec<(usize, Lease)>,
    /// The last version of each entity this thread saw.
    seen: [Option<u64>; 2],
}

impl Worker {
    /// Runs one round's script: each byte selects an action (low 3 bits) and its operands.
    fn run(&mut self, store: &Store, thread: u8, round: u8, ops: &[u8]) -> Vec<Event> {
        let mut events = Vec::new();
        for (i, &b) in ops.iter().enumerate() {
            let key = usize::from(b >> 7);
            let response = Response::new(vec![thread, round, i as u8]);
            let pick = usize::from(b >> 3);
            match b % 8 {
                0..=2 => {
                    let fp = FPS[usize::from((b >> 6) & 1)];
                    // Bit 5: a durable pending record (written at the claim) or one kept in
                    // memory until the holder ends it.
                    let opts = ClaimOptions::default().durable_pending(b & 0x20 != 0);
                    match store
                        .claim(TENANT, KEYS[key], fp, opts)
                        .expect("claim")
                    {
                        Claim::Acquired(l) => {
                            events.push(Event::Acquired {
                                key,
                                fence: l.fence(),
                            });
                            self.leases.push((key, l));
                        }
                        Claim::Completed(r) | Claim::Failed(r) => events.push(Event::Replayed {
                            key,
                            response: r.response,
                        }),
                        _ => {}
                    }
                }
                3..=5 if !self.leases.is_empty() => {
                    let (key, l) = &self.leases[pick % self.leases.len()];
                    let (ok, stored) = match b % 8 {
                        3 => (
                            store.complete(l, response.clone()).expect("complete"),
                            Some(response),
                        ),
                        4 => (store.fail(l, FailKind::Retryable).expect("fail"), None),
                        _ => (
                            store
                                .fail(l, FailKind::Terminal(response.clone()))
                                .expect("fail"),
                            Some(response),
                        ),
                    };
                    if ok.is_ok() {
                        events.push(Event::Finished {
                            key: *key,
                            fence: l.fence(),
                            response: stored,
                        });
                    }
                }
                6 if !self.leases.is_empty() => {
                    let n = self.leases.len();
                    let l = &mut self.leases[pick % n].1;
                    let _ = store
                        .renew(l, Duration::from_secs(1 + u64::from(b >> 4)))
                        .expect("renew");
                }
                7 => {
                    let e = key;
                    let expected = match (b >> 3) & 3 {
                        0 => Expect::Absent,
                        1 => Expect::Version(self.seen[e].unwrap_or(1)),
                        2 => Expect::Any,
                        _ => {
                            let cur = store.get_entity(TENANT, ENTITIES[e]).expect("get entity");
                            self.seen[e] = cur.map(|v| v.version);
                            continue;
                        }
                    };
                    match store
                        .put_entity(TENANT, ENTITIES[e], expected, response.body)
                        .expect("put entity")
                    {
                        Ok(version) => {
                            self.seen[e] = Some(version);
                            events.push(Event::Wrote { entity: e, version });
                        }
                        Err(Conflict { current }) => {
                            let current = current.map(|c| c.version);
                            self.seen[e] = current;
                            events.push(Event::Conflict { expected, current });
                        }
                    }
                }
                _ => {}
            }
        }
        events
    }
}

/// Everything every thread has seen so far, and the checks over it.
#[derive(Default)]
struct Checker {
    /// Every token issued, with its key.
    fences: BTreeMap<u64, usize>,
    /// Every token that finished, with the response it stored (`None`: released).
    finished: BTreeMap<u64, Option<Response>>,
    /// Versions returned by successful writes, per entity.
    versions: [BTreeSet<u64>; 2],
    /// Per key: the largest fence `get` reported.
    last_fence: [u64; 2],
    /// Per key: the finished record as first seen, until it expires.
    snapshots: [Option<RecordInfo>; 2],
}

impl Checker {
    /// Checks one round's events; `start` is what `get` reported for each key before it.
    fn round(
        &mut self,
        round: usize,
        start: &[Option<RecordInfo>; 2],
        now: u64,
        events: &[Vec<Event>],
    ) {
        let before = self.fences.keys().next_back().copied().unwrap_or(0);
        let mut acquired = [0usize; 2];
        let mut released = [0usize; 2];
        let mut stored = [0usize; 2];
        for (thread, evs) in events.iter().enumerate() {
            let ctx = format!("round {round}, thread {thread}: {evs:?}");
            let mut last = before;
            for e in evs {
                match e {
                    Event::Acquired { key, fence } => {
                        assert!(*fence > last, "{ctx}: token {fence} not above {last}");
                        last = *fence;
                        assert!(
                            self.fences.insert(*fence, *key).is_none(),
                            "{ctx}: token {fence} issued twice"
                        );
                        acquired[*key] += 1;
                    }
                    Event::Finished { key, .. } => {
                        if matches!(e, Event::Finished { response: None, .. }) {
                            released[*key] += 1;
                        } else {
                            stored[*key] += 1;
                        }
                    }
                    Event::Wrote { entity, version } => assert!(
                        self.versions[*entity].insert(*version),
                        "{ctx}: version {version} of entity {entity} written twice"
                    ),
                    Event::Conflict { expected, current } => match expected {
                        Expect::Absent => {
                            assert!(current.is_some(), "{ctx}: Absent failed on nothing")
                        }
                        Expect::Version(v) => {
                            assert_ne!(*current, Some(*v), "{ctx}: Version({v}) failed on {v}")
                        }
                        Expect::Any => panic!("{ctx}: Expect::Any conflicted"),
                    },
                    Event::Replayed { .. } => {}
                }
            }
        }
        // Tokens and their endings, now that every token of the round is known.
        for (thread, evs) in events.iter().enumerate() {
            for e in evs {
                if let Event::Finished {
                    key,
                    fence,
                    response,
                } = e
                {
                    assert_eq!(
                        self.fences.get(fence),
                        Some(key),
                        "round {round}, thread {thread}: token {fence} finished on the wrong key"
                    );
                    assert!(
                        self.finished.insert(*fence, response.clone()).is_none(),
                        "round {round}, thread {thread}: token {fence} finished twice"
                    );
                }
            }
        }
        for key in 0..2 {
            // A live lease at the start of the round is never taken over (time stands still):
            // only its own release frees the key; a finished record is never acquired.
            let held = match start[key].as_ref().map(|i| &i.state) {
                Some(RecordState::Pending { lease_until }) => *lease_until > now,
                Some(RecordState::Completed(_) | RecordState::Failed(_)) => {
                    assert_eq!(
                        acquired[key], 0,
                        "round {round}: key {key} acquired over a finished record: {events:?}"
                    );
                    true
                }
                _ => false,
            };
            assert!(
                acquired[key] <= usize::from(!held) + released[key],
                "round {round}: key {key} (held at the start: {held}) acquired {} times \
                 with {} releases: {events:?}",
                acquired[key],
                released[key]
            );
            assert!(
                acquired[key] <= 1 + released[key],
                "round {round}: key {key} acquired {} times with {} releases: {events:?}",
                acquired[key],
                released[key]
            );
            assert!(
                stored[key] <= 1,
                "round {round}: key {key} finished {} times: {events:?}",
                stored[key]
            );
        }
        // A replay is a response some holder of that key stored.
        for evs in events {
            for e in evs {
                if let Event::Replayed { key, response } = e {
                    assert!(
                        self.finished
                            .iter()
                            .any(|(f, r)| self.fences.get(f) == Some(key)
                                && r.as_ref() == Some(response)),
                        "round {round}: replay of {response:?} nobody stored on key {key}"
                    );
                }
            }
        }
    }

    /// What the store holds at `now`.
    fn store(&mut self, store: &Store, now: u64, ctx: &str) {
        for (key, name) in KEYS.iter().enumerate() {
            let got = store.get(TENANT, name).expect("get");
            if let Some(snap) = &self.snapshots[key] {
                if snap.expires_at > now {
                    assert_eq!(
                        got.as_ref(),
                        Some(snap),
                        "{ctx}: finished record {name} changed before it expired"
                    );
                } else {
                    self.snapshots[key] = None;
                }
            }
            let Some(info) = got else { continue };
            assert!(
                info.expires_at > now,
                "{ctx}: expired record {name} returned: {info:?} at {now}"
            );
            assert_eq!(
                self.fences.get(&info.fence),
                Some(&key),
                "{ctx}: {name} holds a token never issued for it: {info:?}"
            );
            assert!(
                info.fence >= self.last_fence[key],
                "{ctx}: {name}'s token went back from {} to {}",
                self.last_fence[key],
                info.fence
            );
            self.last_fence[key] = info.fence;
            let ended = self.finished.get(&info.fence);
            match &info.state {
                RecordState::Pending { lease_until } => {
                    assert!(*lease_until <= info.expires_at, "{ctx}: {info:?}");
                    assert_eq!(ended, None, "{ctx}: {name} pending with a finished token");
                }
                RecordState::Released => {
                    assert_eq!(ended, Some(&None), "{ctx}: {name} released by nobody");
                }
                RecordState::Completed(r) | RecordState::Failed(r) => {
                    assert_eq!(
                        ended,
                        Some(&Some(r.response.clone())),
                        "{ctx}: {name} holds a response its holder did not store"
                    );
                    if self.snapshots[key].is_none() {
                        self.snapshots[key] = Some(info.clone());
                    }
                }
                other => panic!("{ctx}: unknown record state {other:?}"),
            }
        }
        for (e, name) in ENTITIES.iter().enumerate() {
            let got = store.get_entity(TENANT, name).expect("get entity");
            let writes = self.versions[e].len() as u64;
            assert_eq!(
                got.map(|v| v.version),
                (writes > 0).then_some(writes),
                "{ctx}: entity {name} after {writes} successful writes"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, mut rest)) = data.split_first() else {
        return;
    };
    let threads = 2 + usize::from(first % 3);
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::default();
    let mut store = open(dir.path(), &clock);
    let mut workers: Vec<Worker> = (0..threads).map(|_| Worker::default()).collect();
    let mut checker = Checker::default();
    for round in 0..MAX_ROUNDS {
        let Some((&header, tail)) = rest.split_first() else {
            break;
        };
        rest = tail;
        let mut scripts = Vec::with_capacity(threads);
        for _ in 0..threads {
            let n = rest
                .first()
                .map_or(0, |c| usize::from(c % (MAX_OPS_PER_THREAD + 1)));
            let script = rest.get(1..1 + n).unwrap_or(rest.get(1..).unwrap_or(&[]));
            rest = rest.get(1 + script.len()..).unwrap_or(&[]);
            scripts.push(script);
        }
        let now = store.now();
        let before: [Option<RecordInfo>; 2] =
            [0, 1].map(|k| store.get(TENANT, KEYS[k]).expect("get"));
        let start = Barrier::new(threads);
        let events: Vec<Vec<Event>> = std::thread::scope(|s| {
            let handles: Vec<_> = workers
                .iter_mut()
                .zip(&scripts)
                .enumerate()
                .map(|(t, (w, script))| {
                    let (store, start) = (&store, &start);
                    s.spawn(move || {
                        start.wait();
                        w.run(store, t as u8, round as u8, script)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("worker panicked"))
                .collect()
        });
        checker.round(round, &before, now, &events);
        checker.store(&store, store.now(), &format!("after round {round}"));
        clock.advance(Duration::from_secs(u64::from(header % 16)));
        match header >> 4 {
            10 | 11 => {
                store.sweep(8).expect("sweep");
            }
            12 | 13 => store.compact().expect("compact"),
            14 | 15 => {
                drop(store);
                store = open(dir.path(), &clock);
                // Pending records kept in memory are gone: a key may read as the stored record
                // below its last one again, with an older token (docs/design.md, "In-memory
                // pending records"). Tokens issued from now on are still above every earlier one.
                checker.last_fence = [0; 2];
            }
            _ => {}
        }
        checker.store(
            &store,
            store.now(),
            &format!("after round {round}, clock advanced"),
        );
    }
});
