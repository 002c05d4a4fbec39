//! The same request twice within 50 ms: the second gets the first response byte for byte and the
//! operation runs once.
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idemdb::{Config, Durability, Execution, Response};

#[test]
fn second_request_replays_the_first_response() {
    let dir = tempfile::tempdir().unwrap();
    let store = Config::new(dir.path())
        .durability(Durability::Synced)
        .open()
        .unwrap();
    let runs = AtomicU32::new(0);
    let fp = idemdb::fingerprint(&[b"POST", b"/charge", b"{\"amount\":42}"]);
    let body: Vec<u8> = (0..=255u8).cycle().take(4000).collect();
    let op = |_: &idemdb::Lease| {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(body.clone())
            .with_status(201)
            .with_meta("location", "/charges/1"))
    };
    let first = store.execute("t", "k", &fp, op).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let second = store.execute("t", "k", &fp, op).unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let Execution::Ran(Ok(original)) = first else {
        panic!("first call did not run: {first:?}")
    };
    let Execution::Completed(replay) = second else {
        panic!("second call did not replay: {second:?}")
    };
    assert_eq!(replay.response, original);
    assert_eq!(replay.response.body, body);
    assert_eq!(replay.response.status(), Some(201));
}
