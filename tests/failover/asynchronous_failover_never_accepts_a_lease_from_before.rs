//! Under asynchronous replication a failover may lose what the standby never received, but a
//! lease from before it is never accepted on a record claimed after it. The standby is made to
//! lag for real: the primary's WAL sender is stopped (SIGSTOP), so nothing the primary writes
//! afterwards leaves it. (Stopping the standby's WAL receiver instead, as first planned, does not
//! make it lag: the primary's WAL still reaches the receiver's socket buffer, and once the
//! receiver runs again the standby replays every claim; tried by hand with pg-lab, 20 rows of 20
//! arrived.) The old primary then acknowledges `IDEMDB_FAILOVER_KEYS` claims (default 20, leases
//! of 60 s that stay live throughout) and completes the first five; it is killed and the standby
//! promoted. On the new primary:
//! - completions acknowledged before the standby stopped receiving are all there; the ones lost
//!   are exactly those acknowledged afterwards (allowed under asynchronous replication:
//!   design.md, "Fencing across a failover"); their count is printed;
//! - each key claimed after the stop is gone (its claim was not replicated), and a rival acquires
//!   it with a token greater than the old lease's;
//! - the old holder's `checkpoint`, `renew` and `complete` (through the old store object, whose
//!   pool reconnects to the new primary, for even keys; through a store opened on the new primary
//!   for odd ones: a lease is a value, and its store id is the same there since `idemdb_meta` was
//!   replicated) each return `LeaseLost::TakenOver` with the rival's token and change nothing;
//!   the rival's completion is then accepted and replayed;
//! - the old store counts the failover once it draws a token on the new primary.
//!
//! How we know it can fail: before the claims, the test draws (through filler claims) exactly the
//! sequence values the old primary had logged ahead of what the standby knows, so the old
//! primary's claims take the very sequence values the promoted standby hands out next, in the
//! same key order. The test checks (a precondition, printed per key) that the low 47 bits of each
//! rival's token equal those of the old lease of the same key: without the timeline in the high
//! bits (the tokens before migration 4, `nextval` alone) the two tokens would be equal, the old
//! holder's `UPDATE ... WHERE fence = $lease` would match the rival's row, and its completion
//! would be accepted over the rival's claim: the `LeaseLost` assertions would fail (the old issue).

use std::time::Duration;

use idemdb::{AsyncStore, Claim, ClaimOptions, Lease, LeaseLost, RecordState, Response};

use crate::lab::{self, split_fence, until_answered, Lab, Role};

const TENANT: &str = "acct";
/// Leases that stay live for the whole test.
const LONG: Duration = Duration::from_secs(60);
const WARM: usize = 10;
/// How many of the old primary's claims it also completes (acknowledged, then lost).
const COMPLETED_ON_OLD: usize = 5;

fn fp(key: &str) -> Vec<u8> {
    format!("fp of {key}").into_bytes()
}

fn opts() -> ClaimOptions {
    ClaimOptions::default().lease(LONG)
}

async fn acquire(store: &AsyncStore, key: &str) -> Lease {
    match until_answered("a claim", || store.claim(TENANT, key, fp(key), opts())).await {
        Claim::Acquired(l) => l,
        other => panic!("the claim of {key} answered {other:?}, not Acquired"),
    }
}

