//! The `Idempotency-Key` header and the request fingerprint. Invariant: a key is accepted only if
//! it is exactly one header whose value is a structured-field string (`"abc"`, RFC 8941) or a bare
//! token of visible ASCII, 1 to `max_len` bytes after unescaping; anything else is a typed
//! [`KeyError`] and never reaches the store.

use http::request::Parts;
use http::{HeaderMap, HeaderName};

/// The header's name, lower-case as HTTP/2 sends it.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Why an `Idempotency-Key` header was refused (each becomes a 400 problem response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// The header was sent more than once.
    Repeated,
    /// The value is empty (`""` or nothing).
    Empty,
    /// Longer than the limit, in bytes after unescaping.
    TooLong { len: usize, max: usize },
    /// A byte outside visible ASCII, or an unescaped `"` or `\`, or text after the closing quote.
    Malformed(&'static str),
}

impl KeyError {
    pub(crate) fn detail(&self) -> String {
        match self {
            KeyError::Repeated => "send the Idempotency-Key header exactly once".into(),
            KeyError::Empty => "the Idempotency-Key header is empty".into(),
            KeyError::TooLong { len, max } => {
                format!("the Idempotency-Key is {len} bytes long; at most {max} are accepted")
            }
            KeyError::Malformed(why) => format!(
                "the Idempotency-Key must be a quoted string (\"abc\") or a bare token of visible \
                 ASCII: {why}"
            ),
        }
    }
}

/// Reads the key: `Ok(None)` when the header is absent.
pub(crate) fn parse_key(headers: &HeaderMap, max_len: usize) -> Result<Option<String>, KeyError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyError::Repeated);
    }
    let raw = value.as_bytes();
    let key = match raw.split_first() {
        None => return Err(KeyError::Empty),
        Some((b'"', rest)) => unquote(rest)?,
        Some(_) => bare(raw)?,
    };
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > max_len {
        return Err(KeyError::TooLong {
            len: key.len(),
            max: max_len,
        });
    }
    Ok(Some(key))
}

/// The inside of an sf-string after its opening quote: `\"` and `\\` are the only escapes, the
/// closing quote must be the last byte.
fn unquote(rest: &[u8]) -> Result<String, KeyError> {
    let mut out = String::with_capacity(rest.len());
    let mut bytes = rest.iter();
    loop {
        match bytes.next() {
            None => return Err(KeyError::Malformed("the closing quote is missing")),
            Some(b'"') => break,
            Some(b'\\') => match bytes.next() {
                Some(&c @ (b'"' | b'\\')) => out.push(char::from(c)),
                _ => return Err(KeyError::Malformed("only \\\" and \\\\ may be escaped")),
            },
            Some(&c) if (0x20..=0x7e).contains(&c) => out.push(char::from(c)),
            Some(_) => return Err(KeyError::Malformed("a byte outside printable ASCII")),
        }
    }
    if bytes.next().is_some() {
        return Err(KeyError::Malformed("text after the closing quote"));
    }
    Ok(out)
}

/// A bare value: visible ASCII without quotes, backslashes, commas or semicolons (which would make
/// it a list or a parameterised item).
fn bare(raw: &[u8]) -> Result<String, KeyError> {
    if let Some(&c) = raw
        .iter()
        .find(|c| !(0x21..=0x7e).contains(*c) || matches!(c, b'"' | b'\\' | b',' | b';'))
    {
        return Err(KeyError::Malformed(if c == b' ' || c == b'\t' {
            "whitespace inside a bare key"
        } else if c > 0x7e {
            "a byte outside visible ASCII"
        } else {
            "a quote, backslash, comma or semicolon in a bare key"
        }));
    }
    Ok(raw.iter().map(|&c| char::from(c)).collect())
}

