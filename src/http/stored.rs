//! How an HTTP response is kept in a record and replayed. Invariant: a replay carries the stored
//! status, the stored body byte for byte, only the allow-listed headers (never `Set-Cookie`),
//! `Idempotent-Replayed: true` and `Idempotency-Replayed: true`; a response stored without its
//! body (too large for the store) replays with an empty body and `Idempotent-Body-Omitted: true`.
//!
//! Layout in [`Response::meta`]: `status` → the code; `h:<lower-case name>` → the header's values
//! joined by `\n` (a header value can never contain a newline); `body-omitted` → `true` when the
//! body was left out. Values that are not visible ASCII are not stored.

use std::collections::BTreeMap;

use http::response::Parts;
use http::{HeaderName, HeaderValue, Response as HttpResponse, StatusCode};

use super::body::{full, HttpBody};
use crate::record::{Replay, Response};

/// The header added to every replayed response (Stripe's spelling).
pub(crate) const REPLAYED: &str = "idempotent-replayed";
/// The same, in the spelling of the IETF draft's discussion and other implementations.
pub(crate) const REPLAYED_DRAFT: &str = "idempotency-replayed";
/// On a replay whose body was too large to store: the body is empty, the rest is as stored.
pub(crate) const BODY_OMITTED_HEADER: &str = "idempotent-body-omitted";
/// The metadata entry that marks a response stored without its body.
pub(crate) const BODY_OMITTED: &str = "body-omitted";
/// On stored and replayed answers: how long the key's outcome is kept, in seconds.
pub(crate) const RETENTION: &str = "idempotency-key-retention";
const HEADER_PREFIX: &str = "h:";

/// The metadata to store for a response with these parts, keeping only `allowed` headers.
pub(crate) fn meta_of(parts: &Parts, allowed: &[HeaderName]) -> BTreeMap<String, String> {
    let mut meta = BTreeMap::new();
    meta.insert("status".to_string(), parts.status.as_u16().to_string());
    for name in allowed {
        let values: Vec<&str> = parts
            .headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if !values.is_empty() {
            meta.insert(
                format!("{HEADER_PREFIX}{}", name.as_str()),
                values.join("\n"),
            );
        }
    }
    meta
}

/// Bytes the metadata counts against the store's response limit (with the body's own length
/// prefix, at most 9 bytes), as [`Response::size`] counts them.
pub(crate) fn meta_size(meta: &BTreeMap<String, String>) -> usize {
    crate::record::meta_size(meta) + 9
}

/// The HTTP response replaying `replay`.
pub(crate) fn replay_response(replay: Replay) -> HttpResponse<HttpBody> {
    let Response { body, meta } = replay.response;
    let status = meta
        .get("status")
        .and_then(|s| s.parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut resp = HttpResponse::new(full(body));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    for (k, v) in &meta {
        let Some(name) = k.strip_prefix(HEADER_PREFIX) else {
            continue;
        };
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        if name == http::header::SET_COOKIE {
            continue;
        }
        for value in v.split('\n') {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.append(name.clone(), value);
            }
        }
    }
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    headers.insert(REPLAYED_DRAFT, HeaderValue::from_static("true"));
    if meta.get(BODY_OMITTED).is_some_and(|v| v == "true") {
        headers.insert(BODY_OMITTED_HEADER, HeaderValue::from_static("true"));
    }
    resp
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::header::{CONTENT_TYPE, LOCATION, SET_COOKIE};
    use http_body_util::BodyExt;

    #[test]
    fn round_trip_keeps_status_allowed_headers_and_body() {
        let (parts, ()) = HttpResponse::builder()
            .status(201)
            .header(LOCATION, "/p/1")
            .header(SET_COOKIE, "s=1")
            .header(CONTENT_TYPE, "text/plain")
            .header("x-multi", "a")
            .header("x-multi", "b")
            .body(())
            .unwrap()
            .into_parts();
        let allowed = [LOCATION, CONTENT_TYPE, HeaderName::from_static("x-multi")];
        let meta = meta_of(&parts, &allowed);
        let replay = Replay {
            response: Response {
                body: b"hello".to_vec(),
                meta,
            },
            finished_at: 0,
        };
        let resp = replay_response(replay);
        assert_eq!(resp.status(), 201);
        assert_eq!(resp.headers()[LOCATION], "/p/1");
        assert!(resp.headers().get(SET_COOKIE).is_none());
        let multi: Vec<_> = resp.headers().get_all("x-multi").iter().collect();
        assert_eq!(multi, ["a", "b"]);
        assert_eq!(resp.headers()[REPLAYED], "true");
        assert_eq!(resp.headers()[REPLAYED_DRAFT], "true");
        assert!(resp.headers().get(BODY_OMITTED_HEADER).is_none());
        let body = futures_body(resp.into_body());
        assert_eq!(body, b"hello");
    }

    fn futures_body(b: HttpBody) -> Vec<u8> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async { b.collect().await.unwrap().to_bytes().to_vec() })
    }
}
