//! The kill -9 completion workload shared by the synced and buffered crash tests: a child process
//! (the test binary, re-executed) claims, checkpoints, fails and completes keys and prints each
//! completion after `complete` returns; the parent SIGKILLs it at a random moment, reopens the
//! store and checks that every acknowledged completion is present and intact, fencing tokens never
//! went backwards, every record decodes, and every pending record can be taken over. Every
//! seventh key is left pending, three ways (docs/design.md, "In-memory pending records"): a claim
//! kept in memory with an hour-long lease (claimable at once after the crash: it was never
//! written), a durable-pending claim with an hour-long lease (still in progress after the crash),
//! and a checkpointed claim with the default lease (its next acquirer receives the checkpoint).
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
            // Left pending, as a crashed worker would.
            match (i / 7) % 4 {
                0 if i % 3 != 0 => {
                    let Claim::Acquired(l) = store
                        .claim("crash", format!("mem{i}"), b"fp", long_lease())
                        .unwrap()
                    else {
                        panic!("fresh key not acquired")
                    };
                    writeln!(out, "MEM {i} {}", l.fence()).unwrap();
                }
                1 => {
                    let Claim::Acquired(l) = store
                        .claim(
                            "crash",
                            format!("dur{i}"),
                            b"fp",
                            long_lease().durable_pending(true),
                        )
                        .unwrap()
                    else {
                        panic!("fresh key not acquired")
                    };
                    writeln!(out, "DUR {i} {}", l.fence()).unwrap();
                }
                _ if i % 3 == 0 => writeln!(out, "CP {i} {}", lease.fence()).unwrap(),
                _ => {}
            }
            out.flush().unwrap();
            continue;
        }
        store
            .complete(&lease, Response::new(body(i)).with_status(201))
            .unwrap()
            .unwrap();
        writeln!(out, "ACK {i} {}", lease.fence()).unwrap();
        out.flush().unwrap();
    }
}

/// An hour-long lease: still live when the parent reopens the store.
fn long_lease() -> ClaimOptions {
    ClaimOptions::default().lease(std::time::Duration::from_secs(3600))
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
    let mut checked = [0usize; 3]; // in memory, durable pending, checkpointed
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
        let reader = common::read_lines(&mut child);
        common::kill_after_random_pause(&mut child, &mut rng, 30, 300);
        let lines = reader.join().unwrap();
        let of = |kind: &str| -> Vec<(u64, u64)> {
            lines
                .iter()
                .filter(|(k, ..)| k == kind)
                .map(|&(_, i, f)| (i, f))
                .collect()
        };
        let new_acks = of("ACK");
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
        // This run's acknowledged completions after every crash; every earlier one again after
        // the last crash (a completion a crash lost cannot come back, so checking all of them
        // once at the end finds any crash that lost one, without reading every completion again
        // after each of the hundred crashes).
        let all = iter + 1 == iterations;
        let check: &[(u64, u64)] = if all { &acked } else { &new_acks };
        for &(i, fence) in check {
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
        // Tokens handed out before the crash, acknowledged or not, stay below every later one.
        for &(_, _, fence) in &lines {
            max_fence = max_fence.max(fence);
        }
        // A claim kept in memory was never written: its key is claimable at once, although its
        // hour-long lease has not run out.
        for (i, _) in of("MEM") {
            match store
                .claim("crash", format!("mem{i}"), b"fp", ClaimOptions::default())
                .unwrap()
            {
                Claim::Acquired(l) => assert!(l.fence() > max_fence, "mem{i}: token reused"),
                other => panic!("iteration {iter}: in-memory mem{i} not claimable: {other:?}"),
            }
            checked[0] += 1;
        }
        // A durable pending claim survived: still in progress until its lease runs out.
        for (i, fence) in of("DUR") {
            let info = store.get("crash", format!("dur{i}")).unwrap();
            assert!(
                matches!(&info, Some(r) if r.fence == fence
                    && matches!(r.state, RecordState::Pending { .. })),
                "iteration {iter}: durable pending dur{i} is {info:?}"
            );
            let again = store
                .claim("crash", format!("dur{i}"), b"fp", ClaimOptions::default())
                .unwrap();
            assert!(
                matches!(again, Claim::InProgress { .. }),
                "iteration {iter}: dur{i} {again:?}"
            );
            checked[1] += 1;
        }
        // A checkpointed claim survived, and its next acquirer receives the checkpoint.
        for (i, fence) in of("CP") {
            match store
                .claim("crash", format!("k{i}"), b"fp", ClaimOptions::default())
                .unwrap()
            {
                Claim::Acquired(l) => {
                    assert!(l.fence() > fence && l.fence() > max_fence);
                    assert!(l.is_takeover(), "iteration {iter}: k{i} was pending");
                    let cp = l
                        .checkpoint()
                        .expect("the checkpoint reaches the next acquirer");
                    assert_eq!(cp.state, body(i));
                    max_fence = max_fence.max(l.fence());
                }
                other => panic!("iteration {iter}: checkpointed k{i} not taken over: {other:?}"),
            }
            checked[2] += 1;
        }
        // Every key the child touched in this run decodes; pending ones can be taken over.
        let last = new_acks.last().map_or(start, |&(i, _)| i);
        let taken: Vec<u64> = of("CP").iter().map(|&(i, _)| i).collect();
        for i in (start..=last + 2).filter(|i| !taken.contains(i)) {
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
                            max_fence = max_fence.max(l.fence());
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
    assert!(
        checked.iter().all(|&n| n > 0),
        "every kind of pending claim was checked: {checked:?}"
    );
    println!(
        "crash test ({durability:?}): {iterations} SIGKILLs, {} acknowledged completions verified; \
         {} in-memory claims claimable at once, {} durable pending claims still in progress, {} \
         checkpoints received by the next acquirer",
        acked.len(),
        checked[0],
        checked[1],
        checked[2]
    );
}
