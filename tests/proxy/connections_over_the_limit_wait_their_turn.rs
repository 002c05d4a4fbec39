//! With `--max-connections 2`, client connections beyond the limit wait to be accepted instead of
//! being refused or dropped: eight payments sent at once, each half a second at the upstream,
//! all get their 201, and each ran once.

use crate::harness::{Proxy, Req, Store, Upstream};

#[test]
fn connections_over_the_limit_wait_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let proxy = Proxy::start(
        &upstream.url(),
        &Store::Db(dir.path().join("store")),
        &["--max-connections", "2"],
    );
    let at = proxy.addr;
    let answers: Vec<_> = std::thread::scope(|s| {
        let clients: Vec<_> = (0..8)
            .map(|i| {
                s.spawn(move || {
                    Req::post("/payments")
                        .key(&format!("k{i}"))
                        .json(&format!("acct-{i}"), 1)
                        .header("X-Delay-After-Ms", "500")
                        .send(at)
                })
            })
            .collect();
        clients.into_iter().map(|c| c.join().unwrap()).collect()
    });
    for (i, got) in answers.iter().enumerate() {
        assert_eq!(got.status, 201, "k{i}: {got}");
        assert!(!got.replayed(), "k{i}: {got}");
        assert_eq!(upstream.payments_of(&format!("acct-{i}")).len(), 1, "k{i}");
    }
    assert_eq!(upstream.effects().len(), 8);
}