fn last_value(lab: &Lab, role: Role) -> u64 {
    let row = lab.psql(role, "SELECT last_value, log_cnt FROM idemdb_fence");
    let (v, _) = row
        .split_once('|')
        .unwrap_or_else(|| panic!("idemdb_fence on the {role:?} printed {row:?}"));
    v.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_async_pair() {
    let n = lab::size("IDEMDB_FAILOVER_KEYS", 20);
    let lab = tokio::task::spawn_blocking(|| Lab::pair(false))
        .await
        .unwrap();
    let url = lab.url().to_string();
    let old = lab::open(&url, 4, LONG).await;

    // Completions acknowledged while the standby receives everything.
    let mut acknowledged: Vec<(String, Response, bool)> = Vec::new(); // (key, body, after the stop)
    for j in 0..WARM {
        let key = format!("w-{j}");
        let lease = acquire(&old, &key).await;
        let body = Response::new(format!("{key} done under {}", lease.fence()));
        let done = until_answered("a completion", || old.complete(&lease, body.clone())).await;
        assert_eq!(done, Ok(()), "{key}");
        acknowledged.push((key, body, false));
    }
    lab::standby_caught_up(&lab).await;

    // The standby stops receiving: the primary's WAL sender is stopped, so nothing the primary
    // writes from now on leaves it (it dies stopped, with the primary).
    let walsender = lab.blocking(|l| l.primary_walsender_pid()).await;
    lab::signal(walsender, "STOP");
    tokio::time::sleep(Duration::from_millis(300)).await; // whatever was in flight lands
    let (on_primary, on_standby) = lab
        .blocking(|l| (last_value(l, Role::Primary), last_value(l, Role::Standby)))
        .await;
    // The sequence values the old primary may still hand out without writing WAL, which the
    // promoted standby will hand out again: drawn by filler claims, so that the claims below
    // take exactly the values the rivals will take.
    let burn = on_standby.saturating_sub(on_primary);
    println!(
        "asynchronous failover: idemdb_fence at {on_primary} on the primary, {on_standby} on the \
         standby (logged ahead): {burn} values drawn by filler claims"
    );
    for j in 0..burn {
        acquire(&old, &format!("filler-{j}")).await;
    }

    // The old primary acknowledges claims (and a few completions) the standby never receives.
    let mut held = Vec::new();
    for i in 0..n {
        let key = format!("k-{i}");
        held.push((key.clone(), acquire(&old, &key).await));
    }
    for (key, lease) in held.iter().take(COMPLETED_ON_OLD) {
        let body = Response::new(format!("{key} done on the old primary"));
        let done = until_answered("a completion", || old.complete(lease, body.clone())).await;
        assert_eq!(done, Ok(()), "{key}");
        acknowledged.push((key.clone(), body, true));
    }
    let count = "SELECT count(*) FROM idemdb_requests WHERE substring(key FROM 1 FOR 2) = 'k-'";
    let (rows_primary, rows_standby) = lab
        .blocking(move |l| (l.psql(Role::Primary, count), l.psql(Role::Standby, count)))
        .await;
    println!(
        "asynchronous failover: the old primary holds {rows_primary} rows of k-*, the standby \
         {rows_standby}"
    );
    assert_eq!(rows_primary, n.to_string());
    assert_eq!(
        rows_standby, "0",
        "the standby received claims made after its WAL sender was stopped: it does not lag"
    );

    lab.blocking(|l| l.kill_primary()).await;
    lab.blocking(|l| l.promote()).await;
    let new = lab::open(&url, 4, LONG).await;

    // What survived: every completion acknowledged before the stop; none of the claims after.
    let mut lost = Vec::new();
    for (key, body, after_stop) in &acknowledged {
        let info = until_answered("a read", || new.get(TENANT, key)).await;
        let kept = match info.as_ref().map(|i| &i.state) {
            Some(RecordState::Completed(r)) => &r.response == body,
            _ => false,
        };
        if !kept {
            assert!(
                *after_stop,
                "{key}: a completion acknowledged (and replicated) before the standby stopped \
                 receiving was lost: {info:?}"
            );
            lost.push(key.clone());
        }
    }
    println!(
        "asynchronous failover: {} of {} acknowledged completions lost, every one acknowledged \
         after the standby stopped receiving: {lost:?}",
        lost.len(),
        acknowledged.len()
    );
    for (key, lease) in &held {
        let info = until_answered("a read", || new.get(TENANT, key)).await;
        assert!(
            info.as_ref().is_none_or(|i| i.fence < lease.fence()),
            "{key}: the claim made after the stop is on the new primary ({info:?}): it was \
             replicated"
        );
    }

    // Rivals take every key, with tokens above the old leases'.
    let mut rivals = Vec::new();
    let mut same_low = 0;
    for (key, lease) in &held {
        let rival = acquire(&new, key).await;
        let (o, r) = (split_fence(lease.fence()), split_fence(rival.fence()));
        println!(
            "asynchronous failover: {key}: old lease (timeline {}, sequence {}), rival (timeline \
             {}, sequence {}){}",
            o.0,
            o.1,
            r.0,
            r.1,
            if o.1 == r.1 { ": same low 47 bits" } else { "" }
        );
        if o.1 == r.1 {
            same_low += 1;
        }
        assert!(
            rival.fence() > lease.fence(),
            "{key}: the rival's token {} ({r:?}) is not above the old lease's {} ({o:?})",
            rival.fence(),
            lease.fence()
        );
        rivals.push(rival);
    }
    println!(
        "asynchronous failover: {same_low} of {n} rivals drew the old lease's sequence value \
         again (only the timeline tells them apart)"
    );
    assert!(
        same_low >= 1,
        "precondition: the promoted standby should hand out the sequence values the old primary \
         gave after the stop (the scenario where a token without the timeline collides)"
    );

    // The old holders are refused, and change nothing.
    for (i, ((key, lease), rival)) in held.iter().zip(&rivals).enumerate() {
        let via = if i % 2 == 0 { &old } else { &new };
        let taken = LeaseLost::TakenOver {
            current_fence: rival.fence(),
        };
        let cp = until_answered("a checkpoint", || {
            via.checkpoint(lease, "stale", b"x".to_vec())
        })
        .await;
        assert_eq!(cp, Err(taken.clone()), "{key}: the old holder's checkpoint");
        let rn = until_answered("a renewal", || {
            let (mut l, via) = (lease.clone(), via.clone());
            async move { via.renew(&mut l, LONG).await }
        })
        .await;
        assert_eq!(rn, Err(taken.clone()), "{key}: the old holder's renewal");
        let body = Response::new(format!("{key} stale completion"));
        let done = until_answered("a completion", || via.complete(lease, body.clone())).await;
        assert_eq!(done, Err(taken), "{key}: the old holder's completion");
        let info = until_answered("a read", || new.get(TENANT, key))
            .await
            .unwrap_or_else(|| panic!("{key}: the rival's record is gone"));
        assert_eq!(info.fence, rival.fence(), "{key}");
        assert_eq!(
            info.state,
            RecordState::Pending {
                lease_until: rival.lease_until()
            },
            "{key}: the old holder's calls changed the rival's record"
        );
        assert_eq!(info.checkpoint, None, "{key}");
    }

    // The rivals complete, and their results are replayed.
    for ((key, _), rival) in held.iter().zip(&rivals) {
        let body = Response::new(format!("{key} done by the rival"));
        let done = until_answered("a completion", || new.complete(rival, body.clone())).await;
        assert_eq!(done, Ok(()), "{key}: the rival's completion");
        match until_answered("a claim", || new.claim(TENANT, key, fp(key), opts())).await {
            Claim::Completed(r) => assert_eq!(r.response, body, "{key}"),
            other => panic!("{key}: the rival's completion is not replayed: {other:?}"),
        }
    }

    // The old store counts the failover once it draws a token on the new primary.
    let after = acquire(&old, "after-the-failover").await;
    let stats = until_answered("postgres_stats", || old.postgres_stats()).await;
    println!(
        "asynchronous failover: old store: failovers_seen {}, fencing_epoch {}; its new token \
         {:?}",
        stats.failovers_seen,
        stats.fencing_epoch,
        split_fence(after.fence())
    );
    assert_eq!(stats.failovers_seen, 1, "{stats:?}");
    assert_eq!(stats.fencing_epoch, split_fence(after.fence()).0);
    assert!(split_fence(after.fence()).0 > split_fence(held[0].1.fence()).0);

    drop((old, new));
    tokio::task::spawn_blocking(move || drop(lab))
        .await
        .unwrap();
}
