//! A principal spelled like another principal's hash never reaches that principal's keys. Earlier
//! versions stored a long principal under its bare SHA-256 hex, which a literal principal of 64
//! bytes could equal: it replayed the long principal's responses and learned its keys by their
//! 422s. Tenants are now tagged (`p` + principal, `h` + hash): neither that hex string nor the new
//! hashed tenant, used as principals, replays or probes anything.
use crate::common;

use std::sync::atomic::Ordering;

use common::{client, req, serve};
use idemdb::{derive_key, Durability};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principal_spelled_like_a_hash_stays_apart() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| l).await;
    let c = client();
    let long = "org-".repeat(20); // 80 bytes: over the store's 64-byte tenant limit
    let first = req(srv.addr, "POST", "/pay")
        .key("k")
        .user(&long)
        .body("x")
        .send(&c)
        .await;
    assert_eq!(first.status, 201);
    let probed = req(srv.addr, "POST", "/pay")
        .key("k2")
        .user(&long)
        .body("secret")
        .send(&c)
        .await;
    assert_eq!(probed.status, 201);

    let new_tenant = srv.layer.tenant_of(&long).expect("a tenant");
    let spellings = [derive_key(&[long.as_bytes()]), new_tenant.clone()];
    for spelled in &spellings {
        let same = req(srv.addr, "POST", "/pay")
            .key("k")
            .user(spelled)
            .body("x")
            .send(&c)
            .await;
        assert_eq!(same.status, 201, "{spelled}: {same:?}");
        assert!(!same.replayed(), "{spelled} replayed another's response");
        assert_ne!(same.body, first.body);
        let probe = req(srv.addr, "POST", "/pay")
            .key("k2")
            .user(spelled)
            .body("guess")
            .send(&c)
            .await;
        assert_eq!(
            probe.status, 201,
            "{spelled} probed another's key: {probe:?}"
        );
        assert_ne!(srv.layer.tenant_of(spelled), Some(new_tenant.clone()));
    }
    assert_eq!(srv.calls.pay.load(Ordering::SeqCst), 2 + 2 * 2);
    // The long principal's own records are intact.
    let again = req(srv.addr, "POST", "/pay")
        .key("k")
        .user(&long)
        .body("x")
        .send(&c)
        .await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
}
