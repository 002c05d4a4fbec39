//! Webhook signatures: whether a delivery was signed by one of an endpoint's secrets, and which
//! event it carries. Invariant: an event is accepted only when one of the secrets signs exactly
//! the bytes its scheme signs (the body, with the id and the timestamp the scheme covers) and,
//! for a scheme with a timestamp, that timestamp is within the tolerance of the receiver's clock,
//! either way; digests are compared in constant time (`hmac`'s `verify_slice`); nothing is read
//! from the body (Stripe's event id) before its signature verifies. No I/O: the layer
//! (`webhook.rs`) gives the headers, the body and the time.

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;

/// A webhook sender's signing scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WebhookScheme {
    /// [Standard Webhooks](https://www.standardwebhooks.com/) (Svix, and the providers that
    /// follow the specification): `webhook-id`, `webhook-timestamp` (Unix seconds) and
    /// `webhook-signature` (space-separated `v1,<base64>` entries), HMAC-SHA256 over
    /// `id.timestamp.body` with the secret's bytes (a secret is written `whsec_<base64>`). The
    /// event id is `webhook-id`.
    StandardWebhooks,
    /// Stripe: `Stripe-Signature: t=<Unix seconds>,v1=<hex>[,v1=<hex>...]`, HMAC-SHA256 over
    /// `t.body` with the endpoint's signing secret as written (`whsec_...`). The event id is the
    /// `id` of the event object in the body (`evt_...`).
    Stripe,
    /// GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 over the body with the webhook's
    /// secret as written. The event id is `X-GitHub-Delivery` (a redelivery keeps it). GitHub
    /// signs no timestamp: an old delivery sent again is answered from the store while its
    /// outcome is kept (the layer's retention), not refused as stale.
    GitHub,
}

impl WebhookScheme {
    /// The scheme's name in scopes, logs and the proxy's routes: `standard`, `stripe`, `github`.
    pub fn name(self) -> &'static str {
        match self {
            WebhookScheme::StandardWebhooks => "standard",
            WebhookScheme::Stripe => "stripe",
            WebhookScheme::GitHub => "github",
        }
    }
}

/// A signing key as the scheme uses it. Never printed: its `Debug` says only that it is one.
#[derive(Clone)]
pub(crate) struct Key(Vec<u8>);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(redacted)")
    }
}

/// Why a secret cannot be a key of its scheme (never showing the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BadSecret {
    Empty,
    /// A Standard Webhooks secret whose part after `whsec_` is not base64.
    NotBase64,
}

/// The key a secret gives under `scheme`: Standard Webhooks' secrets are `whsec_` (optional)
/// followed by the key's base64; Stripe's and GitHub's are used as written.
pub(crate) fn key_of(scheme: WebhookScheme, secret: &str) -> Result<Key, BadSecret> {
    let secret = secret.trim();
    if secret.is_empty() {
        return Err(BadSecret::Empty);
    }
    match scheme {
        WebhookScheme::StandardWebhooks => {
            let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
            let key = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| BadSecret::NotBase64)?;
            if key.is_empty() {
                return Err(BadSecret::Empty);
            }
            Ok(Key(key))
        }
        WebhookScheme::Stripe | WebhookScheme::GitHub => Ok(Key(secret.as_bytes().to_vec())),
    }
}

/// Why a delivery is refused (its `detail` names no secret and echoes nothing of the request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A header the scheme needs is absent, or sent more than once.
    Header(&'static str, &'static str),
    /// A header or the body is not in the scheme's form.
    Malformed(&'static str),
    /// The signed timestamp is further from the receiver's clock than the tolerance.
    Stale {
        off_by_secs: u64,
        tolerance_secs: u64,
    },
    /// No signature in the delivery is one of the endpoint's secrets' over these bytes.
    NoMatch,
}