/// The request's fingerprint: method, path, raw query, each configured header (name, number of
/// values, values) and the body, length-prefixed so that no two different requests collide by
/// concatenation.
pub(crate) fn fingerprint_request(parts: &Parts, headers: &[HeaderName], body: &[u8]) -> Vec<u8> {
    let mut owned: Vec<Vec<u8>> = Vec::with_capacity(headers.len() * 2);
    for name in headers {
        let values: Vec<&[u8]> = parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        let mut h = Vec::new();
        h.extend_from_slice(name.as_str().as_bytes());
        h.extend_from_slice(&(values.len() as u32).to_be_bytes());
        for v in values {
            h.extend_from_slice(&(v.len() as u32).to_be_bytes());
            h.extend_from_slice(v);
        }
        owned.push(h);
    }
    let mut all: Vec<&[u8]> = vec![
        parts.method.as_str().as_bytes(),
        parts.uri.path().as_bytes(),
        parts.uri.query().unwrap_or("").as_bytes(),
    ];
    all.extend(owned.iter().map(Vec::as_slice));
    all.push(body);
    crate::keys::fingerprint(&all)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn parse(v: &[u8]) -> Result<Option<String>, KeyError> {
        let mut h = HeaderMap::new();
        h.insert(IDEMPOTENCY_KEY, HeaderValue::from_bytes(v).unwrap());
        parse_key(&h, 16)
    }

    #[test]
    fn structured_and_bare_keys() {
        assert_eq!(parse(b"\"abc\"").unwrap().as_deref(), Some("abc"));
        assert_eq!(parse(b"abc-123_x").unwrap().as_deref(), Some("abc-123_x"));
        assert_eq!(parse(b"\"a\\\"b\"").unwrap().as_deref(), Some("a\"b"));
        assert_eq!(parse(b"\"a b\"").unwrap().as_deref(), Some("a b"));
        assert_eq!(parse(b"\"\""), Err(KeyError::Empty));
        assert!(matches!(parse(b"\"abc"), Err(KeyError::Malformed(_))));
        assert!(matches!(parse(b"\"abc\";x=1"), Err(KeyError::Malformed(_))));
        assert!(matches!(parse(b"\"a\\nb\""), Err(KeyError::Malformed(_))));
        assert!(matches!(parse(b"a,b"), Err(KeyError::Malformed(_))));
        assert!(matches!(parse(b"a b"), Err(KeyError::Malformed(_))));
        assert!(matches!(parse(&[b'a', 0xff]), Err(KeyError::Malformed(_))));
        assert_eq!(
            parse(b"0123456789abcdefX"),
            Err(KeyError::TooLong { len: 17, max: 16 })
        );
        assert_eq!(parse_key(&HeaderMap::new(), 16), Ok(None));
        let mut h = HeaderMap::new();
        h.append(IDEMPOTENCY_KEY, HeaderValue::from_static("a"));
        h.append(IDEMPOTENCY_KEY, HeaderValue::from_static("b"));
        assert_eq!(parse_key(&h, 16), Err(KeyError::Repeated));
    }

    #[test]
    fn fingerprint_covers_method_path_query_headers_and_body() {
        let mk = |m: &str, uri: &str, ct: &str| {
            http::Request::builder()
                .method(m)
                .uri(uri)
                .header("content-type", ct)
                .body(())
                .unwrap()
                .into_parts()
                .0
        };
        let hs = [http::header::CONTENT_TYPE];
        let base = fingerprint_request(&mk("POST", "/p?a=1", "json"), &hs, b"x");
        assert_eq!(
            base,
            fingerprint_request(&mk("POST", "/p?a=1", "json"), &hs, b"x")
        );
        for other in [
            fingerprint_request(&mk("PATCH", "/p?a=1", "json"), &hs, b"x"),
            fingerprint_request(&mk("POST", "/q?a=1", "json"), &hs, b"x"),
            fingerprint_request(&mk("POST", "/p?a=2", "json"), &hs, b"x"),
            fingerprint_request(&mk("POST", "/p?a=1", "text"), &hs, b"x"),
            fingerprint_request(&mk("POST", "/p?a=1", "json"), &hs, b"y"),
        ] {
            assert_ne!(base, other);
        }
        // A header not in the list does not change the fingerprint.
        assert_eq!(
            fingerprint_request(&mk("POST", "/p?a=1", "json"), &[], b"x"),
            fingerprint_request(&mk("POST", "/p?a=1", "text"), &[], b"x")
        );
    }
}
