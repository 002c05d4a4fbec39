//! `Store::replay_with` hands a stored completion or terminal failure to a closure without
//! copying it, and answers `None` for everything a claim must decide (nothing stored, pending in
//! memory or on disk, released, another fingerprint, expired); bad arguments are typed errors.

use std::time::Duration;

use idemdb::{FailKind, InvalidInput, ManualClock, Response};

use super::common;

#[test]
fn replay_with_sees_finished_records_only() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let store = common::open(dir.path(), &clock);
    let peek = |key: &str, fp: &[u8]| {
        store
            .replay_with("t", key, fp, |v| {
                (
                    v.body().to_vec(),
                    v.status(),
                    v.meta("x").map(str::to_owned),
                    v.is_failure(),
                )
            })
            .unwrap()
    };
    assert_eq!(peek("none", b"fp"), None);

    let done = common::acquire(&store, "t", "done", b"fp");
    assert_eq!(peek("done", b"fp"), None, "pending in memory");
    let at = clock_now(&clock);
    store
        .complete(
            &done,
            Response::new("receipt")
                .with_status(201)
                .with_meta("x", "y"),
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        peek("done", b"fp"),
        Some((b"receipt".to_vec(), Some(201), Some("y".to_owned()), false))
    );
    assert_eq!(peek("done", b"other"), None, "another fingerprint");
    let replay = store
        .replay_with("t", "done", b"fp", |v| v.to_replay())
        .unwrap()
        .unwrap();
    assert_eq!(replay.response.body, b"receipt");
    assert_eq!(replay.finished_at, at);

    let failed = common::acquire_durable(&store, "t", "failed", b"fp");
    assert_eq!(peek("failed", b"fp"), None, "pending on disk");
    store
        .fail(&failed, FailKind::Terminal(Response::new("no")))
        .unwrap()
        .unwrap();
    assert_eq!(
        peek("failed", b"fp"),
        Some((b"no".to_vec(), None, None, true))
    );

    let released = common::acquire(&store, "t", "released", b"fp");
    store.fail(&released, FailKind::Retryable).unwrap().unwrap();
    assert_eq!(peek("released", b"fp"), None);

    clock.advance(Duration::from_secs(3600)); // the retention
    assert_eq!(peek("done", b"fp"), None, "expired");

    assert!(matches!(
        common::invalid(store.replay_with("", "k", b"fp", |_| ())),
        InvalidInput::Empty { .. }
    ));
    assert!(matches!(
        common::invalid(store.replay_with("t", "k", vec![0u8; 4096], |_| ())),
        InvalidInput::TooLarge { .. }
    ));
}

fn clock_now(clock: &ManualClock) -> u64 {
    use idemdb::Clock;
    clock.now_millis()
}
