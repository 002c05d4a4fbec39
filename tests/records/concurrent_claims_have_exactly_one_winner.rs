//! 64 threads claiming one key at once: exactly one acquires, every other sees in-progress or the
//! replay; repeated for many keys.
use std::sync::{Barrier, Mutex};

use idemdb::{Claim, ClaimOptions, Durability, ManualClock, Response};

use crate::common;

#[test]
fn exactly_one_of_64_claimers_acquires() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::config(dir.path(), &clock)
        .durability(Durability::Synced)
        .open()
        .unwrap();
    for round in 0..40 {
        let key = format!("key-{round}");
        let barrier = Barrier::new(64);
        let outcomes = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..64 {
                let (store, barrier, outcomes, key) = (&store, &barrier, &outcomes, &key);
                s.spawn(move || {
                    barrier.wait();
                    let c = store
                        .claim("tenant", key, b"fp", ClaimOptions::default())
                        .unwrap();
                    // Half the rounds: the winner completes at once, so late claimers replay.
                    if let Claim::Acquired(lease) = &c {
                        if round % 2 == 0 {
                            store
                                .complete(lease, Response::new(format!("done by {t}")))
                                .unwrap()
                                .unwrap();
                        }
                    }
                    outcomes.lock().unwrap().push(c);
                });
            }
        });
        let outcomes = outcomes.into_inner().unwrap();
        let acquired = outcomes
            .iter()
            .filter(|c| matches!(c, Claim::Acquired(_)))
            .count();
        assert_eq!(acquired, 1, "round {round}: {acquired} acquired");
        for c in &outcomes {
            assert!(
                matches!(
                    c,
                    Claim::Acquired(_) | Claim::InProgress { .. } | Claim::Completed(_)
                ),
                "round {round}: unexpected {c:?}"
            );
        }
    }
    let counters = store.stats().unwrap().counters;
    assert_eq!(counters.acquired, 40);
}
