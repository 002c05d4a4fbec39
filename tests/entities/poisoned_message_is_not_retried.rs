//! Poison: a message that fails `max_attempts` times is reported poisoned and never handed out
//! again; so is one whose workers keep crashing (leases taken over).
use std::time::Duration;

use idemdb::{Begin, ConsumerOptions, ManualClock, MessageFailed};

use crate::common;

#[test]
fn failing_message_is_poisoned_after_max_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let opts = ConsumerOptions {
        max_attempts: 3,
        ..ConsumerOptions::default()
    };
    for attempt in 1..=3 {
        let Begin::Process(lease) = store.begin("g", "m1", opts).unwrap() else {
            panic!()
        };
        assert_eq!(lease.attempt(), attempt);
        let failed = store.fail_message(&lease, opts).unwrap().unwrap();
        if attempt < 3 {
            assert_eq!(failed, MessageFailed::WillRetry { attempts: attempt });
        } else {
            assert_eq!(failed, MessageFailed::Poisoned { attempts: 3 });
        }
    }
    for _ in 0..3 {
        assert_eq!(
            store.begin("g", "m1", opts).unwrap(),
            Begin::Poisoned { attempts: 3 }
        );
    }
}

#[test]
fn crashing_workers_poison_a_message_too() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let opts = ConsumerOptions {
        max_attempts: 2,
        ..ConsumerOptions::default()
    };
    for _ in 0..2 {
        assert!(matches!(
            store.begin("g", "m", opts).unwrap(),
            Begin::Process(_)
        ));
        clock.advance(Duration::from_secs(11)); // the worker died; its lease runs out
    }
    assert_eq!(
        store.begin("g", "m", opts).unwrap(),
        Begin::Poisoned { attempts: 2 }
    );
    assert_eq!(
        store.begin("g", "m", opts).unwrap(),
        Begin::Poisoned { attempts: 2 }
    );
}
