//! The outcome counters (`AsyncStore::counters`) count alike on both backends where the two once
//! disagreed (issue 30): a lease ended inside a commit counts as completed, released or failed,
//! and a commit refused for a lost lease counts `lease_lost`, as a holder's own call does; a
//! forgotten consumer message counts as `forgotten`, as a forgotten request record does. (On
//! PostgreSQL, commits counted no lease end and no lost lease, and `forget_message` counted
//! nothing.)

use std::time::Duration;

use idemdb::{Begin, Claim, ClaimOptions, ConsumerOptions, FailKind, Response};

use crate::harness::Harness;

async fn acquire(h: &Harness, key: &str) -> idemdb::Lease {
    match h
        .store
        .claim(
            "acme",
            key,
            b"fp",
            ClaimOptions::default().lease(Duration::from_secs(5)),
        )
        .await
        .unwrap()
    {
        Claim::Acquired(l) => l,
        other => panic!("{key}: acquired expected, got {other:?}"),
    }
}

async fn check(h: &Harness) {
    let s = &h.store;
    let before = s.counters().unwrap();

    let l = acquire(h, "c-complete").await;
    s.commit()
        .complete(&l, Response::new(b"ok".to_vec()))
        .apply()
        .await
        .unwrap()
        .unwrap();
    let l = acquire(h, "c-release").await;
    s.commit()
        .fail(&l, FailKind::Retryable)
        .apply()
        .await
        .unwrap()
        .unwrap();
    let l = acquire(h, "c-fail").await;
    s.commit()
        .fail(&l, FailKind::Terminal(Response::new(b"no".to_vec())))
        .apply()
        .await
        .unwrap()
        .unwrap();
    // A lease taken over before its commit: the commit is refused, and counted as a lost lease.
    let stale = acquire(h, "c-stale").await;
    h.advance(Duration::from_secs(6));
    let _current = acquire(h, "c-stale").await;
    let refused = s
        .commit()
        .complete(&stale, Response::new(b"late".to_vec()))
        .apply()
        .await
        .unwrap();
    assert!(refused.is_err(), "a stale lease's commit is refused");

    let opts = ConsumerOptions::default();
    let Begin::Process(m) = s.begin("billing", "m-1", opts).await.unwrap() else {
        panic!("a new message is processed");
    };
    s.complete(&m, Response::new(Vec::new()))
        .await
        .unwrap()
        .unwrap();
    assert!(s.forget_message("billing", "m-1").await.unwrap());
    assert!(!s.forget_message("billing", "m-none").await.unwrap());

    let after = s.counters().unwrap();
    let d = |a: u64, b: u64| a - b;
    assert_eq!(
        (
            d(after.completed, before.completed),
            d(after.failed_retryable, before.failed_retryable),
            d(after.failed_terminal, before.failed_terminal),
        ),
        (2, 1, 1),
        "lease ends counted: two completions (one by a commit, the message by its holder), one \
         release, one terminal failure"
    );
    assert_eq!(
        d(after.lease_lost, before.lease_lost),
        1,
        "the stale commit"
    );
    assert_eq!(
        d(after.forgotten, before.forgotten),
        1,
        "the forgotten message"
    );
}

on_both_backends!(check);
