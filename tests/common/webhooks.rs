//! A webhook sender for the tests: deliveries signed as each provider signs them (Standard
//! Webhooks, Stripe, GitHub), written from the providers' documentation, and an axum receiver
//! behind a `WebhookLayer` that counts how often each event reached its handler.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use idemdb::http::WebhookLayer;
use parking_lot::Mutex;
use sha2::Sha256;

use crate::http_common::{req, Req};

pub const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const STRIPE_SECRET: &str = "whsec_test_stripe_endpoint_secret";
pub const GITHUB_SECRET: &str = "It's a Secret to Everybody";

fn hmac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().to_vec()
}

pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// One delivery of an event, signed at `at` (Unix seconds) with `secret`.
#[derive(Clone)]
pub enum Delivery {
    Standard {
        id: String,
        body: String,
        at: i64,
        secret: String,
    },
    Stripe {
        body: String,
        at: i64,
        secret: String,
    },
    GitHub {
        delivery: String,
        body: String,
        secret: String,
    },
}

impl Delivery {
    pub fn standard(id: &str, body: &str) -> Self {
        Delivery::Standard {
            id: id.into(),
            body: body.into(),
            at: now_secs(),
            secret: STANDARD_SECRET.into(),
        }
    }

    /// A Stripe event object whose `id` is `id`.
    pub fn stripe(id: &str, amount: u32) -> Self {
        Delivery::Stripe {
            body: format!(
                r#"{{"id":"{id}","object":"event","type":"charge.succeeded","data":{{"amount":{amount}}}}}"#
            ),
            at: now_secs(),
            secret: STRIPE_SECRET.into(),
        }
    }

    pub fn github(delivery: &str, body: &str) -> Self {
        Delivery::GitHub {
            delivery: delivery.into(),
            body: body.into(),
            secret: GITHUB_SECRET.into(),
        }
    }

    /// Signed `secs` seconds earlier (a redelivery is signed anew; a replayed capture is old).
    pub fn signed_ago(mut self, secs: i64) -> Self {
        match &mut self {
            Delivery::Standard { at, .. } | Delivery::Stripe { at, .. } => *at = now_secs() - secs,
            Delivery::GitHub { .. } => {}
        }
        self
    }

    pub fn secret(mut self, s: &str) -> Self {
        match &mut self {
            Delivery::Standard { secret, .. }
            | Delivery::Stripe { secret, .. }
            | Delivery::GitHub { secret, .. } => *secret = s.into(),
        }
        self
    }

    /// The request as the provider sends it; `tamper` replaces the body after signing.
    pub fn request(&self, addr: SocketAddr, path: &str, tamper: Option<&str>) -> Req {
        let r = req(addr, "POST", path).header("content-type", "application/json");
        match self {
            Delivery::Standard {
                id,
                body,
                at,
                secret,
            } => {
                let key = base64::engine::general_purpose::STANDARD
                    .decode(secret.trim_start_matches("whsec_"))
                    .expect("base64 secret");
                let ts = at.to_string();
                let sig = hmac(
                    &key,
                    &[id.as_bytes(), b".", ts.as_bytes(), b".", body.as_bytes()],
                );
                let sig = base64::engine::general_purpose::STANDARD.encode(sig);
                r.header("webhook-id", id)
                    .header("webhook-timestamp", &ts)
                    .header("webhook-signature", &format!("v1,{sig}"))
                    .body(tamper.unwrap_or(body))
            }
            Delivery::Stripe { body, at, secret } => {
                let ts = at.to_string();
                let sig = hmac(secret.as_bytes(), &[ts.as_bytes(), b".", body.as_bytes()]);
                r.header(
                    "stripe-signature",
                    &format!("t={ts},v1={}", hex::encode(sig)),
                )
                .body(tamper.unwrap_or(body))
            }
            Delivery::GitHub {
                delivery,
                body,
                secret,
            } => {
                let sig = hmac(secret.as_bytes(), &[body.as_bytes()]);
                r.header("x-github-delivery", delivery)
                    .header("x-github-event", "push")
                    .header(
                        "x-hub-signature-256",
                        &format!("sha256={}", hex::encode(sig)),
                    )
                    .body(tamper.unwrap_or(body))
            }
        }
    }
}

/// How often each event's body reached the handler, and how the handler answers.
#[derive(Default)]
pub struct Handled {
    pub bodies: Mutex<HashMap<String, u32>>,
    /// Bodies containing this text make the handler fail with 500 (until cleared).
    pub fail_on: Mutex<Option<String>>,
    pub delay: Mutex<Duration>,
}

impl Handled {
    pub fn count(&self, body_part: &str) -> u32 {
        self.bodies
            .lock()
            .iter()
            .filter(|(b, _)| b.contains(body_part))
            .map(|(_, n)| *n)
            .sum()
    }
}

async fn handle(
    State(h): State<Arc<Handled>>,
    _headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let text = String::from_utf8_lossy(&body).into_owned();
    let delay = *h.delay.lock();
    tokio::time::sleep(delay).await;
    let n = {
        let mut b = h.bodies.lock();
        let n = b.entry(text.clone()).or_default();
        *n += 1;
        *n
    };
    if h.fail_on
        .lock()
        .as_deref()
        .is_some_and(|f| text.contains(f))
    {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("failed {n}"));
    }
    (StatusCode::OK, format!("handled {n}"))
}

/// A receiver on 127.0.0.1 with one route per layer: `/hooks/0`, `/hooks/1`, ...
pub async fn receiver(layers: Vec<WebhookLayer>) -> (SocketAddr, Arc<Handled>) {
    let handled = Arc::new(Handled::default());
    let mut app = Router::new();
    for (i, layer) in layers.into_iter().enumerate() {
        app = app.route(&format!("/hooks/{i}"), post(handle).layer(layer));
    }
    let app = app.with_state(handled.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve");
    });
    (addr, handled)
}
