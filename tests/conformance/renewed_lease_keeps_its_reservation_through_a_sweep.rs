//! Regression (found by the shared model on PostgreSQL, 2026-12-02): a reservation bound to a
//! lease that ran out reads as free, and once its holder renews the lease (nobody took it over)
//! it is the holder's again, whether or not a sweep ran in between. PostgreSQL's sweep deleted
//! such a reservation as soon as the lease ran out, so the renewed holder had lost it while the
//! embedded store kept it. A lease taken over, in turn, frees its reservation for good.

use std::time::Duration;

use idemdb::{Claim, ClaimOptions, Reservation};

use crate::harness::Harness;

async fn check(h: &Harness) {
    let s = &h.store;
    let opts = ClaimOptions::default()
        .lease(Duration::from_secs(1))
        .retention(Duration::from_secs(60));
    let Claim::Acquired(mut lease) = s.claim("t", "k", b"fp", opts).await.unwrap() else {
        panic!("a new key is acquired");
    };
    assert_eq!(
        s.reserve_for(&lease, "email", &[b"a@example.com"])
            .await
            .unwrap(),
        Ok(Reservation::Reserved)
    );
    h.advance(Duration::from_secs(2));
    assert_eq!(
        s.reservation_owner("email", &[b"a@example.com"])
            .await
            .unwrap(),
        None,
        "a reservation whose lease ran out reads as free"
    );
    s.sweep(100).await.unwrap();
    s.renew(&mut lease, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        s.reservation_owner("email", &[b"a@example.com"])
            .await
            .unwrap(),
        Some(Vec::new()),
        "the renewed lease holds its reservation again, sweep or not"
    );
    assert!(matches!(
        s.reserve("email", &[b"a@example.com"], "someone-else")
            .await
            .unwrap(),
        Reservation::Taken { .. }
    ));
    // Taken over: the old lease's reservation is free for good, and a sweep may remove it.
    h.advance(Duration::from_secs(31));
    let Claim::Acquired(_) = s.claim("t", "k", b"fp", opts).await.unwrap() else {
        panic!("a lease that ran out is taken over");
    };
    s.sweep(100).await.unwrap();
    assert_eq!(
        s.reservation_owner("email", &[b"a@example.com"])
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        s.reserve("email", &[b"a@example.com"], "someone-else")
            .await
            .unwrap(),
        Reservation::Reserved
    );
}

on_both_backends!(check);
