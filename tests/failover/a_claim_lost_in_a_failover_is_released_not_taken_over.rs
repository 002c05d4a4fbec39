//! A claim whose answer is lost in a failover is released by its store, not taken over
//! (regression, issue 42 item 2). An instance reaches the primary of a synchronous pair through a
//! TCP relay (its URL: the relay, then the standby, `target_session_attrs=read-write`). The relay
//! holds everything the primary sends while four claims of new keys are in flight (on connections
//! opened before): each commits
//! on the primary, reaches the standby (synchronous replication: the rows are read there), and
//! its answer never arrives, so the instance answers each as unavailable and runs nothing. The
//! primary is killed and the standby promoted. Once the new primary answers, the instance
//! releases the leases its lost claims took (`PostgresStats::lost_claims_released`), and another
//! instance claiming the keys after their leases ran out acquires them as a new attempt
//! (attempt 2), never as a takeover: nobody was ever answered `Acquired`, so nobody can have
//! acted. Before the fix each key was taken over (`Lease::is_takeover`), which the proxy answers
//! as `upstream-outcome-unknown` for requests it never sent.

use std::time::{Duration, Instant};

use idemdb::{Claim, ClaimOptions};

use crate::lab::{self, bounded, until_answered, Lab, Role};
use crate::relay::{self, Relay};

const LEASE: Duration = Duration::from_secs(3);
const LOST: usize = 4;
const POOL: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_lost_in_a_failover_is_released_not_taken_over() {
    let lab = tokio::task::spawn_blocking(|| Lab::pair(true))
        .await
        .unwrap();
    let primary = relay::server_addr(lab.primary_url());
    let standby = relay::server_addr(lab.standby_url());
    let relay = Relay::start(primary);
    let url = format!(
        "postgres://postgres@127.0.0.1:{},{standby}/test?target_session_attrs=read-write",
        relay.port
    );
    let store = lab::open(&url, POOL, LEASE).await;
    // Claims at once until the pool holds all its connections: a held connection cannot be
    // opened later (its start-up answer would be held too).
    let mut warm = Vec::new();
    for i in 0..4 * POOL {
        let store = store.clone();
        warm.push(tokio::spawn(async move {
            let key = format!("warm-{i}");
            until_answered("a first claim", || {
                store.claim("shop", &key, "fp", ClaimOptions::default())
            })
            .await
        }));
    }
    for w in warm {
        let got = w.await.unwrap();
        assert!(matches!(got, Claim::Acquired(_)), "{got:?}");
    }

    // The primary's answers are held: every claim commits (and reaches the standby), unanswered.
    relay.hold_answers(Duration::from_secs(600));
    let mut lost = Vec::new();
    for i in 0..LOST {
        let store = store.clone();
        lost.push(tokio::spawn(async move {
            let key = format!("lost-{i}");
            store
                .claim("shop", &key, "fp", ClaimOptions::default())
                .await
        }));
    }
    for (i, claim) in lost.into_iter().enumerate() {
        let got = bounded(
            Duration::from_secs(60),
            "a claim whose answer is held",
            claim,
        )
        .await
        .unwrap();
        match got {
            Err(e) if e.is_transient() => {}
            other => panic!("lost-{i}: a claim whose answer is held answered {other:?}"),
        }
    }
    lab.blocking(|l| {
        l.wait_for_psql(
            Role::Standby,
            "SELECT count(*) FROM idemdb_requests WHERE key LIKE 'lost-%' AND state = 0",
            &LOST.to_string(),
            Duration::from_secs(30),
            "the lost claims' rows on the standby (committed, replicated synchronously)",
        )
    })
    .await;

    lab.blocking(|l| l.kill_primary()).await;
    lab.blocking(|l| {
        l.promote();
    })
    .await;
    let promoted = Instant::now();

    // The instance releases what its lost claims took once the new primary answers.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let released = match store.postgres_stats().await {
            Ok(s) => s.lost_claims_released,
            Err(_) => 0,
        };
        if released as usize >= LOST {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{released} of {LOST} lost claims released 90 s after the promotion"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "lost claims: {LOST} released {} ms after the promotion finished",
        promoted.elapsed().as_millis()
    );

    // Another instance, after the leases would have run out: new attempts, not takeovers.
    tokio::time::sleep(LEASE).await;
    let other = lab::open(lab.standby_url(), 2, LEASE).await;
    for i in 0..LOST {
        let key = format!("lost-{i}");
        let got = until_answered("a claim after the failover", || {
            other.claim("shop", &key, "fp", ClaimOptions::default())
        })
        .await;
        match got {
            Claim::Acquired(lease) => {
                assert!(
                    !lease.is_takeover(),
                    "{key}: taken over, though no client was ever answered Acquired for it"
                );
                assert_eq!(lease.attempt(), 2, "{key}: a new attempt after the release");
            }
            other => panic!("{key}: answered {other:?}, not Acquired"),
        }
    }
}
