//! kill -9 of consumer workers mid-message: a message's pending record is durable from `begin`
//! (docs/design.md, "In-memory pending records": consumers always write it), so every attempt of
//! a worker that crashed is counted, and the message is poisoned once `max_attempts` workers
//! crashed on it, in both durabilities. Each child (this test binary, re-executed) begins the
//! message, says so, and hangs as a stuck worker would until it is SIGKILLed; the parent reopens
//! with a clock past the lease and hands the message to the next child.

use std::io::Write;
use std::time::Duration;

use idemdb::{Begin, Clock, Config, ConsumerOptions, Durability, ManualClock, SystemClock};

use crate::common;

const CHILD_ENV: &str = "IDEMDB_ATTEMPTS_CHILD_DIR";
const MAX_ATTEMPTS: u32 = 3;

fn opts() -> ConsumerOptions {
    ConsumerOptions {
        max_attempts: MAX_ATTEMPTS,
        lease: Some(Duration::from_secs(30)),
        ..ConsumerOptions::default()
    }
}

fn open(dir: &str, durability: Durability, clock: ManualClock) -> idemdb::Store {
    Config::new(dir)
        .durability(durability)
        .clock(clock)
        .sweep_interval(None)
        .open()
        .unwrap()
}

#[test]
#[ignore = "the child side of the consumer attempts crash test; run by the parent test"]
fn attempts_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let durability = match std::env::var("IDEMDB_ATTEMPTS_DURABILITY").as_deref() {
        Ok("synced") => Durability::Synced,
        _ => Durability::Buffered,
    };
    let at: u64 = std::env::var("IDEMDB_ATTEMPTS_AT")
        .unwrap()
        .parse()
        .unwrap();
    let store = open(&dir, durability, ManualClock::new(at));
    let outcome = store.begin("workers", "message-1", opts()).unwrap();
    let mut out = std::io::stdout().lock();
    // The test harness has printed the test's name without a newline: end that line first.
    writeln!(out).unwrap();
    match outcome {
        Begin::Process(lease) => writeln!(out, "ACK {} {}", lease.attempt(), lease.fence()),
        Begin::Poisoned { attempts } => writeln!(out, "ACK 0 {attempts}"),
        other => panic!("unexpected {other:?}"),
    }
    .unwrap();
    out.flush().unwrap();
    // A stuck worker: never completes, never fails; only SIGKILL ends it.
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn crashed_attempts_are_counted(durability: Durability, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().display().to_string();
    let mut rng = common::Xorshift::from_clock();
    let mut at = SystemClock.now_millis();
    let mut fences = Vec::new();
    for worker in 1..=MAX_ATTEMPTS + 1 {
        let mut child = common::spawn_child(
            "crash_kill9_consumer_attempts_survive::attempts_child",
            &[
                (CHILD_ENV, path.clone()),
                ("IDEMDB_ATTEMPTS_AT", at.to_string()),
                ("IDEMDB_ATTEMPTS_DURABILITY", name.to_string()),
            ],
        );
        let reader = common::read_acks(&mut child);
        // Long enough for the child to begin and say so (it prints, then hangs).
        common::kill_after_random_pause(&mut child, &mut rng, 400, 200);
        let said = reader.join().unwrap();
        let &[(attempt, x)] = said.as_slice() else {
            panic!("worker {worker} said {said:?}");
        };
        if worker <= MAX_ATTEMPTS {
            assert_eq!(attempt, u64::from(worker), "attempt of worker {worker}");
            assert!(fences.last().is_none_or(|&f| x > f), "tokens increase");
            fences.push(x);
        } else {
            assert_eq!(
                (attempt, x),
                (0, u64::from(MAX_ATTEMPTS)),
                "poisoned after {MAX_ATTEMPTS} crashed workers"
            );
        }
        // The next worker comes after the crashed one's lease ran out.
        at += 60_000;
    }
    // And it stays poisoned.
    let store = open(&path, durability, ManualClock::new(at));
    assert_eq!(
        store.begin("workers", "message-1", opts()).unwrap(),
        Begin::Poisoned {
            attempts: MAX_ATTEMPTS
        }
    );
}

#[test]
fn crashed_workers_attempts_are_counted_synced() {
    crashed_attempts_are_counted(Durability::Synced, "synced");
}

#[test]
fn crashed_workers_attempts_are_counted_buffered() {
    crashed_attempts_are_counted(Durability::Buffered, "buffered");
}
