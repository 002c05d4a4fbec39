//! `fail` either releases the key for a retry (the attempt counter goes up) or stores a terminal
//! failure that later claims replay.
use idemdb::{Claim, ClaimOptions, FailKind, ManualClock, Response};

use crate::common;

#[test]
fn retryable_releases_terminal_replays() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let l1 = common::acquire(&store, "t", "k", b"fp");
    assert_eq!(l1.attempt(), 1);
    store.fail(&l1, FailKind::Retryable).unwrap().unwrap();
    let l2 = common::acquire(&store, "t", "k", b"fp");
    assert_eq!(l2.attempt(), 2);
    assert!(!l2.is_takeover());
    let declined = Response::new("card declined").with_status(402);
    store
        .fail(&l2, FailKind::Terminal(declined.clone()))
        .unwrap()
        .unwrap();
    for _ in 0..3 {
        match store
            .claim("t", "k", b"fp", ClaimOptions::default())
            .unwrap()
        {
            Claim::Failed(r) => assert_eq!(r.response, declined),
            other => panic!("{other:?}"),
        }
    }
    let c = store.stats().unwrap().counters;
    assert_eq!(
        (c.failed_retryable, c.failed_terminal, c.replayed),
        (1, 1, 3)
    );
}
