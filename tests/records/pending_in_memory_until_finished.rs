//! A claim that acquires writes nothing (docs/design.md, "In-memory pending records"): its pending
//! record lives in the process and answers every other caller as a stored one would; completion,
//! terminal failure, release and checkpoint write it (one batch: the record and its index entry);
//! renewal keeps it in memory; a reopen drops it, so the key is claimable at once; past
//! `Config::pending_in_memory` and with `ClaimOptions::durable_pending` the claim writes.

use std::time::Duration;

use idemdb::{Claim, ClaimOptions, FailKind, LeaseLost, ManualClock, RecordState, Response};

use super::common;

#[test]
fn a_claim_writes_nothing_and_its_completion_writes_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let lease = common::acquire(&store, "t", "k", b"fp");
    assert_eq!(store.physical_counts().unwrap(), (0, 0), "nothing written");
    // Every other caller sees it as a stored pending record.
    assert!(matches!(
        store
            .claim("t", "k", b"fp", ClaimOptions::default())
            .unwrap(),
        Claim::InProgress { .. }
    ));
    assert_eq!(
        store
            .claim("t", "k", b"other", ClaimOptions::default())
            .unwrap(),
        Claim::Mismatch
    );
    let info = store.get("t", "k").unwrap().expect("visible to get");
    assert!(matches!(info.state, RecordState::Pending { .. }));
    assert_eq!(info.fence, lease.fence());

    store
        .complete(&lease, Response::new("done"))
        .unwrap()
        .unwrap();
    assert_eq!(
        store.physical_counts().unwrap(),
        (1, 1),
        "record and index entry"
    );
    assert!(matches!(
        store.claim("t", "k", b"fp", ClaimOptions::default()).unwrap(),
        Claim::Completed(r) if r.response.body == b"done"
    ));
    // Finished records survive a reopen, as always.
    store.close().unwrap();
    let store = common::open(dir.path(), &clock);
    assert!(matches!(
        store
            .claim("t", "k", b"fp", ClaimOptions::default())
            .unwrap(),
        Claim::Completed(_)
    ));
}

#[test]
fn an_in_memory_claim_is_gone_after_a_reopen_and_tokens_stay_above_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let mut lease = common::acquire(&store, "t", "k", b"fp");
    // A renewal has nothing new to keep: still nothing on disk.
    store
        .renew(&mut lease, Duration::from_secs(60))
        .unwrap()
        .unwrap();
    assert_eq!(store.physical_counts().unwrap(), (0, 0));
    store.close().unwrap();

    // The lease had a minute to run: after the reopen the key is claimable at once.
    let store = common::open(dir.path(), &clock);
    assert!(store.get("t", "k").unwrap().is_none());
    let again = common::acquire(&store, "t", "k", b"fp");
    assert_eq!(again.attempt(), 1);
    assert!(!again.is_takeover());
    assert!(again.fence() > lease.fence(), "tokens never reused");
    // The old holder's lease is of another store instance's record: refused, not applied.
    assert_eq!(
        store.complete(&lease, Response::new("stale")).unwrap(),
        Err(LeaseLost::TakenOver {
            current_fence: again.fence()
        })
    );
}

#[test]
fn checkpoint_release_and_terminal_failure_write_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);

    let cp = common::acquire(&store, "t", "cp", b"fp");
    store.checkpoint(&cp, "half", "state").unwrap().unwrap();
    assert_eq!(
        store.physical_counts().unwrap(),
        (1, 1),
        "checkpoint written"
    );

    let rel = common::acquire(&store, "t", "rel", b"fp");
    store.fail(&rel, FailKind::Retryable).unwrap().unwrap();
    assert_eq!(store.physical_counts().unwrap(), (2, 2), "release written");

    let term = common::acquire(&store, "t", "term", b"fp");
    store
        .fail(&term, FailKind::Terminal(Response::new("no")))
        .unwrap()
        .unwrap();
    assert_eq!(store.physical_counts().unwrap(), (3, 3), "failure written");
    store.close().unwrap();

    // All three survive a reopen: the checkpoint reaches the next acquirer once the lease ran out,
    // the released key counts its attempt, the failure replays.
    clock.advance(Duration::from_secs(11));
    let store = common::open(dir.path(), &clock);
    let next = common::acquire(&store, "t", "cp", b"fp");
    assert!(next.is_takeover());
    assert_eq!(next.checkpoint().map(|c| c.phase.as_str()), Some("half"));
    assert_eq!(common::acquire(&store, "t", "rel", b"fp").attempt(), 2);
    assert!(matches!(
        store
            .claim("t", "term", b"fp", ClaimOptions::default())
            .unwrap(),
        Claim::Failed(_)
    ));
}

