//! Every bad argument is refused with the same typed error on both backends, before anything is
//! read or written: the record a bad call names stays as it was.

use std::time::Duration;

use idemdb::{
    Begin, Claim, ClaimOptions, Config, ConsumerOptions, Error, Expect, FailKind, InvalidInput,
    RecordState, Response, UpdateOptions,
};

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

    // Entities, consumers, reservations and offsets: the same checks, the same errors.
    let long = "x".repeat(33);
    assert!(matches!(
        invalid(s.put_entity("", "e", Expect::Any, "v").await),
        InvalidInput::Empty { field: "tenant" }
    ));
    assert!(matches!(
        invalid(s.put_entity("t", &long, Expect::Any, "v").await),
        InvalidInput::TooLong { field: "key", .. }
    ));
    assert!(matches!(
        invalid(s.put_entity("t", "e", Expect::Any, vec![0u8; 101]).await),
        InvalidInput::TooLarge { what: "value", .. }
    ));
    assert!(matches!(
        invalid(s.delete_entity("t", "", Expect::Any).await),
        InvalidInput::Empty { field: "key" }
    ));
    assert!(matches!(
        invalid(s.get_entity("t", &long).await),
        InvalidInput::TooLong { field: "key", .. }
    ));
    assert!(matches!(
        invalid(
            s.update_entity("t", "e", UpdateOptions::default(), |_| Some(vec![0u8; 101]))
                .await
        ),
        InvalidInput::TooLarge { what: "value", .. }
    ));
    assert_eq!(s.get_entity("t", "e").await.unwrap(), None);

    assert!(matches!(
        invalid(s.begin("", "m", ConsumerOptions::default()).await),
        InvalidInput::Empty { field: "tenant" }
    ));
    assert!(matches!(
        invalid(
            s.begin(
                "g",
                "m",
                ConsumerOptions::default().lease(Duration::from_secs(7200))
            )
            .await
        ),
        InvalidInput::Duration { what: "lease", .. }
    ));
    assert!(
        matches!(
            s.begin("g", "m", ConsumerOptions::default()).await.unwrap(),
            Begin::Process(_)
        ),
        "no refused delivery wrote anything"
    );

    assert!(matches!(
        invalid(s.reserve("", &[b"v"], "o").await),
        InvalidInput::Empty { field: "tenant" }
    ));
    assert!(matches!(
        invalid(s.reserve("i", &[long.as_bytes()], "o").await),
        InvalidInput::TooLong { .. }
    ));
    assert!(matches!(
        invalid(s.reserve("i", &[b"v"], "").await),
        InvalidInput::Empty { .. }
    ));
    assert!(matches!(
        invalid(s.release_reservation("i", &[long.as_bytes()], "o").await),
        InvalidInput::TooLong { .. }
    ));
    assert_eq!(s.reservation_owner("i", &[b"v"]).await.unwrap(), None);

    assert!(matches!(
        invalid(s.mark_processed("", "topic", 0, 1).await),
        InvalidInput::Empty { field: "tenant" }
    ));
    assert!(matches!(
        invalid(s.commit_watermark("g", &long, 0, 1).await),
        InvalidInput::TooLong { field: "key", .. }
    ));
    assert_eq!(
        s.offset_window("g", "topic", 0).await.unwrap().watermark(),
        None
    );
}

fn settings<B>(c: Config<B>) -> Config<B> {
    c.max_key_len(32)
        .max_tenant_len(8)
        .max_response_bytes(100)
        .max_lease(Duration::from_secs(3600))
}

on_both_backends!(check, settings);
