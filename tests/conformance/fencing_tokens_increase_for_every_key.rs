//! Fencing tokens strictly increase: across keys, across takeovers, after a record expired and
//! after it was forgotten (a new record never reuses a token).

use std::time::Duration;

use idemdb::{Claim, ClaimOptions, FailKind};

use crate::harness::Harness;

async fn check(h: &Harness) {
    let s = &h.store;
    let opts = ClaimOptions::default()
        .lease(Duration::from_secs(5))
        .retention(Duration::from_secs(60));
    let mut last = 0;
    for i in 0..30 {
        let key = format!("k{}", i % 3);
        let lease = match s.claim("t", &key, b"fp", opts).await.unwrap() {
            Claim::Acquired(l) => l,
            other => panic!("step {i}: expected to acquire, got {other:?}"),
        };
        assert!(
            lease.fence() > last,
            "step {i}: {} after {last}",
            lease.fence()
        );
        last = lease.fence();
        match i % 4 {
            0 => s.fail(&lease, FailKind::Retryable).await.unwrap().unwrap(),
            1 => h.advance(Duration::from_secs(6)), // the lease runs out: a takeover
            2 => assert!(s.forget("t", &key).await.unwrap()),
            _ => h.advance(Duration::from_secs(61)), // the record expires
        }
    }
}

on_both_backends!(check);
