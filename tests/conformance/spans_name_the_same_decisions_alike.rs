//! The spans of the store's operations are the same on both backends (issue 30: each backend
//! traces its own calls, so nothing else makes them agree): one script of claims (acquired, in
//! progress, replayed, mismatched), a renewal, a checkpoint, a completion, a release, a terminal
//! failure, a lost lease, a commit, reservations and a forget runs on an embedded store and on
//! PostgreSQL, and the spans of its keys, their names and outcomes in the order they closed,
//! must be equal, and be what the script decided.
//!
//! The spans are captured by one global subscriber (the binary's tests run on many threads, and
//! a store's calls run on tokio's workers and blocking pool); each backend's script has keys of
//! its own, and only spans carrying their hashes are compared.

use std::sync::OnceLock;
use std::time::Duration;

use idemdb::{trace_key_hash, Claim, ClaimOptions, FailKind, Response};

use crate::harness::Harness;
use crate::spans::Capture;

fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Capture::default();
        tracing::subscriber::set_global_default(capture.subscriber())
            .expect("no other test installs a global subscriber");
        capture
    })
}

const TENANT: &str = "spans";

async fn acquire(h: &Harness, key: &str) -> idemdb::Lease {
    let opts = ClaimOptions::default().lease(Duration::from_secs(5));
    match h.store.claim(TENANT, key, b"fp", opts).await.unwrap() {
        Claim::Acquired(l) => l,
        other => panic!("{key}: acquired expected, got {other:?}"),
    }
}

/// Runs the script on `h` with keys prefixed by `p`; the keys it used.
async fn script(h: &Harness, p: &str) -> Vec<Vec<u8>> {
    let s = &h.store;
    let k = |n: &str| format!("{p}-{n}");
    let opts = ClaimOptions::default().lease(Duration::from_secs(5));

    let mut l = acquire(h, &k("done")).await;
    let busy = s.claim(TENANT, k("done"), b"fp", opts).await.unwrap();
    assert!(matches!(busy, Claim::InProgress { .. }), "{busy:?}");
    s.renew(&mut l, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    s.checkpoint(&l, "half", b"state".to_vec())
        .await
        .unwrap()
        .unwrap();
    s.complete(&l, Response::new(b"ok".to_vec()))
        .await
        .unwrap()
        .unwrap();
    let replay = s.claim(TENANT, k("done"), b"fp", opts).await.unwrap();
    assert!(matches!(replay, Claim::Completed(_)), "{replay:?}");
    let other = s.claim(TENANT, k("done"), b"other", opts).await.unwrap();
    assert_eq!(other, Claim::Mismatch);

    let l = acquire(h, &k("released")).await;
    s.fail(&l, FailKind::Retryable).await.unwrap().unwrap();
    let l = acquire(h, &k("failed")).await;
    s.fail(&l, FailKind::Terminal(Response::new(b"no".to_vec())))
        .await
        .unwrap()
        .unwrap();

    // A lease taken over: its holder's completion is refused.
    let stale = acquire(h, &k("stale")).await;
    h.advance(Duration::from_secs(6));
    let _current = acquire(h, &k("stale")).await;
    let lost = s
        .complete(&stale, Response::new(b"late".to_vec()))
        .await
        .unwrap();
    assert!(lost.is_err(), "{lost:?}");

    let l = acquire(h, &k("committed")).await;
    s.commit()
        .complete(&l, Response::new(b"ok".to_vec()))
        .apply()
        .await
        .unwrap()
        .unwrap();

    let email = k("email");
    let r = s
        .reserve(TENANT, &[email.as_bytes()], "owner-1")
        .await
        .unwrap();
    assert!(matches!(r, idemdb::Reservation::Reserved), "{r:?}");
    let r = s
        .reserve(TENANT, &[email.as_bytes()], "owner-2")
        .await
        .unwrap();
    assert!(matches!(r, idemdb::Reservation::Taken { .. }), "{r:?}");

    assert!(s.forget(TENANT, k("done")).await.unwrap());
    ["done", "released", "failed", "stale", "committed"]
        .iter()
        .map(|n| k(n).into_bytes())
        .chain([idemdb::__internal::composite(&[email.as_bytes()])])
        .collect()
}

/// The (name, outcome) of every closed span of `keys`, in the order they closed.
fn spans_of(keys: &[Vec<u8>]) -> Vec<(String, String)> {
    let hashes: Vec<String> = keys
        .iter()
        .map(|k| trace_key_hash(TENANT.as_bytes(), k))
        .collect();
    capture()
        .spans()
        .into_iter()
        .filter(|s| {
            s.field("key_hash")
                .is_some_and(|h| hashes.iter().any(|x| x == h))
        })
        .map(|s| {
            let outcome = s.field("outcome").unwrap_or("-").to_string();
            (s.name, outcome)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_name_the_same_decisions_alike() {
    capture();
    let e = Harness::embedded(|c| c).await;
    let keys = script(&e, "e").await;
    let embedded = spans_of(&keys);
    let pg = Harness::postgres(module_path!(), |c| c).await;
    let keys = script(&pg, "p").await;
    let postgres = spans_of(&keys);
    pg.cleanup().await;

    let expected: Vec<(String, String)> = [
        ("claim", "acquired"),
        ("claim", "in_progress"),
        ("renew", "renewed"),
        ("checkpoint", "checkpointed"),
        ("complete", "completed"),
        ("claim", "replayed"),
        ("claim", "mismatch"),
        ("claim", "acquired"),
        ("fail", "released"),
        ("claim", "acquired"),
        ("fail", "failed"),
        ("claim", "acquired"),
        ("claim", "taken_over"),
        ("complete", "lease_lost"),
        ("claim", "acquired"),
        ("reserve", "reserved"),
        ("reserve", "taken"),
    ]
    .iter()
    .map(|(n, o)| (format!("idemdb.{n}"), o.to_string()))
    .collect();
    assert_eq!(embedded, expected, "the embedded store's spans");
    assert_eq!(
        postgres, embedded,
        "PostgreSQL's spans, against the embedded store's"
    );
}
