//! After a run of replays, every kind of claim answers as it would anywhere else. On PostgreSQL a
//! run of claims that find their row makes the store read first (`CLAIM_READ`, docs/design.md,
//! "Reading first when replays are likely"), and a row read first is decided from without the
//! claim statement; so each case below comes after a run of replays that keeps the store reading
//! first: a replay, a terminal failure replayed, a mismatch, a live lease, a released key, a
//! lease run out (a takeover, with a larger token), an expired record (acquired afresh), and a
//! key never seen (the read finds nothing, the claim acquires). Then every record is as those
//! answers left it.

use std::time::Duration;

use idemdb::{AsyncStore, Claim, ClaimOptions, FailKind, RecordState, Response};

use crate::harness::Harness;

const T: &str = "acme";

fn opts() -> ClaimOptions {
    ClaimOptions::default().lease(Duration::from_secs(60))
}

async fn claim(s: &AsyncStore, key: &str, fp: &[u8], opts: ClaimOptions) -> Claim {
    s.claim(T, key, fp, opts).await.unwrap()
}

/// Replays of the completed keys `r-0` .. `r-9`, each checked.
async fn replays(s: &AsyncStore) {
    for i in 0..10 {
        let key = format!("r-{i}");
        match claim(s, &key, b"fp", opts()).await {
            Claim::Completed(r) => assert_eq!(r.response.body, key.as_bytes()),
            other => panic!("{key}: expected a replay, got {other:?}"),
        }
    }
}

async fn acquire(s: &AsyncStore, key: &str, opts: ClaimOptions) -> idemdb::Lease {
    match claim(s, key, b"fp", opts).await {
        Claim::Acquired(l) => l,
        other => panic!("{key}: expected to acquire, got {other:?}"),
    }
}

async fn check(h: &Harness) {
    let s = &h.store;
    for i in 0..10 {
        let key = format!("r-{i}");
        let l = acquire(s, &key, opts()).await;
        s.complete(&l, Response::new(key.clone().into_bytes()))
            .await
            .unwrap()
            .unwrap();
    }
    let live = acquire(
        s,
        "live",
        ClaimOptions::default().lease(Duration::from_secs(600)),
    )
    .await;
    let released = acquire(s, "released", opts()).await;
    s.fail(&released, FailKind::Retryable)
        .await
        .unwrap()
        .unwrap();
    let term = acquire(s, "term", opts()).await;
    let failure = Response::new(b"declined".to_vec()).with_status(402);
    s.fail(&term, FailKind::Terminal(failure.clone()))
        .await
        .unwrap()
        .unwrap();
    let short = acquire(
        s,
        "short",
        ClaimOptions::default().lease(Duration::from_secs(1)),
    )
    .await;
    let brief = acquire(
        s,
        "brief",
        ClaimOptions::default()
            .lease(Duration::from_secs(1))
            .retention(Duration::from_secs(2)),
    )
    .await;
    s.complete(&brief, Response::new(b"brief".to_vec()))
        .await
        .unwrap()
        .unwrap();
    h.advance(Duration::from_secs(5));

    replays(s).await;
    replays(s).await;
    match claim(s, "term", b"fp", opts()).await {
        Claim::Failed(r) => assert_eq!(r.response, failure),
        other => panic!("term: expected the stored failure, got {other:?}"),
    }
    replays(s).await;
    assert_eq!(claim(s, "r-0", b"other", opts()).await, Claim::Mismatch);
    replays(s).await;
    match claim(s, "live", b"fp", opts()).await {
        Claim::InProgress { retry_after } => assert!(retry_after <= Duration::from_secs(600)),
        other => panic!("live: expected InProgress, got {other:?}"),
    }
    replays(s).await;
    let again = acquire(s, "released", opts()).await;
    assert_eq!(
        again.attempt(),
        2,
        "released: the next acquirer counts the attempt"
    );
    replays(s).await;
    let taken = acquire(s, "short", opts()).await;
    assert!(taken.is_takeover(), "short: its lease ran out: a takeover");
    assert!(taken.fence() > short.fence());
    replays(s).await;
    let fresh = acquire(s, "brief", opts()).await;
    assert_eq!(fresh.attempt(), 1, "brief: expired, acquired afresh");
    assert!(!fresh.is_takeover());
    replays(s).await;
    let new = acquire(s, "never-seen", opts()).await;
    assert_eq!(new.attempt(), 1);
    for l in [&again, &taken, &fresh, &new] {
        assert!(l.fence() > live.fence(), "tokens increase");
    }

    let state = |key: &'static str| async move { s.get(T, key).await.unwrap().map(|i| i.state) };
    assert!(matches!(
        state("live").await,
        Some(RecordState::Pending { .. })
    ));
    assert!(matches!(
        state("released").await,
        Some(RecordState::Pending { .. })
    ));
    assert!(matches!(state("term").await, Some(RecordState::Failed(_))));
    assert!(matches!(
        state("r-0").await,
        Some(RecordState::Completed(_))
    ));
    let info = s.get(T, "short").await.unwrap().unwrap();
    assert_eq!(info.fence, taken.fence());
    let info = s.get(T, "brief").await.unwrap().unwrap();
    assert_eq!((info.fence, info.attempts), (fresh.fence(), 1));
}

on_both_backends!(check);
