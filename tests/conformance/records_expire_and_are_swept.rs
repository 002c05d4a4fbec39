//! A record is absent from every read the moment its retention ends (a claim then acquires it as
//! new, with any fingerprint), and `sweep` deletes expired records in bounded batches, never a
//! live one.

use std::time::Duration;

use idemdb::{Claim, ClaimOptions, Response};

use crate::harness::Harness;

async fn check(h: &Harness) {
    let s = &h.store;
    let short = ClaimOptions::default()
        .lease(Duration::from_secs(1))
        .retention(Duration::from_secs(10));
    let long = short.retention(Duration::from_secs(1000));
    for i in 0..25 {
        let opts = if i < 20 { short } else { long };
        let Claim::Acquired(l) = s.claim("t", format!("k{i}"), b"fp", opts).await.unwrap() else {
            panic!("acquires");
        };
        s.complete(&l, Response::new(b"r".to_vec()))
            .await
            .unwrap()
            .unwrap();
    }
    h.advance(Duration::from_millis(9_999));
    assert!(s.get("t", "k0").await.unwrap().is_some());
    h.advance(Duration::from_millis(1));
    assert_eq!(
        s.get("t", "k0").await.unwrap(),
        None,
        "absent when retention ends"
    );
    assert!(matches!(
        s.claim("t", "k0", b"another", short).await.unwrap(),
        Claim::Acquired(l) if l.attempt() == 1
    ));
    // k1..k19 are expired (19), k0 was re-acquired, k20..k24 are live.
    let mut swept = 0;
    loop {
        let n = s.sweep(7).await.unwrap();
        assert!(n <= 7);
        swept += n;
        if n == 0 {
            break;
        }
    }
    assert_eq!(swept, 19);
    for i in 20..25 {
        assert!(s.get("t", format!("k{i}")).await.unwrap().is_some());
    }
    assert!(s.get("t", "k0").await.unwrap().is_some());
}

on_both_backends!(check);
