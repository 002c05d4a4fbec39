//! Unique constraints: 32 threads race to reserve one value and exactly one wins; a reservation
//! bound to a pending record disappears when the record completes, fails or its lease expires, and
//! not before; composite values are unambiguous; a reservation can join a commit.
use std::sync::Barrier;
use std::sync::Mutex;
use std::time::Duration;

use idemdb::{CommitConflict, FailKind, ManualClock, Released, Reservation, Response};

use crate::common;

#[test]
fn exactly_one_of_32_reserves() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    for round in 0..20 {
        let value = format!("user{round}@example.com");
        let barrier = Barrier::new(32);
        let wins = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..32 {
                let (store, barrier, wins, value) = (&store, &barrier, &wins, &value);
                s.spawn(move || {
                    barrier.wait();
                    let owner = format!("account-{t}");
                    if store.reserve("email", &[value.as_bytes()], &owner).unwrap()
                        == Reservation::Reserved
                    {
                        wins.lock().unwrap().push(owner);
                    }
                });
            }
        });
        let wins = wins.into_inner().unwrap();
        assert_eq!(wins.len(), 1, "round {round}");
        let owner = store
            .reservation_owner("email", &[value.as_bytes()])
            .unwrap();
        assert_eq!(owner.as_deref(), Some(wins[0].as_bytes()));
        assert_eq!(
            store
                .release_reservation("email", &[value.as_bytes()], "someone-else")
                .unwrap(),
            Released::NotOwner {
                owner: wins[0].clone().into_bytes()
            }
        );
        assert_eq!(
            store
                .release_reservation("email", &[value.as_bytes()], &wins[0])
                .unwrap(),
            Released::Released
        );
    }
    // Composite values: ("ab", "c") and ("a", "bc") are different values.
    assert_eq!(
        store.reserve("pair", &[b"ab", b"c"], "x").unwrap(),
        Reservation::Reserved
    );
    assert_eq!(
        store.reserve("pair", &[b"a", b"bc"], "y").unwrap(),
        Reservation::Reserved
    );
}

#[test]
fn bound_reservation_lives_exactly_as_long_as_the_pending_lease() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let v: &[&[u8]] = &[b"invoice-9", b"refund"];
    let taken = |store: &idemdb::Store| {
        store.reserve("pending", v, "intruder").unwrap() != Reservation::Reserved
    };

    // Completes: freed.
    let l = common::acquire(&store, "t", "op-1", b"");
    assert_eq!(
        store.reserve_for(&l, "pending", v).unwrap(),
        Ok(Reservation::Reserved)
    );
    assert!(taken(&store));
    store.complete(&l, Response::new("ok")).unwrap().unwrap();
    assert!(!taken(&store));
    assert_eq!(
        store.release_reservation("pending", v, "intruder").unwrap(),
        Released::Released
    );

    // Fails (retryable or terminal): freed.
    for kind in [FailKind::Retryable, FailKind::Terminal(Response::new("no"))] {
        let key = format!("op-{kind:?}");
        let l = common::acquire(&store, "t", &key, b"");
        assert_eq!(
            store.reserve_for(&l, "pending", v).unwrap(),
            Ok(Reservation::Reserved)
        );
        assert!(taken(&store));
        store.fail(&l, kind).unwrap().unwrap();
        assert!(!taken(&store));
        let _ = store.release_reservation("pending", v, "intruder").unwrap();
    }

    // Lease expiry: held until the lease ends, freed after.
    let l = common::acquire(&store, "t", "op-3", b"");
    let _ = store.reserve_for(&l, "pending", v).unwrap().unwrap();
    clock.advance(Duration::from_secs(9));
    assert!(taken(&store), "still pending");
    clock.advance(Duration::from_secs(2));
    assert!(!taken(&store), "lease expired");

    // Joins a commit: nothing is written if the value is taken.
    let out = store
        .commit()
        .put("t", "order", idemdb::Expect::Absent, "x")
        .reserve("pending", v, "other")
        .apply()
        .unwrap();
    assert_eq!(
        out,
        Err(CommitConflict::Taken {
            op: 1,
            owner: b"intruder".to_vec()
        })
    );
    assert!(store.get_entity("t", "order").unwrap().is_none());
}