impl Refused {
    pub(crate) fn detail(&self) -> String {
        match self {
            Refused::Header(name, how) => format!("the `{name}` header is {how}"),
            Refused::Malformed(what) => format!("{what} is not in the scheme's form"),
            Refused::Stale {
                off_by_secs,
                tolerance_secs,
            } => format!(
                "the signed timestamp is {off_by_secs} s away from this server's clock, more \
                 than the {tolerance_secs} s tolerated (a replayed or delayed delivery)"
            ),
            Refused::NoMatch => {
                "no signature in the delivery matches this endpoint's secrets over its body"
                    .to_owned()
            }
        }
    }
}

/// The one value of a header the scheme needs, as text.
fn one<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<&'h str, Refused> {
    let mut values = headers.get_all(name).iter();
    let value = values.next().ok_or(Refused::Header(name, "missing"))?;
    if values.next().is_some() {
        return Err(Refused::Header(name, "sent more than once"));
    }
    value
        .to_str()
        .map_err(|_| Refused::Header(name, "not visible ASCII"))
}

/// Whether `unix_secs` is within `tolerance` of `now_secs`, either way.
fn fresh(unix_secs: i64, now_secs: i64, tolerance: Duration) -> Result<(), Refused> {
    let off_by_secs = unix_secs.abs_diff(now_secs);
    if off_by_secs > tolerance.as_secs() {
        return Err(Refused::Stale {
            off_by_secs,
            tolerance_secs: tolerance.as_secs(),
        });
    }
    Ok(())
}

fn timestamp(text: &str, what: &'static str) -> Result<i64, Refused> {
    // Digits only: no sign, no spaces, no exponent.
    if text.is_empty() || text.len() > 18 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Refused::Malformed(what));
    }
    text.parse().map_err(|_| Refused::Malformed(what))
}

/// Whether `digest` is some key's HMAC-SHA256 over the concatenation of `parts`.
fn signed_by(keys: &[Key], parts: &[&[u8]], digest: &[u8]) -> bool {
    keys.iter().any(|Key(k)| {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(k) else {
            return false;
        };
        for p in parts {
            mac.update(p);
        }
        mac.verify_slice(digest).is_ok()
    })
}

/// Checks a delivery under `scheme`: its event id when one of `keys` signed it within
/// `tolerance` of `now_secs` (Unix seconds), or why it is refused.
pub(crate) fn verify(
    scheme: WebhookScheme,
    keys: &[Key],
    tolerance: Duration,
    headers: &HeaderMap,
    body: &[u8],
    now_secs: i64,
) -> Result<String, Refused> {
    match scheme {
        WebhookScheme::StandardWebhooks => {
            let id = one(headers, "webhook-id")?;
            let ts_text = one(headers, "webhook-timestamp")?;
            let ts = timestamp(ts_text, "the `webhook-timestamp` header")?;
            let sigs = one(headers, "webhook-signature")?;
            if id.is_empty() {
                return Err(Refused::Header("webhook-id", "empty"));
            }
            // The signature before the clock: an unsigned delivery learns nothing of the time.
            let signed = [id.as_bytes(), b".", ts_text.as_bytes(), b".", body];
            let found = sigs.split(' ').filter(|s| !s.is_empty()).any(|entry| {
                let Some(("v1", b64)) = entry.split_once(',') else {
                    return false;
                };
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .is_ok_and(|digest| signed_by(keys, &signed, &digest))
            });
            if !found {
                return Err(Refused::NoMatch);
            }
            fresh(ts, now_secs, tolerance)?;
            Ok(id.to_owned())
        }
        WebhookScheme::Stripe => {
            let header = one(headers, "stripe-signature")?;
            let mut ts_text = None;
            let mut digests = Vec::new();
            for item in header.split(',') {
                match item.trim().split_once('=') {
                    Some(("t", v)) if ts_text.is_none() => ts_text = Some(v),
                    Some(("t", _)) => return Err(Refused::Malformed("`Stripe-Signature`")),
                    Some(("v1", v)) => digests.push(v),
                    // v0 (test mode's old scheme) and anything newer are not trusted.
                    _ => {}
                }
            }
            let ts_text = ts_text.ok_or(Refused::Malformed("`Stripe-Signature` (no `t=`)"))?;
            let ts = timestamp(ts_text, "the `t=` of `Stripe-Signature`")?;
            let signed = [ts_text.as_bytes(), b".", body];
            let found = digests
                .iter()
                .any(|v| hex::decode(v).is_ok_and(|digest| signed_by(keys, &signed, &digest)));
            if !found {
                return Err(Refused::NoMatch);
            }
            fresh(ts, now_secs, tolerance)?;
            stripe_event_id(body)
        }
        WebhookScheme::GitHub => {
            let sig = one(headers, "x-hub-signature-256")?;
            let id = one(headers, "x-github-delivery")?;
            if id.is_empty() {
                return Err(Refused::Header("x-github-delivery", "empty"));
            }
            let digest = sig
                .strip_prefix("sha256=")
                .and_then(|h| hex::decode(h).ok())
                .ok_or(Refused::Malformed("the `X-Hub-Signature-256` header"))?;
            if !signed_by(keys, &[body], &digest) {
                return Err(Refused::NoMatch);
            }
            Ok(id.to_owned())
        }
    }
}

