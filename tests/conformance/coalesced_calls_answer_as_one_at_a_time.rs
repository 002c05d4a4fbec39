//! Calls that reach the store together get the answers they would get one at a time, each its
//! own: bursts of claims and lease ends released at once over keys in every state (new keys
//! claimed three times at once, replays and mismatches of finished records, live leases, leases
//! run out and taken over by one of two claims, stale holders, completions, terminal failures and
//! releases, one completion sent twice at once), so that on PostgreSQL they share coalesced
//! statements (`Config::coalescing`). Every call's outcome is compared with the one-at-a-time
//! answer (for the calls that race for one key: exactly one winner, the others told it is in
//! progress or finished), then every key's record. On PostgreSQL with coalescing on, the store
//! must have sent statements of more than one call (else the test proved nothing); with it off
//! (`IDEMDB_TEST_COALESCING=off`), none.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use idemdb::{AsyncStore, Claim, ClaimOptions, FailKind, Lease, LeaseLost, RecordState, Response};
use tokio::sync::Barrier;

use crate::harness::{coalescing, Harness};

const ROUNDS: usize = 12;

fn opts(lease_s: u64) -> ClaimOptions {
    ClaimOptions::default()
        .lease(Duration::from_secs(lease_s))
        .retention(Duration::from_secs(3600))
}

async fn acquire(s: &AsyncStore, key: &str, lease_s: u64) -> Lease {
    match s.claim("t", key, b"a", opts(lease_s)).await.unwrap() {
        Claim::Acquired(l) => l,
        other => panic!("{key}: preparing, the claim did not acquire: {other:?}"),
    }
}

/// A claim's outcome as compared: what a caller can tell apart.
fn claim_outcome(c: &Claim) -> String {
    match c {
        Claim::Acquired(l) => format!(
            "acquired attempt {} takeover {}",
            l.attempt(),
            l.is_takeover()
        ),
        Claim::Completed(r) => format!("replay {:?}", r.response.body),
        Claim::Failed(r) => format!("failure {:?}", r.response.body),
        Claim::InProgress { retry_after } => format!("in progress {retry_after:?}"),
        Claim::Mismatch => "mismatch".into(),
        other => format!("{other:?}"),
    }
}

