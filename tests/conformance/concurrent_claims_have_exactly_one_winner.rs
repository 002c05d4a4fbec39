//! Of many concurrent claims of one key, exactly one acquires; the others see it in progress
//! (or, once it completed, its replay). Repeated over several keys.

use idemdb::{Claim, ClaimOptions, Response};

use crate::harness::Harness;

async fn check(h: &Harness) {
    for round in 0..10 {
        let key = format!("race-{round}");
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (s, key) = (h.store.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                match s
                    .claim("t", &key, b"fp", ClaimOptions::default())
                    .await
                    .unwrap()
                {
                    Claim::Acquired(l) => {
                        s.complete(&l, Response::new(b"done".to_vec()))
                            .await
                            .unwrap()
                            .unwrap();
                        1
                    }
                    Claim::InProgress { .. } | Claim::Completed(_) => 0,
                    other => panic!("unexpected {other:?}"),
                }
            }));
        }
        let mut winners = 0;
        for t in tasks {
            winners += t.await.unwrap();
        }
        assert_eq!(winners, 1, "round {round}");
    }
}

on_both_backends!(check);
