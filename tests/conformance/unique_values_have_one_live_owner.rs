//! Unique reservations alike on both backends: a value has at most one live owner; only the
//! owner releases it; a reservation bound to a lease is owned by the lease (no plain owner, nor
//! another tenant's lease of the same key, can take or release it) and frees itself when the
//! lease ends (completed, or run out); a lease no longer held cannot reserve; composite values
//! are compared part by part; of concurrent reservations of one value exactly one wins.

use std::time::Duration;

use idemdb::{Claim, ClaimOptions, LeaseLost, Released, Reservation, Response};

use crate::harness::Harness;

fn taken(owner: &[u8]) -> Reservation {
    Reservation::Taken {
        owner: owner.to_vec(),
    }
}

async fn check(h: &Harness) {
    let s = &h.store;
    let email: &[&[u8]] = &[b"a@example.com"];
    assert_eq!(
        s.reserve("email", email, "u1").await.unwrap(),
        Reservation::Reserved
    );
    assert_eq!(
        s.reserve("email", email, "u1").await.unwrap(),
        Reservation::Reserved
    );
    assert_eq!(s.reserve("email", email, "u2").await.unwrap(), taken(b"u1"));
    assert_eq!(
        s.reservation_owner("email", email).await.unwrap(),
        Some(b"u1".to_vec())
    );
    // Another index is another namespace.
    assert_eq!(
        s.reserve("login", email, "u2").await.unwrap(),
        Reservation::Reserved
    );
    assert_eq!(
        s.release_reservation("email", email, "u2").await.unwrap(),
        Released::NotOwner {
            owner: b"u1".to_vec()
        }
    );
    assert_eq!(
        s.release_reservation("email", email, "u1").await.unwrap(),
        Released::Released
    );
    assert_eq!(
        s.release_reservation("email", email, "u1").await.unwrap(),
        Released::Absent
    );
    assert_eq!(s.reservation_owner("email", email).await.unwrap(), None);

    // Composite values: ("a", "bc") and ("ab", "c") are different values.
    assert_eq!(
        s.reserve("pair", &[b"a", b"bc"], "x").await.unwrap(),
        Reservation::Reserved
    );
    assert_eq!(
        s.reserve("pair", &[b"ab", b"c"], "y").await.unwrap(),
        Reservation::Reserved
    );

    // Bound to a lease: owned by the lease, not by its key's bytes nor another tenant's lease.
    let lease_for = |tenant: &'static str, key: &'static str| {
        let s = s.clone();
        async move {
            match s
                .claim(
                    tenant,
                    key,
                    b"fp",
                    ClaimOptions::default().lease(Duration::from_secs(10)),
                )
                .await
                .unwrap()
            {
                Claim::Acquired(l) => l,
                other => panic!("{other:?}"),
            }
        }
    };
    let a = lease_for("tenant-a", "k1").await;
    let b = lease_for("tenant-b", "k1").await;
    let sku: &[&[u8]] = &[b"sku-1"];
    assert_eq!(
        s.reserve_for(&a, "sku", sku).await.unwrap(),
        Ok(Reservation::Reserved)
    );
    assert_eq!(
        s.reserve_for(&a, "sku", sku).await.unwrap(),
        Ok(Reservation::Reserved)
    );
    assert_eq!(s.reserve_for(&b, "sku", sku).await.unwrap(), Ok(taken(b"")));
    assert_eq!(s.reserve("sku", sku, "k1").await.unwrap(), taken(b""));
    assert_eq!(
        s.release_reservation("sku", sku, "k1").await.unwrap(),
        Released::NotOwner { owner: Vec::new() }
    );
    assert_eq!(
        s.reservation_owner("sku", sku).await.unwrap(),
        Some(Vec::new())
    );
    // The lease completes: the value is free, with no write, and the finished lease cannot
    // reserve again.
    s.complete(&a, Response::new(Vec::new()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.reservation_owner("sku", sku).await.unwrap(), None);
    assert_eq!(
        s.reserve_for(&a, "sku", sku).await.unwrap(),
        Err(LeaseLost::Finished)
    );
    assert_eq!(
        s.reserve_for(&b, "sku", sku).await.unwrap(),
        Ok(Reservation::Reserved)
    );
    // That lease runs out: the value is free again; a takeover's new holder is the owner now.
    h.advance(Duration::from_secs(11));
    assert_eq!(s.reservation_owner("sku", sku).await.unwrap(), None);
    let b2 = lease_for("tenant-b", "k1").await;
    assert!(b2.is_takeover());
    assert!(matches!(
        s.reserve_for(&b, "sku", sku).await.unwrap(),
        Err(LeaseLost::TakenOver { .. })
    ));
    assert_eq!(
        s.reserve_for(&b2, "sku", sku).await.unwrap(),
        Ok(Reservation::Reserved)
    );
    assert_eq!(s.reserve("sku", sku, "u9").await.unwrap(), taken(b""));
    // A sweep (on PostgreSQL it also deletes reservations whose lease ended) changes no answer.
    let sku2: &[&[u8]] = &[b"sku-2"];
    assert_eq!(
        s.reserve_for(&b2, "sku", sku2).await.unwrap(),
        Ok(Reservation::Reserved)
    );
    s.complete(&b2, Response::new(Vec::new()))
        .await
        .unwrap()
        .unwrap();
    s.sweep(1_000).await.unwrap();
    assert_eq!(s.reservation_owner("sku", sku2).await.unwrap(), None);
    assert_eq!(s.reservation_owner("sku", sku).await.unwrap(), None);
    assert_eq!(s.reservation_owner("email", email).await.unwrap(), None);
    assert_eq!(
        s.reservation_owner("pair", &[b"a", b"bc"]).await.unwrap(),
        Some(b"x".to_vec())
    );
    assert_eq!(
        s.reserve("sku", sku2, "u9").await.unwrap(),
        Reservation::Reserved
    );

    // Eight owners race for one value: exactly one reserves it.
    for round in 0..5 {
        let value = format!("race-{round}");
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (s, value) = (s.clone(), value.clone());
            tasks.push(tokio::spawn(async move {
                s.reserve("race", &[value.as_bytes()], format!("owner-{i}"))
                    .await
                    .unwrap()
                    == Reservation::Reserved
            }));
        }
        let mut won = 0;
        for t in tasks {
            won += u32::from(t.await.unwrap());
        }
        assert_eq!(won, 1, "round {round}");
    }
}

on_both_backends!(check);
