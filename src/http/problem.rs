//! Problem responses (RFC 9457 `application/problem+json`). Invariant: every refusal the layer
//! makes itself is one of these, with a stable machine-readable `code` and a detail that says what
//! to change; nothing from the request is echoed unescaped.

use http::{header, HeaderValue, Response, StatusCode};

use super::body::{full, HttpBody};

/// A problem document for `status`, with a stable `code` (for example `idempotency-key-missing`)
/// and a human-readable `detail`.
pub(crate) fn problem(status: StatusCode, code: &str, detail: &str) -> Response<HttpBody> {
    let title = status.canonical_reason().unwrap_or("Error");
    let body = format!(
        "{{\"type\":\"about:blank\",\"title\":{},\"status\":{},\"code\":{},\"detail\":{}}}",
        json_string(title),
        status.as_u16(),
        json_string(code),
        json_string(detail)
    );
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    resp
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
mod tests {
    use super::json_string;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }
}
