//! Keys are scoped by principal: bob using alice's key neither replays her response, nor gets a
//! 409 while hers runs, nor a 422 for a different body; each runs his own request, and so does a
//! principal spelled like alice's stored tenant.
use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{client, req, serve};
use idemdb::Durability;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_never_share_keys() {
    let srv = serve(Durability::Buffered, 1 << 20, |l| l).await;
    let c = client();
    // Alice's request is still running when bob sends the same key.
    let alice = req(srv.addr, "POST", "/pay")
        .key("shared")
        .user("alice")
        .header("x-delay-ms", "300")
        .body("alice pays 5")
        .spawn(&c);
    tokio::time::sleep(Duration::from_millis(80)).await;
    let bob = req(srv.addr, "POST", "/pay")
        .key("shared")
        .user("bob")
        .body("bob pays 9")
        .send(&c)
        .await;
    assert_eq!(bob.status, 201, "bob is not blocked by alice: {bob:?}");
    assert!(!bob.replayed());
    let alice = alice.await.expect("alice");
    assert_eq!(alice.status, 201);
    assert_ne!(alice.body, bob.body);

    let alice_again = req(srv.addr, "POST", "/pay")
        .key("shared")
        .user("alice")
        .body("alice pays 5")
        .send(&c)
        .await;
    let bob_again = req(srv.addr, "POST", "/pay")
        .key("shared")
        .user("bob")
        .body("bob pays 9")
        .send(&c)
        .await;
    assert_eq!(alice_again.body, alice.body);
    assert_eq!(bob_again.body, bob.body);
    assert!(alice_again.replayed() && bob_again.replayed());
    // Carol probing the key learns nothing: her request simply runs.
    let carol = req(srv.addr, "POST", "/pay")
        .key("shared")
        .user("carol")
        .body("alice pays 5")
        .send(&c)
        .await;
    assert!(!carol.replayed());
    // Nor does a principal spelled like alice's stored tenant (`p` + her principal).
    let tagged = srv.layer.tenant_of("alice").expect("alice's tenant");
    assert_eq!(tagged, "palice");
    let spelled = req(srv.addr, "POST", "/pay")
        .key("shared")
        .user(&tagged)
        .body("alice pays 5")
        .send(&c)
        .await;
    assert_eq!(spelled.status, 201);
    assert!(!spelled.replayed());
    assert_eq!(srv.calls.pay.load(Ordering::SeqCst), 4);
}
