//! Signed webhooks are received once on both backends: for each scheme (Standard Webhooks,
//! Stripe, GitHub) an event's first delivery runs the handler and a redelivery (signed anew, as
//! providers do) gets the stored answer without reaching it; concurrent twins run it once; a
//! forged, tampered or stale delivery is 401 and stores nothing; a handler failure stores
//! nothing, so the provider's retry runs the handler again; two endpoints never share an event.

use std::time::Duration;

use idemdb::http::{WebhookLayer, WebhookScheme, WebhookSecrets};

use crate::harness::Harness;
use crate::http_common::client;
use crate::webhooks::{receiver, Delivery, GITHUB_SECRET, STANDARD_SECRET, STRIPE_SECRET};

async fn check(h: &Harness) {
    let layer = |scheme, name, secret: &str| {
        // The old secret of a rotation first: either verifies.
        let secrets = WebhookSecrets::new(["whsec_b2xkIHNlY3JldCBrZXk=", secret]);
        WebhookLayer::new(h.store.clone(), scheme, name, secrets).unwrap()
    };
    let layers = vec![
        layer(WebhookScheme::StandardWebhooks, "orders", STANDARD_SECRET),
        layer(WebhookScheme::Stripe, "payments", STRIPE_SECRET),
        layer(WebhookScheme::GitHub, "repo", GITHUB_SECRET),
        layer(
            WebhookScheme::StandardWebhooks,
            "orders-copy",
            STANDARD_SECRET,
        ),
    ];
    let tenants: Vec<String> = layers.iter().map(|l| l.tenant().to_owned()).collect();
    let (addr, handled) = receiver(layers.clone()).await;
    let c = client();

    let cases = [
        (
            0,
            Delivery::standard("msg_1", r#"{"order":"s1"}"#),
            "msg_1",
            "s1",
        ),
        (1, Delivery::stripe("evt_1", 501), "evt_1", "501"),
        (2, Delivery::github("d-1", r#"{"push":"g1"}"#), "d-1", "g1"),
    ];
    for (i, delivery, id, marker) in &cases {
        let path = format!("/hooks/{i}");
        let first = delivery.request(addr, &path, None).send(&c).await;
        assert_eq!(first.status, 200, "{path}: {first:?}");
        assert!(!first.replayed());
        // A redelivery, signed a minute later.
        let again = delivery
            .clone()
            .signed_ago(-60)
            .request(addr, &path, None)
            .send(&c)
            .await;
        assert_eq!(again.status, 200, "{path}: {again:?}");
        assert!(again.replayed(), "{path}: {again:?}");
        assert_eq!(again.body, first.body);
        assert_eq!(handled.count(marker), 1, "{path}");
        let info = h.store.get(&tenants[*i], id).await.unwrap().unwrap();
        assert!(matches!(info.state, idemdb::RecordState::Completed(_)));

        // Refused before anything is claimed: another secret, a tampered body, a stale one.
        let forged = delivery
            .clone()
            .secret("whsec_Zm9yZ2VkIGJ5IGFuIGF0dGFja2Vy");
        let tampered_body = r#"{"id":"evt_9","object":"event","order":"x","push":"y"}"#;
        let mut refused = vec![
            ("forged", forged.request(addr, &path, None)),
            (
                "tampered",
                delivery.request(addr, &path, Some(tampered_body)),
            ),
        ];
        if !matches!(delivery, Delivery::GitHub { .. }) {
            let stale = delivery.clone().signed_ago(600);
            refused.push(("stale", stale.request(addr, &path, None)));
            let future = delivery.clone().signed_ago(-600);
            refused.push(("from the future", future.request(addr, &path, None)));
        }
        for (what, r) in refused {
            let got = r.send(&c).await;
            assert_eq!(got.status, 401, "{path} {what}: {got:?}");
            assert_eq!(got.problem_code(), "webhook-signature-invalid", "{what}");
        }
        assert_eq!(handled.count(marker), 1, "{path}");
        assert!(h.store.get(&tenants[*i], "evt_9").await.unwrap().is_none());
    }

    // A new event forged under a wrong secret stores nothing: its genuine delivery then runs.
    let fresh = Delivery::standard("msg_2", r#"{"order":"s2"}"#);
    let forged = fresh.clone().secret("whsec_Zm9yZ2VkIGJ5IGFuIGF0dGFja2Vy");
    assert_eq!(
        forged.request(addr, "/hooks/0", None).send(&c).await.status,
        401
    );
    assert!(h.store.get(&tenants[0], "msg_2").await.unwrap().is_none());
    assert_eq!(
        fresh.request(addr, "/hooks/0", None).send(&c).await.status,
        200
    );
    assert_eq!(handled.count("s2"), 1);

    // Another endpoint with the same secret keeps its own events.
    let copy = Delivery::standard("msg_1", r#"{"order":"s1"}"#);
    let got = copy.request(addr, "/hooks/3", None).send(&c).await;
    assert_eq!(got.status, 200);
    assert!(!got.replayed());
    assert_eq!(handled.count("s1"), 2);

    // Concurrent twins of one event: one handler run; the others 409 or the stored answer.
    *handled.delay.lock() = Duration::from_millis(300);
    let twin = Delivery::stripe("evt_twins", 777);
    let twins: Vec<_> = (0..6)
        .map(|_| twin.request(addr, "/hooks/1", None).spawn(&c))
        .collect();
    let mut statuses = Vec::new();
    for t in twins {
        statuses.push(t.await.unwrap().status);
    }
    assert!(statuses.contains(&200), "{statuses:?}");
    assert!(
        statuses.iter().all(|&s| s == 200 || s == 409),
        "{statuses:?}"
    );
    *handled.delay.lock() = Duration::ZERO;
    let later = twin.request(addr, "/hooks/1", None).send(&c).await;
    assert!(later.status == 200 && later.replayed(), "{later:?}");
    assert_eq!(handled.count("777"), 1, "{statuses:?}");

    // A handler failure is not stored: the provider's retry runs the handler again.
    *handled.fail_on.lock() = Some("g-fail".into());
    let failing = Delivery::github("d-fail", r#"{"push":"g-fail"}"#);
    for _ in 0..2 {
        let got = failing.request(addr, "/hooks/2", None).send(&c).await;
        assert_eq!(got.status, 500, "{got:?}");
        assert!(!got.replayed());
    }
    assert_eq!(handled.count("g-fail"), 2);
    assert!(h
        .store
        .get(&tenants[2], "d-fail")
        .await
        .unwrap()
        .is_none_or(|r| !matches!(r.state, idemdb::RecordState::Completed(_))));
    *handled.fail_on.lock() = None;
    assert_eq!(
        failing
            .request(addr, "/hooks/2", None)
            .send(&c)
            .await
            .status,
        200
    );
    let replay = failing.request(addr, "/hooks/2", None).send(&c).await;
    assert!(replay.status == 200 && replay.replayed(), "{replay:?}");
    assert_eq!(handled.count("g-fail"), 3);

    let stats = layers[0].stats();
    assert_eq!(stats.store_errors, 0, "{stats:?}");
}

on_both_backends!(check);
