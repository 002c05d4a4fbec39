//! Consumer groups alike on both backends: a delivery is processed once and its duplicates are
//! acknowledged with the stored outcome; a live delivery is in progress for other workers; failed
//! attempts release the message until `max_attempts`, then it is poisoned, and so is a message
//! whose workers keep crashing (their leases run out); forgetting a message gives it back its
//! attempts; groups never meet request tenants of the same name; of many concurrent deliveries
//! of one message exactly one is processed.

use std::time::Duration;

use idemdb::{Begin, Claim, ClaimOptions, ConsumerOptions, MessageFailed, Response};

use crate::harness::Harness;

async fn check(h: &Harness) {
    let s = &h.store;
    let opts = ConsumerOptions::default()
        .max_attempts(3)
        .lease(Duration::from_secs(10));

    // Processed once; redeliveries replay the stored outcome.
    let Begin::Process(lease) = s.begin("billing", "m1", opts).await.unwrap() else {
        panic!("a new message is processed");
    };
    assert_eq!(lease.attempt(), 1);
    assert!(matches!(
        s.begin("billing", "m1", opts).await.unwrap(),
        Begin::InProgress { retry_after } if retry_after > Duration::ZERO
    ));
    s.complete(&lease, Response::new(b"done".to_vec()))
        .await
        .unwrap()
        .unwrap();
    match s.begin("billing", "m1", opts).await.unwrap() {
        Begin::Completed(r) => assert_eq!(r.response.body, b"done"),
        other => panic!("a duplicate delivery is acknowledged, got {other:?}"),
    }
    // Another group is another namespace, and so is a request tenant of the group's name.
    assert!(matches!(
        s.begin("shipping", "m1", opts).await.unwrap(),
        Begin::Process(_)
    ));
    assert!(matches!(
        s.claim("billing", "m1", b"", ClaimOptions::default())
            .await
            .unwrap(),
        Claim::Acquired(_)
    ));

    // Failed attempts release the message, the last one poisons it.
    for attempt in 1..=3 {
        let Begin::Process(lease) = s.begin("billing", "m2", opts).await.unwrap() else {
            panic!("attempt {attempt} is handed out");
        };
        assert_eq!(lease.attempt(), attempt);
        let failed = s.fail_message(&lease, opts).await.unwrap().unwrap();
        if attempt < 3 {
            assert_eq!(failed, MessageFailed::WillRetry { attempts: attempt });
        } else {
            assert_eq!(failed, MessageFailed::Poisoned { attempts: 3 });
        }
    }
    assert_eq!(
        s.begin("billing", "m2", opts).await.unwrap(),
        Begin::Poisoned { attempts: 3 }
    );
    // Forgetting it gives it back its attempts.
    assert!(s.forget_message("billing", "m2").await.unwrap());
    assert!(!s.forget_message("billing", "m2").await.unwrap());
    match s.begin("billing", "m2", opts).await.unwrap() {
        Begin::Process(l) => assert_eq!(l.attempt(), 1),
        other => panic!("a forgotten message starts again, got {other:?}"),
    }

    // Workers that crash (their leases run out) count as attempts too.
    for attempt in 1..=3 {
        let Begin::Process(lease) = s.begin("billing", "m3", opts).await.unwrap() else {
            panic!("attempt {attempt} is handed out");
        };
        assert_eq!(lease.attempt(), attempt);
        h.advance(Duration::from_secs(11));
    }
    assert_eq!(
        s.begin("billing", "m3", opts).await.unwrap(),
        Begin::Poisoned { attempts: 3 }
    );

    // Many workers receive one message at once: exactly one processes it.
    for round in 0..5 {
        let id = format!("race-{round}");
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (s, id) = (s.clone(), id.clone());
            tasks.push(tokio::spawn(async move {
                match s.begin("billing", &id, opts).await.unwrap() {
                    Begin::Process(l) => {
                        s.complete(&l, Response::new(Vec::new()))
                            .await
                            .unwrap()
                            .unwrap();
                        1
                    }
                    Begin::InProgress { .. } | Begin::Completed(_) => 0,
                    other => panic!("unexpected {other:?}"),
                }
            }));
        }
        let mut processed = 0;
        for t in tasks {
            processed += t.await.unwrap();
        }
        assert_eq!(processed, 1, "round {round}");
    }
}

on_both_backends!(check);
