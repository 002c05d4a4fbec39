//! A principal longer than the store's tenant limit (64 bytes) is not refused: it is stored under
//! a tagged hash of itself (`h` + SHA-256 hex), so two long principals that share their first 64
//! bytes still never share a key.
use crate::common;

use std::sync::atomic::Ordering;

use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_principals_are_hashed_not_shared() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| l).await;
    let c = client();
    let prefix = "org-".repeat(20); // 80 bytes
    let (a, b) = (format!("{prefix}alice"), format!("{prefix}bob"));
    let first_a = req(srv.addr, "POST", "/pay")
        .key("k")
        .user(&a)
        .body("x")
        .send(&c)
        .await;
    let first_b = req(srv.addr, "POST", "/pay")
        .key("k")
        .user(&b)
        .body("x")
        .send(&c)
        .await;
    assert_eq!((first_a.status, first_b.status), (201, 201));
    assert!(!first_b.replayed(), "b must not get a's response");
    let again_a = req(srv.addr, "POST", "/pay")
        .key("k")
        .user(&a)
        .body("x")
        .send(&c)
        .await;
    assert!(again_a.replayed());
    assert_eq!(again_a.body, first_a.body);
    assert_eq!(srv.calls.pay.load(Ordering::SeqCst), 2);

    // Each is stored under its own hashed tenant, within the limit.
    let (ta, tb) = (
        srv.layer.tenant_of(&a).unwrap(),
        srv.layer.tenant_of(&b).unwrap(),
    );
    assert_ne!(ta, tb);
    for t in [&ta, &tb] {
        assert!(t.starts_with('h') && t.len() == 64, "{t}");
        assert!(srv.store.get(t, "k").unwrap().is_some(), "{t}");
    }
}