/// One call of a burst.
enum Call {
    Claim(&'static [u8], u64),
    Complete(Lease, Vec<u8>),
    FailTerminal(Lease, Vec<u8>),
    Release(Lease),
}

async fn perform(s: &AsyncStore, key: &str, call: Call) -> String {
    let lost = |r: Result<(), LeaseLost>| match r {
        Ok(()) => "ok".to_string(),
        Err(l) => format!("{l:?}"),
    };
    match call {
        Call::Claim(fp, lease_s) => {
            claim_outcome(&s.claim("t", key, fp, opts(lease_s)).await.unwrap())
        }
        Call::Complete(l, body) => lost(s.complete(&l, Response::new(body)).await.unwrap()),
        Call::FailTerminal(l, body) => lost(
            s.fail(&l, FailKind::Terminal(Response::new(body)))
                .await
                .unwrap(),
        ),
        Call::Release(l) => lost(s.fail(&l, FailKind::Retryable).await.unwrap()),
    }
}

async fn check(h: &Harness) {
    let s = &h.store;
    for round in 0..ROUNDS {
        let k = |what: &str, i: usize| format!("{what}-{round}-{i}");
        // Preparing, one call at a time.
        let mut live = Vec::new();
        for i in 0..3 {
            live.push(acquire(s, &k("live", i), 600).await);
        }
        let mut stale = Vec::new();
        for i in 0..3 {
            stale.push(acquire(s, &k("stale", i), 1).await);
            acquire(s, &k("exp", i), 1).await;
        }
        let mut ends = Vec::new();
        for i in 0..6 {
            ends.push(acquire(s, &k("end", i), 600).await);
        }
        for i in 0..3 {
            let l = acquire(s, &k("done", i), 600).await;
            let body = k("resp", i).into_bytes();
            s.complete(&l, Response::new(body)).await.unwrap().unwrap();
        }
        h.advance(Duration::from_secs(2));
        let mut current = Vec::new();
        for i in 0..3 {
            let l = acquire(s, &k("stale", i), 600).await;
            assert!(l.is_takeover(), "preparing: the stale key is taken over");
            current.push(l);
        }
        let now = s.now().await.unwrap();

        // The burst, and what each key's calls answer one at a time (sorted: the calls that race
        // for one key may win in any order).
        let mut calls: Vec<(String, Call)> = Vec::new();
        let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut expect = |key: String, outcomes: Vec<String>| {
            let mut o = outcomes;
            o.sort();
            want.insert(key, o);
        };
        for i in 0..4 {
            for _ in 0..3 {
                calls.push((k("new", i), Call::Claim(b"a", 60)));
            }
            let busy = format!("in progress {:?}", Duration::from_secs(60));
            expect(
                k("new", i),
                vec![
                    "acquired attempt 1 takeover false".into(),
                    busy.clone(),
                    busy,
                ],
            );
        }
        for i in 0..3 {
            calls.push((k("done", i), Call::Claim(b"a", 60)));
            calls.push((k("done", i), Call::Claim(b"b", 60)));
            expect(
                k("done", i),
                vec![
                    format!("replay {:?}", k("resp", i).into_bytes()),
                    "mismatch".into(),
                ],
            );
            calls.push((k("live", i), Call::Claim(b"a", 60)));
            let left = live[i].lease_until() - now;
            expect(
                k("live", i),
                vec![format!("in progress {:?}", Duration::from_millis(left))],
            );
            calls.push((k("exp", i), Call::Claim(b"a", 60)));
            calls.push((k("exp", i), Call::Claim(b"a", 60)));
            expect(
                k("exp", i),
                vec![
                    "acquired attempt 2 takeover true".into(),
                    format!("in progress {:?}", Duration::from_secs(60)),
                ],
            );
            calls.push((
                k("stale", i),
                Call::Complete(stale[i].clone(), b"late".to_vec()),
            ));
            let taken = LeaseLost::TakenOver {
                current_fence: current[i].fence(),
            };
            expect(k("stale", i), vec![format!("{taken:?}")]);
        }
        for (i, l) in ends.iter().enumerate() {
            let body = k("end-body", i).into_bytes();
            match i % 3 {
                0 => {
                    // The same completion twice at once: one applies, the other finds it done.
                    calls.push((k("end", i), Call::Complete(l.clone(), body.clone())));
                    calls.push((k("end", i), Call::Complete(l.clone(), body)));
                    let finished = format!("{:?}", LeaseLost::Finished);
                    expect(k("end", i), vec!["ok".into(), finished]);
                }
                1 => {
                    calls.push((k("end", i), Call::FailTerminal(l.clone(), body)));
                    expect(k("end", i), vec!["ok".into()]);
                }
                _ => {
                    calls.push((k("end", i), Call::Release(l.clone())));
                    expect(k("end", i), vec!["ok".into()]);
                }
            }
        }
        let barrier = Arc::new(Barrier::new(calls.len()));
        let mut tasks = Vec::new();
        for (key, call) in calls {
            let (s, barrier) = (s.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let got = perform(&s, &key, call).await;
                (key, got)
            }));
        }
        let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in tasks {
            let (key, outcome) = t.await.unwrap();
            got.entry(key).or_default().push(outcome);
        }
        for v in got.values_mut() {
            v.sort();
        }
        assert_eq!(got, want, "round {round}: every call's answer, key by key");

        // Every key's record, as the one-at-a-time answers leave it.
        for i in 0..4 {
            let r = s.get("t", k("new", i)).await.unwrap().unwrap();
            assert_eq!((r.attempts, r.takeovers), (1, 0), "round {round} new {i}");
            assert!(matches!(r.state, RecordState::Pending { .. }));
        }
        for (i, taker) in current.iter().enumerate() {
            let r = s.get("t", k("exp", i)).await.unwrap().unwrap();
            assert_eq!((r.attempts, r.takeovers), (2, 1), "round {round} exp {i}");
            let r = s.get("t", k("stale", i)).await.unwrap().unwrap();
            assert_eq!(r.fence, taker.fence(), "round {round} stale {i}");
            assert!(matches!(r.state, RecordState::Pending { .. }));
            let r = s.get("t", k("done", i)).await.unwrap().unwrap();
            assert!(
                matches!(&r.state, RecordState::Completed(x) if x.response.body == k("resp", i).into_bytes())
            );
        }
        for i in 0..6 {
            let r = s.get("t", k("end", i)).await.unwrap().unwrap();
            let body = k("end-body", i).into_bytes();
            match (i % 3, &r.state) {
                (0, RecordState::Completed(x)) | (1, RecordState::Failed(x)) => {
                    assert_eq!(x.response.body, body, "round {round} end {i}");
                }
                (2, RecordState::Released) => {}
                (_, other) => panic!("round {round} end {i}: {other:?}"),
            }
        }
    }
    if h.is_postgres() {
        let stats = s.postgres_stats().await.unwrap();
        if coalescing() {
            assert!(
                stats.coalesced_statements > 0
                    && stats.coalesced_calls > stats.coalesced_statements,
                "no statement carried more than one call: the bursts did not exercise coalescing \
                 ({stats:?})"
            );
            println!(
                "coalesced: {} statements carried {} calls",
                stats.coalesced_statements, stats.coalesced_calls
            );
        } else {
            assert_eq!(stats.coalesced_statements, 0, "coalescing is off");
        }
    }
}

on_both_backends!(check);
