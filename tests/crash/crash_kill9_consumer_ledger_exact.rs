//! kill -9 of a consumer: a child process (this test binary, re-executed) consumes messages
//! 0..N, applying each message's effect (a ledger entry and a running total, both entities) in one
//! commit with the message's completion, in synced durability. The parent SIGKILLs it at random
//! moments many times, then lets a last child finish. The final ledger is exact: every message's
//! effect exactly once, none lost, none doubled (the total, updated by compare-and-swap, equals
//! the number of ledger entries equals N).

use std::time::Duration;

use crate::common;

use idemdb::{Begin, ConsumerOptions, Expect, Response};

const CHILD_ENV: &str = "IDEMDB_CONSUMER_CHILD_DIR";
const MESSAGES: u64 = 3_000;

fn opts() -> ConsumerOptions {
    ConsumerOptions {
        max_attempts: 1_000,
        lease: Some(Duration::from_millis(300)),
        ..ConsumerOptions::default()
    }
}

#[test]
#[ignore = "the child side of the consumer crash test; run by the parent test"]
fn consumer_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = common::open_synced(&dir);
    // The "broker" redelivers everything from the start after a crash, as at-least-once brokers
    // do for unacknowledged messages.
    for m in 0..MESSAGES {
        let id = m.to_string();
        loop {
            match store.begin("ledger", &id, opts()).unwrap() {
                Begin::Process(lease) => {
                    let total = store.get_entity("acct", "total").unwrap().unwrap();
                    let out = store
                        .commit()
                        .put("acct", format!("entry-{m}"), Expect::Absent, id.as_bytes())
                        .put(
                            "acct",
                            "total",
                            Expect::Version(total.version),
                            (common::be_u64(&total.value) + 1).to_be_bytes(),
                        )
                        .complete(&lease, Response::new("applied"))
                        .apply()
                        .unwrap();
                    out.expect("single consumer: no conflicts");
                    break;
                }
                Begin::Completed(_) => break,
                Begin::InProgress { retry_after } => {
                    std::thread::sleep(retry_after.min(Duration::from_millis(50)))
                }
                other => panic!("never failed, got {other:?}"),
            }
        }
    }
}

#[test]
fn ledger_is_exact_after_many_sigkills() {
    let iterations: u64 = std::env::var("IDEMDB_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_owned();
    {
        let s = common::open_synced(&path);
        s.put_entity("acct", "total", Expect::Absent, 0u64.to_be_bytes())
            .unwrap()
            .unwrap();
        s.close().unwrap();
    }
    let spawn = || {
        common::spawn_child(
            "crash_kill9_consumer_ledger_exact::consumer_child",
            &[(CHILD_ENV, path.clone())],
        )
    };
    let mut rng = common::Xorshift::from_clock();
    for _ in 0..iterations {
        let mut child = spawn();
        common::kill_after_random_pause(&mut child, &mut rng, 20, 150);
        let store = common::open_synced(&path);
        let total = common::be_u64(&store.get_entity("acct", "total").unwrap().unwrap().value);
        let entries = (0..MESSAGES)
            .filter(|m| {
                store
                    .get_entity("acct", format!("entry-{m}"))
                    .unwrap()
                    .is_some()
            })
            .count() as u64;
        assert_eq!(
            total, entries,
            "effects and their marks are never split or doubled"
        );
        store.close().unwrap();
    }
    let status = spawn().wait().unwrap();
    assert!(status.success(), "the last consumer finishes");
    let store = common::open_synced(&path);
    let total = common::be_u64(&store.get_entity("acct", "total").unwrap().unwrap().value);
    assert_eq!(total, MESSAGES, "every effect exactly once");
    for m in 0..MESSAGES {
        assert!(
            store
                .get_entity("acct", format!("entry-{m}"))
                .unwrap()
                .is_some(),
            "entry {m}"
        );
        assert!(matches!(
            store.begin("ledger", m.to_string(), opts()).unwrap(),
            Begin::Completed(_)
        ));
    }
    println!("consumer crash test: {iterations} SIGKILLs, ledger exact over {MESSAGES} messages");
}
