//! Lease expiry: a second caller takes over; the first caller's late `complete` is refused and the
//! stored result is the second caller's.
use std::time::Duration;

use idemdb::{Claim, ClaimOptions, LeaseLost, ManualClock, RecordState, Response};

use crate::common;

#[test]
fn takeover_after_lease_expiry_fences_out_the_first_holder() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let first = common::acquire(&store, "t", "k", b"fp");

    clock.advance(Duration::from_secs(5));
    match store
        .claim("t", "k", b"fp", ClaimOptions::default())
        .unwrap()
    {
        Claim::InProgress { retry_after } => assert_eq!(retry_after, Duration::from_secs(5)),
        other => panic!("live lease must block: {other:?}"),
    }

    clock.advance(Duration::from_secs(6));
    let second = common::acquire(&store, "t", "k", b"fp");
    assert!(second.is_takeover());
    assert!(second.fence() > first.fence());
    assert_eq!(second.attempt(), 2);

    let late = store.complete(&first, Response::new("first")).unwrap();
    assert_eq!(
        late,
        Err(LeaseLost::TakenOver {
            current_fence: second.fence()
        })
    );
    let mut stale = first.clone();
    assert!(store
        .renew(&mut stale, Duration::from_secs(1))
        .unwrap()
        .is_err());
    assert!(store.checkpoint(&first, "x", vec![1]).unwrap().is_err());

    store
        .complete(&second, Response::new("second"))
        .unwrap()
        .unwrap();
    let info = store.get("t", "k").unwrap().unwrap();
    match info.state {
        RecordState::Completed(r) => assert_eq!(r.response.body, b"second"),
        other => panic!("{other:?}"),
    }
    assert_eq!(info.takeovers, 1);
    // The first holder's late failure changes nothing either.
    assert_eq!(
        store.fail(&first, idemdb::FailKind::Retryable).unwrap(),
        Err(LeaseLost::Finished)
    );
    let c = store.stats().unwrap().counters;
    assert_eq!((c.takeover, c.lease_lost), (1, 4));
}
