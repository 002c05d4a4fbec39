//! kill -9 atomicity of multi-key commits: a child process (this test binary, re-executed) moves
//! one unit from account A to account B, writes a ledger entity and completes the request's
//! idempotency lease, all in one commit, in synced durability, and prints each acknowledged
//! commit. The parent SIGKILLs it at random moments and checks after each reopen: A + B is
//! constant, every ledger entry has its completed request and vice versa (both or neither), every
//! acknowledged commit is present, and versions never went backwards.
use std::io::Write;

use crate::common;

use idemdb::{Claim, ClaimOptions, Expect, RecordState, Response};

const CHILD_ENV: &str = "IDEMDB_COMMIT_CHILD_DIR";
const TOTAL: u64 = 1_000_000;

#[test]
#[ignore = "the child side of the commit crash test; run by the parent test"]
fn commit_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let start: u64 = std::env::var("IDEMDB_COMMIT_START")
        .unwrap()
        .parse()
        .unwrap();
    let store = common::open_synced(&dir);
    let mut out = std::io::stdout().lock();
    for i in start.. {
        let req = format!("req-{i}");
        let Claim::Acquired(lease) = store
            .claim("bank", &req, b"", ClaimOptions::default())
            .unwrap()
        else {
            panic!("fresh request not acquired")
        };
        let a = store.get_entity("bank", "A").unwrap().unwrap();
        let b = store.get_entity("bank", "B").unwrap().unwrap();
        store
            .commit()
            .put(
                "bank",
                "A",
                Expect::Version(a.version),
                (common::be_u64(&a.value) - 1).to_be_bytes(),
            )
            .put(
                "bank",
                "B",
                Expect::Version(b.version),
                (common::be_u64(&b.value) + 1).to_be_bytes(),
            )
            .put(
                "bank",
                format!("ledger-{i}"),
                Expect::Absent,
                req.as_bytes(),
            )
            .complete(&lease, Response::new(req.as_bytes()))
            .apply()
            .unwrap()
            .unwrap();
        writeln!(out, "ACK {i} {}", a.version + 1).unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn commits_are_all_or_nothing_across_sigkill() {
    let iterations: u64 = std::env::var("IDEMDB_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_owned();
    {
        let s = common::open_synced(&path);
        s.put_entity("bank", "A", Expect::Absent, TOTAL.to_be_bytes())
            .unwrap()
            .unwrap();
        s.put_entity("bank", "B", Expect::Absent, 0u64.to_be_bytes())
            .unwrap()
            .unwrap();
        s.close().unwrap();
    }
    let mut acked: Vec<(u64, u64)> = Vec::new();
    let mut last_version = 0;
    let mut rng = common::Xorshift::from_clock();
    for iter in 0..iterations {
        let start = iter * 1_000_000;
        let mut child = common::spawn_child(
            "crash_kill9_commit_is_atomic::commit_child",
            &[
                (CHILD_ENV, path.clone()),
                ("IDEMDB_COMMIT_START", start.to_string()),
            ],
        );
        let reader = common::read_acks(&mut child);
        common::kill_after_random_pause(&mut child, &mut rng, 30, 250);
        let new_acks = reader.join().unwrap();
        acked.extend(&new_acks);

        let store = common::open_synced(&path);
        let a = store.get_entity("bank", "A").unwrap().unwrap();
        let b = store.get_entity("bank", "B").unwrap().unwrap();
        assert_eq!(
            common::be_u64(&a.value) + common::be_u64(&b.value),
            TOTAL,
            "iteration {iter}: money conserved"
        );
        assert!(a.version >= last_version, "versions never go backwards");
        last_version = a.version;
        let moved = common::be_u64(&b.value);
        // Every acknowledged commit is present.
        for &(i, version) in &acked {
            assert!(
                store
                    .get_entity("bank", format!("ledger-{i}"))
                    .unwrap()
                    .is_some(),
                "acked {i}"
            );
            assert!(a.version >= version);
        }
        // Both or neither, for every request the child touched in this run.
        let last = new_acks.last().map_or(start, |&(i, _)| i);
        for i in start..=last + 1 {
            let ledger = store
                .get_entity("bank", format!("ledger-{i}"))
                .unwrap()
                .is_some();
            let done = matches!(
                store
                    .get("bank", format!("req-{i}"))
                    .unwrap()
                    .map(|r| r.state),
                Some(RecordState::Completed(_))
            );
            assert_eq!(
                ledger, done,
                "iteration {iter}: request {i} ledger={ledger} completed={done}"
            );
        }
        let ledgers: u64 = (0..=iter)
            .map(|it| {
                (it * 1_000_000..)
                    .take_while(|i| {
                        store
                            .get_entity("bank", format!("ledger-{i}"))
                            .unwrap()
                            .is_some()
                    })
                    .count() as u64
            })
            .sum();
        assert_eq!(ledgers, moved, "one ledger entry per unit moved");
        store.close().unwrap();
    }
    assert!(acked.len() as u64 > iterations, "the child made progress");
    println!(
        "commit crash test: {iterations} SIGKILLs, {} acknowledged commits verified",
        acked.len()
    );
}
