//! Problem responses (RFC 9457 `application/problem+json`). Invariant: every refusal the layer
//! makes itself is one of these, with a stable machine-readable `code`, a `type` that is the
//! documentation base followed by that code (`about:blank` when there is no base) and a detail
//! that says what to change; nothing from the request is echoed unescaped.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};

use super::body::{full, HttpBody};

/// The default documentation base: this version's `idemdb::http` docs on docs.rs, whose
/// "Problem codes" section has an anchor per code.
pub(crate) const DEFAULT_DOCS: &str = concat!(
    "https://docs.rs/idemdb/",
    env!("CARGO_PKG_VERSION"),
    "/idemdb/http/index.html#"
);

/// A problem document for `status`, with a stable `code` (for example `idempotency-key-missing`)
/// and a human-readable `detail`. With a non-empty `docs` base, its `type` is `docs` + `code` and
/// the response links to it with `Link: <docs + code>; rel="help"` (the header is left out if that
/// URI cannot be sent in one: a byte outside visible ASCII, or `<` `>`).
pub(crate) fn problem(
    docs: &str,
    status: StatusCode,
    code: &str,
    detail: &str,
) -> Response<HttpBody> {
    #[cfg_attr(not(feature = "grpc"), allow(unused_mut))]
    let (mut parts, body) = problem_parts(docs, status, code, detail);
    // For a layer above (the gRPC layer) that answers the refusal in its own protocol.
    #[cfg(feature = "grpc")]
    parts.extensions.insert(Refusal {
        code: code.to_owned(),
        detail: detail.to_owned(),
    });
    Response::from_parts(parts, full(body))
}

/// In the extensions of every problem the layer answers itself (never of a stored or replayed
/// answer): its code and detail.
#[cfg(feature = "grpc")]
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    pub(crate) code: String,
    pub(crate) detail: String,
}

/// [`problem`]'s head and its document's bytes, for a caller that also stores them.
pub(crate) fn problem_parts(
    docs: &str,
    status: StatusCode,
    code: &str,
    detail: &str,
) -> (http::response::Parts, Bytes) {
    let (uri, body) = document(docs, status, code, detail);
    let (mut parts, ()) = Response::new(()).into_parts();
    parts.status = status;
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if let Some(link) = link(docs, &uri) {
        parts.headers.insert(header::LINK, link);
    }
    (parts, Bytes::from(body))
}

/// The problem's `type` URI and its JSON document.
fn document(docs: &str, status: StatusCode, code: &str, detail: &str) -> (String, String) {
    let title = status.canonical_reason().unwrap_or("Error");
    let uri = if docs.is_empty() {
        "about:blank".to_owned()
    } else {
        format!("{docs}{code}")
    };
    let body = format!(
        "{{\"type\":{},\"title\":{},\"status\":{},\"code\":{},\"detail\":{}}}",
        json_string(&uri),
        json_string(title),
        status.as_u16(),
        json_string(code),
        json_string(detail)
    );
    (uri, body)
}

/// The `Link: <uri>; rel="help"` header of a problem, when it can be sent.
fn link(docs: &str, uri: &str) -> Option<HeaderValue> {
    if docs.is_empty() || uri.contains(['<', '>']) {
        return None;
    }
    HeaderValue::from_str(&format!("<{uri}>; rel=\"help\"")).ok()
}

/// A JSON string literal for `s`.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }

    fn body_of(resp: Response<HttpBody>) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = rt.block_on(async { resp.into_body().collect().await.unwrap().to_bytes() });
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn type_and_link_name_the_code_under_the_docs_base() {
        let resp = problem(
            DEFAULT_DOCS,
            StatusCode::BAD_REQUEST,
            "idempotency-key-missing",
            "d",
        );
        let uri = format!("{DEFAULT_DOCS}idempotency-key-missing");
        assert!(uri.starts_with("https://docs.rs/idemdb/"));
        assert_eq!(
            resp.headers()[header::LINK],
            format!("<{uri}>; rel=\"help\"").as_str()
        );
        assert!(
            body_of(resp).starts_with(&format!("{{\"type\":\"{uri}\",\"title\":\"Bad Request\""))
        );

        let bare = problem("", StatusCode::CONFLICT, "c", "d");
        assert!(bare.headers().get(header::LINK).is_none());
        assert!(body_of(bare).starts_with("{\"type\":\"about:blank\""));

        let odd = problem("https://x/<y>#", StatusCode::CONFLICT, "c", "d");
        assert!(odd.headers().get(header::LINK).is_none());
        assert!(body_of(odd).starts_with("{\"type\":\"https://x/<y>#c\""));
    }
}
