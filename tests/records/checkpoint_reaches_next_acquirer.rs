//! Recovery point: a caller checkpoints, "crashes" (drops its lease), the next acquirer gets the
//! checkpoint and resumes; a completion clears it.
use std::time::Duration;

use idemdb::{Checkpoint, FailKind, ManualClock, Response};

use crate::common;

#[test]
fn next_acquirer_receives_the_last_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let first = common::acquire(&store, "t", "order-1", b"fp");
    assert!(first.checkpoint().is_none());
    store
        .checkpoint(&first, "reserved", b"stock#1".to_vec())
        .unwrap()
        .unwrap();
    store
        .checkpoint(&first, "charged", b"charge#9".to_vec())
        .unwrap()
        .unwrap();
    drop(first); // crash: the lease is never completed

    clock.advance(Duration::from_secs(11));
    let second = common::acquire(&store, "t", "order-1", b"fp");
    assert_eq!(
        second.checkpoint(),
        Some(&Checkpoint {
            phase: "charged".into(),
            state: b"charge#9".to_vec()
        })
    );
    // A retryable failure keeps the checkpoint for the next attempt too.
    store.fail(&second, FailKind::Retryable).unwrap().unwrap();
    let third = common::acquire(&store, "t", "order-1", b"fp");
    assert_eq!(
        third.checkpoint().map(|c| c.phase.as_str()),
        Some("charged")
    );
    assert!(!third.is_takeover());
    store
        .complete(&third, Response::new("ok"))
        .unwrap()
        .unwrap();
    assert!(store
        .get("t", "order-1")
        .unwrap()
        .unwrap()
        .checkpoint
        .is_none());
}
