//! The gRPC layer runs alike on both backends, through a real tonic server and client: a call
//! runs its method once and a retry gets the stored reply (message, metadata, status) marked
//! replayed; another principal's same key is its own; another request under the key is
//! FAILED_PRECONDITION; concurrent twins run the method once (ABORTED with a retry hint for the
//! others, then the reply); a final error status is stored, a transient one releases the key; a
//! call without a key is INVALID_ARGUMENT when keys are required; a call whose client gave up
//! while it ran is answered to its retry from the store; with a wait, a twin gets the first
//! call's reply.

use std::time::Duration;

use idemdb::grpc::{Code, GrpcIdempotencyLayer};
use idemdb::http::WhileRunning;

use crate::grpc_common::{charge, grpc_client, serve_grpc, ChargeRequest};
use crate::harness::Harness;

fn pay(account: &str, amount: u64) -> ChargeRequest {
    ChargeRequest {
        account: account.into(),
        amount,
        ..Default::default()
    }
}

async fn check(h: &Harness) {
    let layer = GrpcIdempotencyLayer::new(h.store.clone())
        .require_key(true)
        .replay_metadata([http::HeaderName::from_static("x-run")])
        .principal(|req| {
            req.headers
                .get("x-account")?
                .to_str()
                .ok()
                .map(str::to_owned)
        });
    let (addr, runs) = serve_grpc(layer.clone()).await;
    let mut c = grpc_client(addr).await;
    let ran = || runs.0.load(std::sync::atomic::Ordering::SeqCst);

    let first = charge(&mut c, "k1", "alice", pay("acct-1", 10)).await;
    let reply = first.reply.clone().expect("first call");
    assert_eq!((reply.run, reply.account.as_str()), (1, "acct-1"));
    assert!(!first.replayed());
    let again = charge(&mut c, "k1", "alice", pay("acct-1", 10)).await;
    assert_eq!(again.reply.clone().expect("retry"), reply);
    assert!(again.replayed(), "{again:?}");
    assert_eq!(again.metadata.get("x-run").unwrap(), "1");
    let bob = charge(&mut c, "k1", "bob", pay("acct-1", 10)).await;
    assert_eq!(bob.reply.expect("bob's call").run, 2);
    assert_eq!(ran(), 2);

    let changed = charge(&mut c, "k1", "alice", pay("acct-1", 11)).await;
    assert_eq!(changed.code(), Code::FailedPrecondition, "{changed:?}");
    assert!(changed
        .reply
        .unwrap_err()
        .message()
        .starts_with("idempotency-key-reused"));

    let missing = charge(&mut c, "", "alice", pay("acct-1", 10)).await;
    assert_eq!(missing.code(), Code::InvalidArgument, "{missing:?}");
    assert_eq!(ran(), 2);

    // Concurrent twins: one run; the others ABORTED with a retry hint, or the reply.
    let slow = ChargeRequest {
        delay_ms: 300,
        ..pay("acct-2", 5)
    };
    let mut twins = Vec::new();
    for _ in 0..5 {
        let mut c = c.clone();
        let slow = slow.clone();
        twins.push(tokio::spawn(async move {
            charge(&mut c, "k2", "alice", slow).await
        }));
    }
    let mut codes = Vec::new();
    for t in twins {
        let got = t.await.unwrap();
        if got.code() == Code::Aborted {
            assert!(
                got.metadata.get("grpc-retry-pushback-ms").is_some(),
                "{got:?}"
            );
            assert!(got.metadata.get("retry-after").is_some(), "{got:?}");
        }
        codes.push(got.code());
    }
    assert!(
        codes.iter().all(|c| matches!(c, Code::Ok | Code::Aborted)),
        "{codes:?}"
    );
    assert!(codes.contains(&Code::Ok), "{codes:?}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let later = charge(&mut c, "k2", "alice", slow.clone()).await;
    assert!(later.replayed() && later.reply.is_ok(), "{later:?}");
    assert_eq!(ran(), 3, "{codes:?}");

    // A final status is stored with its message and trailers; a transient one is not.
    let refused = ChargeRequest {
        fail_with: Code::InvalidArgument as i32,
        ..pay("acct-3", 1)
    };
    let a = charge(&mut c, "k3", "alice", refused.clone()).await;
    let b = charge(&mut c, "k3", "alice", refused).await;
    assert_eq!(
        (a.code(), b.code()),
        (Code::InvalidArgument, Code::InvalidArgument)
    );
    assert_eq!(
        a.reply.unwrap_err().message(),
        b.reply.as_ref().unwrap_err().message()
    );
    assert!(b.replayed(), "{b:?}");
    assert_eq!(b.metadata.get("x-run").unwrap(), "4");
    let down = ChargeRequest {
        fail_with: Code::Unavailable as i32,
        ..pay("acct-4", 1)
    };
    for _ in 0..2 {
        let got = charge(&mut c, "k4", "alice", down.clone()).await;
        assert_eq!(got.code(), Code::Unavailable);
        assert!(!got.replayed());
    }
    assert_eq!(ran(), 6);

    // A lost reply: the client gives up while the method runs (its stream is reset); the
    // method still ends and its answer is stored, so the retry is answered without a run.
    let lost = ChargeRequest {
        delay_ms: 400,
        ..pay("acct-5", 7)
    };
    let gone = {
        let mut c = c.clone();
        let lost = lost.clone();
        tokio::spawn(async move { charge(&mut c, "k5", "alice", lost).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    gone.abort();
    let _ = gone.await;
    let retried = loop {
        let got = charge(&mut c, "k5", "alice", lost.clone()).await;
        if got.code() != Code::Aborted {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(retried.replayed(), "{retried:?}");
    assert_eq!(retried.reply.expect("the lost call's reply").run, 7);
    assert_eq!(ran(), 7);

    // With a wait, a twin gets the first call's reply instead of ABORTED.
    let waiting = layer
        .clone()
        .while_running(WhileRunning::Wait(Duration::from_secs(20)));
    let (waddr, wruns) = serve_grpc(waiting).await;
    let mut w = grpc_client(waddr).await;
    let slow = ChargeRequest {
        delay_ms: 300,
        ..pay("acct-6", 9)
    };
    let first = {
        let mut w = w.clone();
        let slow = slow.clone();
        tokio::spawn(async move { charge(&mut w, "k6", "alice", slow).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let twin = charge(&mut w, "k6", "alice", slow).await;
    let first = first.await.unwrap();
    assert_eq!(
        twin.reply.clone().expect("the twin waited"),
        first.reply.expect("first")
    );
    assert_eq!(wruns.0.load(std::sync::atomic::Ordering::SeqCst), 1);

    let tenant = layer.tenant_of("alice").unwrap();
    let info = h.store.get(&tenant, "k1").await.unwrap().unwrap();
    assert!(matches!(info.state, idemdb::RecordState::Completed(_)));
    assert_eq!(layer.stats().store_errors, 0);
}

on_both_backends!(check);
