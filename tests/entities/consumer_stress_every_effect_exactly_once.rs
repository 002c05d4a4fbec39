//! 100,000 messages, 30% of them delivered again (some twice or more, out of order), consumed by
//! 50 worker threads: every message's effect is applied exactly once (counted in a ledger outside
//! the store), every redelivery is detected as a duplicate, and none is in flight at the end.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use idemdb::{Begin, ConsumerOptions, ManualClock, Response};

use crate::common;

const MESSAGES: u64 = 100_000;

#[test]
fn redeliveries_never_apply_twice() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let opts = ConsumerOptions::default();
    // The broker's deliveries: every message once, 30% again (a third of those a third time).
    let mut deliveries: Vec<u64> = (0..MESSAGES).collect();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut redelivered = 0u64;
    for m in 0..MESSAGES {
        if rnd() % 100 < 30 {
            deliveries.push(m);
            redelivered += 1;
            if rnd() % 3 == 0 {
                deliveries.push(m);
                redelivered += 1;
            }
        }
    }
    for i in (1..deliveries.len()).rev() {
        let j = (rnd() % (i as u64 + 1)) as usize;
        deliveries.swap(i, j);
    }
    let queue = Mutex::new(deliveries.into_iter().collect::<VecDeque<u64>>());
    let ledger: Vec<AtomicU32> = (0..MESSAGES).map(|_| AtomicU32::new(0)).collect();
    let duplicates = AtomicU64::new(0);
    let in_flight_seen = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..50 {
            s.spawn(|| loop {
                let Some(m) = queue.lock().unwrap().pop_front() else {
                    return;
                };
                let id = m.to_string();
                match store.begin("billing", &id, opts).unwrap() {
                    Begin::Process(lease) => {
                        ledger[m as usize].fetch_add(1, Ordering::SeqCst);
                        store
                            .complete(&lease, Response::new("applied"))
                            .unwrap()
                            .unwrap();
                    }
                    Begin::Completed(r) => {
                        assert_eq!(r.response.body, b"applied");
                        duplicates.fetch_add(1, Ordering::SeqCst);
                    }
                    Begin::InProgress { .. } => {
                        // The broker redelivers it later, as it would after a nack.
                        in_flight_seen.fetch_add(1, Ordering::SeqCst);
                        queue.lock().unwrap().push_back(m);
                    }
                    other => panic!("nothing fails here, got {other:?}"),
                }
            });
        }
    });
    assert!(
        ledger.iter().all(|n| n.load(Ordering::SeqCst) == 1),
        "every effect exactly once"
    );
    assert_eq!(
        duplicates.load(Ordering::SeqCst),
        redelivered,
        "every duplicate detected"
    );
    let c = store.stats().unwrap().counters;
    assert_eq!(c.acquired, MESSAGES);
    assert_eq!(c.completed, MESSAGES);
    // None in flight at the end: every message replays as processed.
    for m in (0..MESSAGES).step_by(97) {
        assert!(matches!(
            store.begin("billing", m.to_string(), opts).unwrap(),
            Begin::Completed(_)
        ));
    }
    // Another group processes the same messages independently; request tenants are separate too.
    assert!(matches!(
        store.begin("audit", "7", opts).unwrap(),
        Begin::Process(_)
    ));
    assert!(store.get("billing", "7").unwrap().is_none());
    println!(
        "{MESSAGES} messages, {redelivered} redeliveries detected, {} in-flight answers",
        in_flight_seen.load(Ordering::SeqCst)
    );
}