#[test]
fn a_takeover_of_a_stored_record_stays_in_memory_above_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let first = common::acquire_durable(&store, "t", "k", b"fp");
    assert_eq!(store.physical_counts().unwrap(), (1, 1));
    clock.advance(Duration::from_secs(11)); // past the 10 s lease
    let second = common::acquire(&store, "t", "k", b"fp");
    assert!(second.is_takeover() && second.attempt() == 2);
    assert_eq!(
        store.get("t", "k").unwrap().unwrap().fence,
        second.fence(),
        "the in-memory record is current"
    );
    assert_eq!(
        store.complete(&first, Response::new("late")).unwrap(),
        Err(LeaseLost::TakenOver {
            current_fence: second.fence()
        })
    );
    // Completing writes over the stored record, replacing its index entry.
    store
        .complete(&second, Response::new("done"))
        .unwrap()
        .unwrap();
    assert_eq!(store.physical_counts().unwrap(), (1, 1));
    store.close().unwrap();
    let store = common::open(dir.path(), &clock);
    assert!(matches!(
        store
            .claim("t", "k", b"fp", ClaimOptions::default())
            .unwrap(),
        Claim::Completed(_)
    ));
}

#[test]
fn past_the_cap_and_on_request_the_pending_record_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::config(dir.path(), &clock)
        .pending_in_memory(2)
        .open()
        .unwrap();
    let a = common::acquire(&store, "t", "a", b"fp");
    let _b = common::acquire(&store, "t", "b", b"fp");
    assert_eq!(store.physical_counts().unwrap(), (0, 0));
    assert_eq!(store.stats().unwrap().pending_in_memory, 2);
    let _c = common::acquire(&store, "t", "c", b"fp");
    assert_eq!(
        store.physical_counts().unwrap(),
        (1, 1),
        "past the cap: written, not refused"
    );
    assert_eq!(store.stats().unwrap().pending_in_memory, 2);
    // Room again once one is written.
    store.complete(&a, Response::new("done")).unwrap().unwrap();
    let _d = common::acquire(&store, "t", "d", b"fp");
    assert_eq!(store.physical_counts().unwrap(), (2, 2));
    // Asked for: written at the claim, and still pending after a reopen.
    let _e = store
        .claim(
            "t",
            "e",
            b"fp",
            ClaimOptions::default().durable_pending(true),
        )
        .unwrap();
    assert_eq!(store.physical_counts().unwrap(), (3, 3));
    store.close().unwrap();
    let store = common::open(dir.path(), &clock);
    assert!(matches!(
        store
            .claim("t", "e", b"fp", ClaimOptions::default())
            .unwrap(),
        Claim::InProgress { .. }
    ));
    assert!(matches!(
        store
            .claim("t", "c", b"fp", ClaimOptions::default())
            .unwrap(),
        Claim::InProgress { .. }
    ));
    assert!(store.get("t", "b").unwrap().is_none(), "b was in memory");
}

#[test]
fn forget_and_sweep_drop_in_memory_records() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::config(dir.path(), &clock)
        .pending_in_memory(1)
        .open()
        .unwrap();
    let a = common::acquire(&store, "t", "a", b"fp");
    assert!(
        store.forget("t", "a").unwrap(),
        "an in-memory record is forgotten"
    );
    assert!(store.get("t", "a").unwrap().is_none());
    assert_eq!(
        store.complete(&a, Response::new("x")).unwrap(),
        Err(LeaseLost::Gone)
    );
    // Its room under the cap is back: the next claim stays in memory.
    let _b = common::acquire(&store, "t", "b", b"fp");
    assert_eq!(store.physical_counts().unwrap(), (0, 0));
    // An expired in-memory record reads as absent, and a sweep gives its room back.
    clock.advance(Duration::from_secs(3601));
    assert!(store.get("t", "b").unwrap().is_none());
    store.sweep(usize::MAX).unwrap();
    let _c = common::acquire(&store, "t", "c", b"fp");
    assert_eq!(store.physical_counts().unwrap(), (0, 0));
}
