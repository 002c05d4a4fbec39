//! A claim with `ClaimOptions::wait` that finds the key's lease held by another instance waits
//! for that lease to end and answers with its outcome: the holder's stored response when it
//! completes, the key acquired when it releases or is forgotten, the key taken over when its
//! lease runs out (a holder that crashed), and `InProgress` at the bound. On PostgreSQL the
//! holder and the waiters are separate stores (as separate processes of a fleet would be), woken
//! by `LISTEN/NOTIFY`; embedded, tasks of the one process that holds the store.

use std::time::{Duration, Instant};

use idemdb::{AsyncStore, Claim, ClaimOptions, FailKind, Response};
use tokio::task::JoinHandle;

use crate::harness::{admin_in_schema, Harness};

/// Longer than any test here takes: a wait that is never woken fails at its bound.
const BOUND: Duration = Duration::from_secs(20);

fn held() -> ClaimOptions {
    ClaimOptions::default().lease(Duration::from_secs(60))
}

fn waiting() -> ClaimOptions {
    held().wait(BOUND)
}

fn spawn_waiter(store: &AsyncStore, key: &'static str, opts: ClaimOptions) -> JoinHandle<Claim> {
    let store = store.clone();
    tokio::spawn(async move { store.claim("t", key, b"fp", opts).await.unwrap() })
}

/// Until `n` waiters are waiting on `key`: on PostgreSQL, until the key's row is marked waiting
/// (each waiter marks it before it waits); embedded, a moment in which none of them may finish.
async fn until_waiting(h: &Harness, key: &str, waiters: &[JoinHandle<Claim>]) {
    if let Some(schema) = h.schema() {
        let url = admin_in_schema(&schema);
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(conn);
        let since = Instant::now();
        loop {
            let row = client
                .query_opt(
                    "SELECT waiting FROM idemdb_requests WHERE ns = 0 AND key = $1",
                    &[&key.as_bytes()],
                )
                .await
                .unwrap();
            if row.is_some_and(|r| r.get::<_, bool>(0)) {
                break;
            }
            assert!(
                since.elapsed() < Duration::from_secs(30),
                "waited 30 s for a waiter to mark the row of {key:?} waiting"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(client);
        let _ = task.await;
    }
    // Every waiter in its wait (embedded) or past its mark (PostgreSQL: the first marked it).
    tokio::time::sleep(Duration::from_millis(200)).await;
    for w in waiters {
        assert!(
            !w.is_finished(),
            "a waiter answered while the lease was held"
        );
    }
}

async fn check(h: &Harness) {
    let a = &h.store;
    let b = h.another_instance().await;

    // Completed: every waiter, on the other instance, gets the holder's response.
    let Claim::Acquired(lease) = a.claim("t", "done", b"fp", held()).await.unwrap() else {
        panic!("acquires");
    };
    let waiters: Vec<_> = (0..20)
        .map(|_| spawn_waiter(&b, "done", waiting()))
        .collect();
    until_waiting(h, "done", &waiters).await;
    let receipt = Response::new(b"charged 100".to_vec()).with_status(201);
    let completed = Instant::now();
    a.complete(&lease, receipt.clone()).await.unwrap().unwrap();
    for w in waiters {
        match w.await.unwrap() {
            Claim::Completed(replay) => assert_eq!(replay.response, receipt),
            other => panic!("a waiter got {other:?} instead of the holder's response"),
        }
    }
    println!(
        "20 waiters answered {:?} after the completion",
        completed.elapsed()
    );

    // Released: one waiter acquires the key; the others wait for that one, and replay its answer.
    let Claim::Acquired(lease) = a.claim("t", "released", b"fp", held()).await.unwrap() else {
        panic!("acquires");
    };
    let waiters: Vec<_> = (0..3)
        .map(|_| spawn_waiter(&b, "released", waiting()))
        .collect();
    until_waiting(h, "released", &waiters).await;
    a.fail(&lease, FailKind::Retryable).await.unwrap().unwrap();
    let mut acquired = 0;
    let mut pending = Vec::new();
    for w in waiters {
        pending.push(tokio::spawn({
            let b = b.clone();
            async move {
                let claim = w.await.unwrap();
                if let Claim::Acquired(l) = &claim {
                    assert_eq!(l.attempt(), 2, "the released key's next attempt");
                    b.complete(l, Response::new(b"second".to_vec()))
                        .await
                        .unwrap()
                        .unwrap();
                }
                claim
            }
        }));
    }
    for p in pending {
        match p.await.unwrap() {
            Claim::Acquired(_) => acquired += 1,
            Claim::Completed(r) => assert_eq!(r.response.body, b"second"),
            other => panic!("after a release a waiter got {other:?}"),
        }
    }
    assert_eq!(acquired, 1, "exactly one waiter acquires a released key");

    // The bound: a holder that neither ends nor loses its lease leaves the waiter InProgress.
    let Claim::Acquired(_slow) = a.claim("t", "slow", b"fp", held()).await.unwrap() else {
        panic!("acquires");
    };
    let bound = Duration::from_millis(300);
    let asked = Instant::now();
    match b
        .claim("t", "slow", b"fp", held().wait(bound))
        .await
        .unwrap()
    {
        Claim::InProgress { retry_after } => assert!(retry_after <= Duration::from_secs(60)),
        other => panic!("at the bound a waiter got {other:?}"),
    }
    assert!(asked.elapsed() >= bound, "the claim waited for its bound");

    // A crashed holder: its lease runs out (by the store's clock), and the waiter takes over.
    let short = ClaimOptions::default().lease(Duration::from_secs(1));
    let Claim::Acquired(crashed) = a.claim("t", "crashed", b"fp", short).await.unwrap() else {
        panic!("acquires");
    };
    let waiter = spawn_waiter(&b, "crashed", short.wait(BOUND));
    until_waiting(h, "crashed", std::slice::from_ref(&waiter)).await;
    h.advance(Duration::from_secs(2));
    match waiter.await.unwrap() {
        Claim::Acquired(l) => assert!(l.is_takeover() && l.fence() > crashed.fence()),
        other => panic!("a lease that ran out was not taken over by its waiter: {other:?}"),
    }

    // Forgotten (an operator's `idemdb forget`): the waiter claims again and acquires the key.
    let Claim::Acquired(_forgotten) = a.claim("t", "forgotten", b"fp", held()).await.unwrap()
    else {
        panic!("acquires");
    };
    let waiter = spawn_waiter(&b, "forgotten", waiting());
    until_waiting(h, "forgotten", std::slice::from_ref(&waiter)).await;
    assert!(a.forget("t", "forgotten").await.unwrap());
    match waiter.await.unwrap() {
        Claim::Acquired(l) => assert_eq!(l.attempt(), 1, "a forgotten key starts afresh"),
        other => panic!("after a forget the waiter got {other:?}"),
    }

    // A claim that finds the key free or finished never waits.
    let asked = Instant::now();
    assert!(matches!(
        b.claim("t", "done", b"fp", waiting()).await.unwrap(),
        Claim::Completed(_)
    ));
    assert!(matches!(
        b.claim("t", "new", b"fp", waiting()).await.unwrap(),
        Claim::Acquired(_)
    ));
    println!("two claims with nothing to wait for: {:?}", asked.elapsed());
}

on_both_backends!(check);
