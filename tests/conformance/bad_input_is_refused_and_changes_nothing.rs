//! Every bad argument is refused with the same typed error on both backends, before anything is
//! read or written: the record a bad call names stays as it was.

use std::time::Duration;

use idemdb::{Claim, ClaimOptions, Config, Error, FailKind, InvalidInput, RecordState, Response};

use crate::harness::Harness;

fn invalid(r: idemdb::Result<impl std::fmt::Debug>) -> InvalidInput {
    match r {
        Err(Error::InvalidInput(i)) => i,
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

async fn check(h: &Harness) {
    let s = &h.store;
    let o = ClaimOptions::default();
    assert!(matches!(
        invalid(s.claim("", "k", b"fp", o).await),
        InvalidInput::Empty { field: "tenant" }
    ));
    assert!(matches!(
        invalid(s.claim("t", "", b"fp", o).await),
        InvalidInput::Empty { field: "key" }
    ));
    assert!(matches!(
        invalid(s.claim("t", "k".repeat(33), b"fp", o).await),
        InvalidInput::TooLong {
            field: "key",
            len: 33,
            max: 32
        }
    ));
    assert!(matches!(
        invalid(s.claim("t".repeat(9), "k", b"fp", o).await),
        InvalidInput::TooLong {
            field: "tenant",
            len: 9,
            max: 8
        }
    ));
    assert!(matches!(
        invalid(s.claim("t", "k", vec![0u8; 1025], o).await),
        InvalidInput::TooLarge {
            what: "fingerprint",
            ..
        }
    ));
    assert!(matches!(
        invalid(
            s.claim("t", "k", b"fp", o.lease(Duration::from_secs(7200)))
                .await
        ),
        InvalidInput::Duration { what: "lease", .. }
    ));
    assert!(matches!(
        invalid(
            s.claim(
                "t",
                "k",
                b"fp",
                o.lease(Duration::from_secs(60))
                    .retention(Duration::from_secs(30))
            )
            .await
        ),
        InvalidInput::Duration { what: "lease", .. }
    ));
    assert_eq!(
        s.get("t", "k").await.unwrap(),
        None,
        "no bad claim wrote anything"
    );

    let Claim::Acquired(mut lease) = s.claim("t", "k", b"fp", o).await.unwrap() else {
        panic!("acquires");
    };
    let before = s.get("t", "k").await.unwrap().unwrap();
    assert!(matches!(
        invalid(s.complete(&lease, Response::new(vec![1u8; 101])).await),
        InvalidInput::TooLarge {
            what: "response",
            max: 100,
            ..
        }
    ));
    assert!(matches!(
        invalid(
            s.fail(&lease, FailKind::Terminal(Response::new(vec![1u8; 101])))
                .await
        ),
        InvalidInput::TooLarge {
            what: "failure",
            ..
        }
    ));
    assert!(matches!(
        invalid(s.checkpoint(&lease, "p", vec![1u8; 100]).await),
        InvalidInput::TooLarge {
            what: "checkpoint",
            ..
        }
    ));
    assert!(matches!(
        invalid(s.renew(&mut lease, Duration::from_secs(7200)).await),
        InvalidInput::Duration {
            what: "renewal",
            ..
        }
    ));
    assert!(matches!(
        invalid(s.get("t", "").await),
        InvalidInput::Empty { field: "key" }
    ));
    let after = s.get("t", "k").await.unwrap().unwrap();
    assert_eq!(after, before, "refused calls changed nothing");
    assert!(matches!(after.state, RecordState::Pending { .. }));
}

fn settings(c: Config) -> Config {
    c.max_key_len(32)
        .max_tenant_len(8)
        .max_response_bytes(100)
        .max_lease(Duration::from_secs(3600))
}

on_both_backends!(check, settings);
