//! The HTTP layer written once over the async store runs alike on both backends: a request runs
//! its handler once and its retry replays the stored response; another principal's same key is
//! its own; a changed body gets 422; concurrent twins run the handler once (409 for the others,
//! then a replay); a 5xx or a panic releases the key, so that a retry runs again.

use std::sync::atomic::Ordering;

use crate::harness::Harness;
use crate::http_common::{client, req, serve_on};

async fn check(h: &Harness) {
    let (addr, calls, layer) = serve_on(h.store.clone(), |l| l).await;
    let c = client();
    let pay = |key: &str, user: &str, body: &str| {
        req(addr, "POST", "/pay").key(key).user(user).body(body)
    };

    let first = pay("k1", "alice", "10").send(&c).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed());
    let again = pay("k1", "alice", "10").send(&c).await;
    assert_eq!(again.status, 201);
    assert!(again.replayed(), "{again:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("location"), first.header("location"));
    let bob = pay("k1", "bob", "10").send(&c).await;
    assert_eq!(bob.status, 201);
    assert!(!bob.replayed());
    assert_eq!(calls.pay.load(Ordering::SeqCst), 2);

    let changed = pay("k1", "alice", "11").send(&c).await;
    assert_eq!(changed.status, 422);
    assert_eq!(changed.problem_code(), "idempotency-key-reused");

    let twins: Vec<_> = (0..6)
        .map(|_| {
            pay("k2", "alice", "5")
                .header("x-delay-ms", "300")
                .spawn(&c)
        })
        .collect();
    let mut statuses = Vec::new();
    for t in twins {
        statuses.push(t.await.unwrap().status);
    }
    assert_eq!(
        statuses.iter().filter(|&&s| s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|&s| s == 201 || s == 409),
        "{statuses:?}"
    );
    assert_eq!(calls.pay.load(Ordering::SeqCst), 3);
    let later = pay("k2", "alice", "5").send(&c).await;
    assert!(later.status == 201 && later.replayed(), "{later:?}");

    for (path, counter) in [("/boom", &calls.boom), ("/panic", &calls.panic)] {
        for _ in 0..2 {
            let got = req(addr, "POST", path)
                .key(&format!("k3{path}"))
                .user("carol")
                .send(&c)
                .await;
            assert!(got.status >= 500, "{path}: {got:?}");
            assert!(!got.replayed());
        }
        assert_eq!(
            counter.load(Ordering::SeqCst),
            2,
            "{path} ran again after its release"
        );
    }

    let tenant = layer.tenant_of("alice").unwrap();
    let info = h.store.get(&tenant, "k1").await.unwrap().unwrap();
    assert!(matches!(info.state, idemdb::RecordState::Completed(_)));
    let stats = layer.stats();
    assert_eq!((stats.executed, stats.store_errors), (3, 0), "{stats:?}");
}

on_both_backends!(check);
