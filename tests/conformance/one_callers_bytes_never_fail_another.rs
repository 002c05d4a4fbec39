//! One caller's bytes never fail another caller (regression, issue 43 item 2). PostgreSQL's text
//! refuses a NUL byte, which the embedded store kept: a response's metadata or a checkpoint's
//! phase holding one completed on the embedded store and failed as `Error::Engine` on
//! PostgreSQL, and with coalescing on it failed every completion of its batch. Both backends
//! now refuse it alike (`InvalidInput::NulByte`, nothing written or sent, the lease still held:
//! a valid completion follows), and of 32 tasks completing at once with one bad value exactly one
//! gets an error and the other 31 are stored.

use std::sync::Arc;

use idemdb::{Claim, ClaimOptions, Error, InvalidInput, RecordState, Response};

use crate::harness::Harness;

fn nul(r: idemdb::Result<impl std::fmt::Debug>) -> bool {
    matches!(r, Err(Error::InvalidInput(InvalidInput::NulByte { .. })))
}

async fn check(h: &Harness) {
    let s = &h.store;
    let Claim::Acquired(lease) = s
        .claim("t", "nul", b"fp", ClaimOptions::default())
        .await
        .unwrap()
    else {
        panic!("a new key is acquired")
    };
    assert!(nul(s
        .complete(&lease, Response::new(b"ok".to_vec()).with_meta("k", "a\0b"))
        .await));
    assert!(nul(s
        .complete(&lease, Response::new(b"ok".to_vec()).with_meta("a\0b", "v"))
        .await));
    assert!(nul(s
        .checkpoint(&lease, "ph\0ase", b"state".to_vec())
        .await));
    let info = s.get("t", "nul").await.unwrap().expect("the record");
    assert!(
        matches!(info.state, RecordState::Pending { .. }) && info.checkpoint.is_none(),
        "nothing was written: {info:?}"
    );
    s.complete(&lease, Response::new(b"ok".to_vec()).with_meta("k", "v"))
        .await
        .unwrap()
        .expect("the lease is still held");

    // 32 completions at once, one of them bad.
    let mut leases = Vec::new();
    for i in 0..32 {
        match s
            .claim("t", format!("batch-{i}"), b"fp", ClaimOptions::default())
            .await
            .unwrap()
        {
            Claim::Acquired(l) => leases.push(l),
            other => panic!("batch-{i}: {other:?}"),
        }
    }
    let start = Arc::new(tokio::sync::Barrier::new(32));
    let mut tasks = Vec::new();
    for (i, lease) in leases.into_iter().enumerate() {
        let (s, start) = (s.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            let value = if i == 13 { "bad\0value" } else { "good" };
            start.wait().await;
            s.complete(&lease, Response::new(vec![i as u8]).with_meta("k", value))
                .await
        }));
    }
    let mut errors = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(Ok(())) => {}
            other => errors.push((i, format!("{other:?}"))),
        }
    }
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, 13, "{errors:?}");
    assert!(errors[0].1.contains("NulByte"), "{errors:?}");
    for i in (0..32).filter(|&i| i != 13) {
        let info = s.get("t", format!("batch-{i}")).await.unwrap().unwrap();
        assert!(
            matches!(info.state, RecordState::Completed(_)),
            "batch-{i}: {info:?}"
        );
    }
}

on_both_backends!(check);