/// The `id` of a Stripe event (the body, already verified): a non-empty string at the top level.
fn stripe_event_id(body: &[u8]) -> Result<String, Refused> {
    #[derive(serde::Deserialize)]
    struct Event {
        id: String,
    }
    match serde_json::from_slice::<Event>(body) {
        Ok(Event { id }) if !id.is_empty() => Ok(id),
        _ => Err(Refused::Malformed(
            "the event (no string `id` in the JSON body)",
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const DAY: Duration = Duration::from_secs(86_400);

    /// The Standard Webhooks specification's example (its reference libraries' test vector).
    #[test]
    fn standard_webhooks_published_vector_verifies() {
        let key = key_of(
            WebhookScheme::StandardWebhooks,
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )
        .unwrap();
        let h = headers(&[
            ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
            ("webhook-timestamp", "1614265330"),
            (
                "webhook-signature",
                "v1,bm9ldHUjKzFob2VudXRob2VodWUzMjRvdWVvdW9ldQo= \
                 v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            ),
        ]);
        let body = br#"{"test": 2432232314}"#;
        let got = verify(
            WebhookScheme::StandardWebhooks,
            std::slice::from_ref(&key),
            Duration::from_secs(300),
            &h,
            body,
            1_614_265_330 + 10,
        );
        assert_eq!(got, Ok("msg_p5jXN8AQM9LWM0D4loKWxJek".to_owned()));
        // One byte of the body changed, or the clock past the tolerance.
        let tampered = br#"{"test": 2432232315}"#;
        let err = verify(
            WebhookScheme::StandardWebhooks,
            std::slice::from_ref(&key),
            DAY,
            &h,
            tampered,
            1_614_265_330,
        );
        assert_eq!(err, Err(Refused::NoMatch));
        let stale = verify(
            WebhookScheme::StandardWebhooks,
            &[key],
            Duration::from_secs(300),
            &h,
            body,
            1_614_265_330 + 301,
        );
        assert!(
            matches!(
                stale,
                Err(Refused::Stale {
                    off_by_secs: 301,
                    ..
                })
            ),
            "{stale:?}"
        );
    }

    /// GitHub's documented example ("Validating webhook deliveries").
    #[test]
    fn github_published_vector_verifies() {
        let key = key_of(WebhookScheme::GitHub, "It's a Secret to Everybody").unwrap();
        let h = headers(&[
            (
                "x-hub-signature-256",
                "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            ),
            ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ]);
        let got = verify(
            WebhookScheme::GitHub,
            std::slice::from_ref(&key),
            DAY,
            &h,
            b"Hello, World!",
            0,
        );
        assert_eq!(got, Ok("72d3162e-cc78-11e3-81ab-4c9367dc0958".to_owned()));
        let other = key_of(WebhookScheme::GitHub, "another secret").unwrap();
        let err = verify(
            WebhookScheme::GitHub,
            &[other],
            DAY,
            &h,
            b"Hello, World!",
            0,
        );
        assert_eq!(err, Err(Refused::NoMatch));
    }

    /// Stripe documents the algorithm, not a vector: the expected digest was computed with
    /// Python's `hmac` (an implementation independent of this one):
    /// `hmac.new(b"whsec_test_secret", b"1700000000." + body, hashlib.sha256).hexdigest()`.
    #[test]
    fn stripe_signature_verifies_and_names_the_event() {
        const DIGEST: &str = "8042376f6ca064adbe037642a718227dfd59047137eb49497a54c49eb0cfb724";
        let body = br#"{"id":"evt_test","object":"event"}"#;
        let key = key_of(WebhookScheme::Stripe, "whsec_test_secret").unwrap();
        let tol = Duration::from_secs(300);
        // A rolled secret's entry first, and a v0 entry, which is never trusted.
        let good = headers(&[(
            "stripe-signature",
            &format!("t=1700000000,v0={DIGEST},v1=00ff,v1={DIGEST}"),
        )]);
        let got = verify(
            WebhookScheme::Stripe,
            std::slice::from_ref(&key),
            tol,
            &good,
            body,
            1_700_000_100,
        );
        assert_eq!(got, Ok("evt_test".to_owned()));
        let v0_only = headers(&[("stripe-signature", &format!("t=1700000000,v0={DIGEST}"))]);
        let err = verify(
            WebhookScheme::Stripe,
            std::slice::from_ref(&key),
            tol,
            &v0_only,
            body,
            1_700_000_100,
        );
        assert_eq!(err, Err(Refused::NoMatch));
        // The timestamp is signed: moving it breaks the signature.
        let moved = headers(&[("stripe-signature", &format!("t=1700000001,v1={DIGEST}"))]);
        let err = verify(
            WebhookScheme::Stripe,
            std::slice::from_ref(&key),
            tol,
            &moved,
            body,
            1_700_000_100,
        );
        assert_eq!(err, Err(Refused::NoMatch));
        let late = verify(
            WebhookScheme::Stripe,
            &[key],
            tol,
            &good,
            body,
            1_700_000_301,
        );
        assert!(matches!(late, Err(Refused::Stale { .. })), "{late:?}");
    }

    #[test]
    fn rotated_secrets_each_verify_and_missing_headers_are_named() {
        let old = key_of(WebhookScheme::GitHub, "old").unwrap();
        let new = key_of(WebhookScheme::GitHub, "new").unwrap();
        let mut mac = Hmac::<Sha256>::new_from_slice(b"old").unwrap();
        mac.update(b"{}");
        let sig = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        let h = headers(&[("x-hub-signature-256", &sig), ("x-github-delivery", "d1")]);
        assert_eq!(
            verify(
                WebhookScheme::GitHub,
                &[new.clone(), old],
                DAY,
                &h,
                b"{}",
                0
            ),
            Ok("d1".into())
        );
        assert_eq!(
            verify(
                WebhookScheme::GitHub,
                std::slice::from_ref(&new),
                DAY,
                &h,
                b"{}",
                0
            ),
            Err(Refused::NoMatch)
        );
        let none = headers(&[("x-hub-signature-256", &sig)]);
        assert_eq!(
            verify(WebhookScheme::GitHub, &[new], DAY, &none, b"{}", 0),
            Err(Refused::Header("x-github-delivery", "missing"))
        );
    }

    #[test]
    fn secrets_are_checked_and_never_printed() {
        assert_eq!(
            key_of(WebhookScheme::StandardWebhooks, "whsec_!!!").unwrap_err(),
            BadSecret::NotBase64
        );
        assert_eq!(
            key_of(WebhookScheme::Stripe, "  ").unwrap_err(),
            BadSecret::Empty
        );
        let k = key_of(WebhookScheme::Stripe, "whsec_topsecret").unwrap();
        assert!(!format!("{k:?}").contains("topsecret"));
    }
}
