//! The kill -9 completion workload shared by the synced and buffered crash tests: a child process
//! (the test binary, re-executed) claims, checkpoints, fails and completes keys and prints each
//! completion after `complete` returns; the parent SIGKILLs it at a random moment, reopens the
//! store and checks that every acknowledged completion is present and intact, fencing tokens never
//! went backwards, every record decodes, and every pending record can be taken over.
#![allow(dead_code)]

use std::io::Write;

use idemdb::{
    Claim, ClaimOptions, Clock, Config, Durability, FailKind, ManualClock, RecordState, Response,
    SystemClock,
};

use super::common;

const CHILD_ENV: &str = "IDEMDB_CRASH_CHILD_DIR";

fn body(i: u64) -> Vec<u8> {
    format!("response for {i}: {}", "x".repeat((i % 97) as usize)).into_bytes()
}

/// The child side: runs until killed (does nothing unless started by [`run`]).
pub fn child(durability: Durability) {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let start: u64 = std::env::var("IDEMDB_CRASH_START")
        .unwrap()
        .parse()
        .unwrap();
    let store = Config::new(&dir)
        .durability(durability)
        .sweep_interval(None)
        .open()
        .unwrap();
    let mut out = std::io::stdout().lock();
    for i in start.. {
        let key = format!("k{i}");
        let Claim::Acquired(lease) = store
            .claim("crash", &key, b"fp", ClaimOptions::default())
            .unwrap()
        else {
            panic!("fresh key not acquired")
        };
        let lease = if i % 5 == 0 {
            store.fail(&lease, FailKind::Retryable).unwrap().unwrap();
            match store
                .claim("crash", &key, b"fp", ClaimOptions::default())
                .unwrap()
            {
                Claim::Acquired(l) => l,
                other => panic!("{other:?}"),
            }
        } else {
            lease
        };
        if i % 3 == 0 {
            store.checkpoint(&lease, "half", body(i)).unwrap().unwrap();
        }
        if i % 7 == 0 {
            continue; // left pending, as a crashed worker would
        }
        store
            .complete(&lease, Response::new(body(i)).with_status(201))
            .unwrap()
            .unwrap();
        writeln!(out, "ACK {i} {}", lease.fence()).unwrap();
        out.flush().unwrap();
    }
}

/// The parent side: `IDEMDB_CRASH_ITERATIONS` (default 100) kills of the test named `child_test`
/// of this binary, each followed by the checks.
pub fn run(durability: Durability, child_test: &str) {
    let iterations: u64 = std::env::var("IDEMDB_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let dir = tempfile::tempdir().unwrap();
    let mut acked: Vec<(u64, u64)> = Vec::new();
    let mut max_fence = 0;
    let mut rng = common::Xorshift::from_clock();
    for iter in 0..iterations {
        let start = iter * 1_000_000;
        let mut child = common::spawn_child(
            child_test,
            &[
                (CHILD_ENV, dir.path().display().to_string()),
                ("IDEMDB_CRASH_START", start.to_string()),
            ],
        );
        let reader = common::read_acks(&mut child);
        common::kill_after_random_pause(&mut child, &mut rng, 30, 300);
        let new_acks = reader.join().unwrap();
        acked.extend(&new_acks);

        // Reopen with a clock past every lease (30 s) but within retention (24 h). The store's
        // time never goes back, across restarts too: the next child resumes at this reopen's
        // time, so each reopen is another 120 s ahead (100 iterations: 3.3 h).
        let clock = ManualClock::new(SystemClock.now_millis() + 120_000 * (iter + 1));
        let store = Config::new(dir.path())
            .clock(clock)
            .durability(durability)
            .sweep_interval(None)
            .open()
            .unwrap();
        for &(i, fence) in &acked {
            let info = store
                .get("crash", format!("k{i}"))
                .unwrap()
                .expect("acked record present");
            match info.state {
                RecordState::Completed(r) => {
                    assert_eq!(r.response.body, body(i), "iteration {iter}: k{i} intact");
                    assert_eq!(r.response.status(), Some(201));
                }
                other => panic!("iteration {iter}: acked k{i} is {other:?}"),
            }
            assert_eq!(info.fence, fence);
            max_fence = max_fence.max(fence);
        }
        // Every key the child touched in this run decodes; pending ones can be taken over.
        let last = new_acks.last().map_or(start, |&(i, _)| i);
        for i in start..=last + 2 {
            let key = format!("k{i}");
            if let Some(info) = store.get("crash", &key).unwrap() {
                if let RecordState::Pending { .. } | RecordState::Released = info.state {
                    match store
                        .claim("crash", &key, b"fp", ClaimOptions::default())
                        .unwrap()
                    {
                        Claim::Acquired(l) => {
                            assert!(l.fence() > info.fence);
                            assert!(l.fence() > max_fence);
                            if let Some(cp) = l.checkpoint() {
                                assert_eq!(cp.state, body(i));
                            }
                        }
                        other => panic!("pending k{i} not taken over: {other:?}"),
                    }
                }
            }
        }
        store.close().unwrap();
    }
    assert!(
        acked.len() as u64 > iterations,
        "the child made progress: {} acks",
        acked.len()
    );
    println!(
        "crash test ({durability:?}): {iterations} SIGKILLs, {} acknowledged completions verified",
        acked.len()
    );
}
