//! A webhook endpoint's secret is rotated while it serves, on both backends
//! (`WebhookLayer::set_secrets`): the receiver that was built before the change verifies under
//! the new set from the next delivery on; secrets that cannot be used are refused and the set in
//! use stays; a delivery signed by a secret no longer listed is 401 and stores nothing.

use idemdb::http::{WebhookError, WebhookLayer, WebhookScheme, WebhookSecrets};

use crate::harness::Harness;
use crate::http_common::client;
use crate::webhooks::{receiver, Delivery, STANDARD_SECRET};

const NEW_SECRET: &str = "whsec_bmV3IHNpZ25pbmcgc2VjcmV0IGZvciB0ZXN0cw==";

async fn check(h: &Harness) {
    let layer = WebhookLayer::new(
        h.store.clone(),
        WebhookScheme::StandardWebhooks,
        "rotating",
        WebhookSecrets::new([STANDARD_SECRET]),
    )
    .unwrap();
    let (addr, handled) = receiver(vec![layer.clone()]).await;
    let c = client();
    let send = |d: Delivery| {
        let c = c.clone();
        async move { d.request(addr, "/hooks/0", None).send(&c).await }
    };
    let by_new = |id: &str, marker: &str| {
        Delivery::standard(id, &format!(r#"{{"order":"{marker}"}}"#)).secret(NEW_SECRET)
    };

    // Before the rotation, the new secret is not one of the endpoint's.
    let early = send(by_new("msg_early", "early")).await;
    assert_eq!(early.status, 401, "{early:?}");
    assert_eq!(handled.count("early"), 0);

    // Both while the provider switches: either verifies, through the receiver built before.
    layer
        .set_secrets(WebhookSecrets::new([STANDARD_SECRET, NEW_SECRET]))
        .unwrap();
    let old = send(Delivery::standard("msg_old", r#"{"order":"old"}"#)).await;
    assert_eq!(old.status, 200, "{old:?}");
    let early = send(by_new("msg_early", "early")).await;
    assert_eq!(early.status, 200, "{early:?}");
    assert_eq!(handled.count("early"), 1);

    // Unusable secrets are refused, and the two in use stay.
    assert!(matches!(
        layer.set_secrets(WebhookSecrets::new(Vec::<String>::new())),
        Err(WebhookError::NoSecret)
    ));
    assert!(matches!(
        layer.set_secrets(WebhookSecrets::new([NEW_SECRET, "whsec_not base64!"])),
        Err(WebhookError::BadSecret { position: 1, .. })
    ));
    let still = send(Delivery::standard("msg_still", r#"{"order":"still"}"#)).await;
    assert_eq!(still.status, 200, "{still:?}");

    // The new secret alone: the old one is refused and stores nothing; a redelivery of an event
    // handled under the old secret, signed by the new one, gets its stored answer.
    layer
        .set_secrets(WebhookSecrets::new([NEW_SECRET]))
        .unwrap();
    let stale = send(Delivery::standard("msg_gone", r#"{"order":"gone"}"#)).await;
    assert_eq!(stale.status, 401, "{stale:?}");
    assert!(h
        .store
        .get(layer.tenant(), "msg_gone")
        .await
        .unwrap()
        .is_none());
    let again = send(Delivery::standard("msg_old", r#"{"order":"old"}"#).secret(NEW_SECRET)).await;
    assert!(again.status == 200 && again.replayed(), "{again:?}");
    assert_eq!(again.body, old.body);
    assert_eq!(handled.count("old"), 1);
    assert_eq!(handled.count("gone"), 0);
}

on_both_backends!(check);
