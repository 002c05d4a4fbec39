//! The routes file: the proxy's idempotency inventory, one endpoint per line with its
//! requirement. Invariant: a file is taken whole or not at all; every line is a comment, blank,
//! or a route each of whose fields was understood, and anything else stops the proxy at start
//! naming the file and the line. The first route that matches a request's method and path
//! decides it; a request no route matches passes through untouched.
//!
//! ```text
//! # METHODS   PATH            LEVEL  OPTIONS
//! POST        /payments       hard   principal=header:x-api-key lease=10s max-body=64KiB
//! POST,PATCH  /orders/*       soft   principal=jwt-sub:authorization
//! *           /internal/**    none
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use http::{HeaderName, Method};

/// The longest lease and retention a route may ask for (the store's own ceilings).
const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);
const MAX_RETENTION: Duration = Duration::from_secs(400 * 24 * 3600);

/// What a route requires of its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// An `Idempotency-Key` is required: 400 without one.
    Hard,
    /// Idempotent when a key is sent; passed through without one.
    Soft,
    /// Passed through untouched, key or not.
    None,
}

/// Whom a key belongs to: keys are scoped by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principal {
    /// Every caller shares one scope.
    Anonymous,
    /// The value of this request header (an API key, a user id set by a gateway).
    Header(HeaderName),
    /// The `sub` claim of the JWT in this header (`Bearer` prefix optional), read as the upstream
    /// receives it: the proxy does not verify the token, the upstream does.
    JwtSub(HeaderName),
}

/// What a key records when the upstream's outcome is unknown: the request reached it but no
/// answer came back (connection lost, timeout, a proxy that died holding the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnUnknown {
    /// Store the 502/504 as the key's outcome: the request is never sent again (at most once).
    Fail,
    /// Release the key: a retry sends the request again (at least once).
    Release,
}

/// One segment of a path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    /// `*` or `{name}`: exactly one segment.
    One,
    /// `**`, last: any rest, also none.
    Rest,
}

/// One line of the file.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// The line's number in the file (1-based); 0 for the built-in route.
    pub(crate) line: usize,
    /// `None`: every method.
    pub(crate) methods: Option<Vec<Method>>,
    pub(crate) path: String,
    segments: Vec<Segment>,
    pub(crate) level: Level,
    pub(crate) principal: Principal,
    pub(crate) lease: Duration,
    pub(crate) retention: Duration,
    pub(crate) max_body: usize,
    pub(crate) fingerprint: Vec<HeaderName>,
    pub(crate) wait: Duration,
    pub(crate) on_unknown: OnUnknown,
}

/// The routes, in the order they are tried.
#[derive(Debug, Clone)]
pub(crate) struct Routes {
    pub(crate) routes: Vec<Route>,
    /// Where they came from (the file, or the built-in default).
    pub(crate) source: String,
}

impl Routes {
    /// Without a routes file: `POST,PATCH /** soft`, every other request passed through.
    pub(crate) fn default_routes() -> Routes {
        let route = parse_line("POST,PATCH /** soft", 0)
            .expect("the built-in route parses")
            .expect("the built-in route is a route");
        Routes {
            routes: vec![route],
            source: "built-in (no --routes)".to_owned(),
        }
    }

    /// Reads and checks the routes file at `path`.
    pub(crate) fn load(path: &std::path::Path) -> Result<Routes, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("routes file {}: cannot be read: {e}", path.display()))?;
        let mut routes =
            Routes::parse(&text).map_err(|e| format!("routes file {}, {e}", path.display()))?;
        routes.source = path.display().to_string();
        Ok(routes)
    }

    /// Parses a whole file: `Err("line N: ...")` at its first bad line.
    pub(crate) fn parse(text: &str) -> Result<Routes, String> {
        let mut routes = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if let Some(route) =
                parse_line(line, i + 1).map_err(|e| format!("line {}: {e}", i + 1))?
            {
                routes.push(route);
            }
        }
        if routes.is_empty() {
            return Err(
                "line 1: the file lists no route (an empty inventory passes every request \
                        through; remove --routes for the built-in `POST,PATCH /** soft`)"
                    .to_owned(),
            );
        }
        Ok(Routes {
            routes,
            source: String::new(),
        })
    }

    /// The first route for this method and path, if any.
    pub(crate) fn find(&self, method: &Method, path: &str) -> Option<(usize, &Route)> {
        self.routes
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches_method(method) && r.matches_path(path))
    }

    /// The inventory as a table: one row per route, then the row of unmatched requests.
    pub(crate) fn table(&self) -> String {
        let header = [
            "LINE",
            "ROUTE",
            "METHODS",
            "LEVEL",
            "KEY",
            "SCOPE",
            "LEASE",
            "RETENTION",
            "MAX BODY",
            "ON UNKNOWN",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
        for r in &self.routes {
            let keyed = r.level != Level::None;
            let dash = || "-".to_owned();
            rows.push(vec![
                if r.line == 0 {
                    dash()
                } else {
                    r.line.to_string()
                },
                r.path.clone(),
                match &r.methods {
                    None if keyed => "* (keyed: POST, PUT, PATCH, DELETE)".to_owned(),
                    None => "*".to_owned(),
                    Some(m) => m.iter().map(Method::as_str).collect::<Vec<_>>().join(","),
                },
                match r.level {
                    Level::Hard => "hard",
                    Level::Soft => "soft",
                    Level::None => "none",
                }
                .to_owned(),
                match r.level {
                    Level::Hard => "Idempotency-Key, required".to_owned(),
                    Level::Soft => "Idempotency-Key, optional".to_owned(),
                    Level::None => dash(),
                },
                if keyed {
                    match &r.principal {
                        Principal::Anonymous => "anonymous (one scope)".to_owned(),
                        Principal::Header(h) => format!("header {h}"),
                        Principal::JwtSub(h) => format!("JWT sub in {h}"),
                    }
                } else {
                    dash()
                },
                if keyed {
                    human_duration(r.lease)
                } else {
                    dash()
                },
                if keyed {
                    human_duration(r.retention)
                } else {
                    dash()
                },
                if keyed {
                    human_size(r.max_body)
                } else {
                    dash()
                },
                match (keyed, r.on_unknown) {
                    (false, _) => dash(),
                    (true, OnUnknown::Fail) => "fail (stored)".to_owned(),
                    (true, OnUnknown::Release) => "release".to_owned(),
                },
            ]);
        }
        let d = "-".to_owned();
        rows.push(vec![
            d.clone(),
            "(unmatched)".to_owned(),
            "*".to_owned(),
            "none".to_owned(),
            d.clone(),
            d.clone(),
            d.clone(),
            d.clone(),
            d.clone(),
            d,
        ]);
        let widths: Vec<usize> = (0..header.len())
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for row in &rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let _ = write!(line, "{cell:<w$}  ", w = widths[c]);
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

impl Route {
    fn matches_method(&self, m: &Method) -> bool {
        match &self.methods {
            None => true,
            Some(list) => list.contains(m),
        }
    }

    fn matches_path(&self, path: &str) -> bool {
        let rest = path.strip_prefix('/').unwrap_or(path);
        let mut parts = rest.split('/');
        for seg in &self.segments {
            match seg {
                Segment::Rest => return true,
                Segment::One => match parts.next() {
                    Some(p) if !p.is_empty() => {}
                    _ => return false,
                },
                Segment::Literal(l) => match parts.next() {
                    Some(p) if p == l => {}
                    _ => return false,
                },
            }
        }
        parts.next().is_none()
    }

    /// The methods the idempotency layer applies to on this route: those listed, or for `*`
    /// POST, PUT, PATCH and DELETE (other methods pass through).
    pub(crate) fn keyed_methods(&self) -> Vec<Method> {
        match &self.methods {
            Some(m) => m.clone(),
            None => vec![Method::POST, Method::PUT, Method::PATCH, Method::DELETE],
        }
    }
}

/// One line: `Ok(None)` for a comment or a blank line.
fn parse_line(line: &str, number: usize) -> Result<Option<Route>, String> {
    let text = match line.find('#') {
        Some(i) => &line[..i],
        None => line,
    };
    let mut fields = text.split_whitespace();
    let Some(methods) = fields.next() else {
        return Ok(None);
    };
    let (Some(path), Some(level)) = (fields.next(), fields.next()) else {
        return Err(
            "expected `METHODS PATH LEVEL [OPTION=VALUE ...]`, for example \
                    `POST /payments hard`"
                .to_owned(),
        );
    };
    let methods = parse_methods(methods)?;
    let segments = parse_path(path)?;
    let level = match level {
        "hard" => Level::Hard,
        "soft" => Level::Soft,
        "none" => Level::None,
        other => {
            return Err(format!(
                "level `{other}` is not one of hard (key required), soft (key optional), none \
                 (passed through)"
            ))
        }
    };
    let mut route = Route {
        line: number,
        methods,
        path: path.to_owned(),
        segments,
        level,
        principal: Principal::Anonymous,
        lease: Duration::from_secs(30),
        retention: Duration::from_secs(24 * 3600),
        max_body: 1 << 20,
        fingerprint: vec![http::header::CONTENT_TYPE],
        wait: Duration::ZERO,
        on_unknown: OnUnknown::Fail,
    };
    let mut seen: Vec<&str> = Vec::new();
    for option in fields {
        let Some((name, value)) = option.split_once('=') else {
            return Err(format!("`{option}` is not an option: write NAME=VALUE"));
        };
        if level == Level::None {
            return Err(format!(
                "option `{name}` on a `none` route: such a route passes requests through \
                 untouched and takes no options"
            ));
        }
        if seen.contains(&name) {
            return Err(format!("option `{name}` is given twice"));
        }
        seen.push(name);
        let bad = |why: &str| format!("{name}={value}: {why}");
        match name {
            "principal" => {
                route.principal = match value.split_once(':') {
                    _ if value == "anonymous" => Principal::Anonymous,
                    Some(("header", h)) => Principal::Header(header_name(h).map_err(|e| bad(&e))?),
                    Some(("jwt-sub", h)) => Principal::JwtSub(header_name(h).map_err(|e| bad(&e))?),
                    _ => {
                        return Err(bad(
                            "expected anonymous, header:NAME or jwt-sub:NAME (the `sub` of the \
                             JWT in header NAME)",
                        ))
                    }
                }
            }
            "lease" => {
                let d = duration(value).map_err(|e| bad(&e))?;
                if d < Duration::from_millis(100) || d > MAX_LEASE {
                    return Err(bad("a lease is from 100ms to 24h"));
                }
                route.lease = d;
            }
            "retention" => {
                let d = duration(value).map_err(|e| bad(&e))?;
                if d < Duration::from_secs(1) || d > MAX_RETENTION {
                    return Err(bad("a retention is from 1s to 400d"));
                }
                route.retention = d;
            }
            "max-body" => route.max_body = size(value).map_err(|e| bad(&e))?,
            "fingerprint" => {
                route.fingerprint = if value == "none" {
                    Vec::new()
                } else {
                    value
                        .split(',')
                        .map(header_name)
                        .collect::<Result<_, _>>()
                        .map_err(|e| bad(&e))?
                }
            }
            "wait" => {
                let d = duration(value).map_err(|e| bad(&e))?;
                if d > Duration::from_secs(300) {
                    return Err(bad("a duplicate waits at most 5m"));
                }
                route.wait = d;
            }
            "on-unknown" => {
                route.on_unknown = match value {
                    "fail" => OnUnknown::Fail,
                    "release" => OnUnknown::Release,
                    _ => return Err(bad("expected fail (stored, never resent) or release")),
                }
            }
            _ => {
                return Err(format!(
                    "unknown option `{name}`; the options are principal, lease, retention, \
                     max-body, fingerprint, wait, on-unknown"
                ))
            }
        }
    }
    if route.level != Level::None && route.retention < route.lease {
        return Err(format!(
            "retention {} is shorter than the lease {}: a key's record must outlive its lease",
            human_duration(route.retention),
            human_duration(route.lease)
        ));
    }
    Ok(Some(route))
}

fn parse_methods(text: &str) -> Result<Option<Vec<Method>>, String> {
    if text == "*" {
        return Ok(None);
    }
    let mut out = Vec::new();
    for m in text.split(',') {
        if m.is_empty() || m.bytes().any(|b| !b.is_ascii_uppercase()) {
            return Err(format!(
                "method `{m}`: methods are upper-case names (POST, PATCH) separated by commas, \
                 or `*`"
            ));
        }
        let method = Method::from_bytes(m.as_bytes()).map_err(|e| format!("method `{m}`: {e}"))?;
        if !out.contains(&method) {
            out.push(method);
        }
    }
    Ok(Some(out))
}

fn parse_path(path: &str) -> Result<Vec<Segment>, String> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("path `{path}` must start with `/`"));
    };
    if rest.is_empty() {
        return Ok(vec![Segment::Literal(String::new())]);
    }
    let parts: Vec<&str> = rest.split('/').collect();
    let mut out = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        let seg = match *p {
            "**" if i + 1 == parts.len() => Segment::Rest,
            "**" => return Err(format!("path `{path}`: `**` may only be the last segment")),
            "*" => Segment::One,
            p if p.starts_with('{') && p.ends_with('}') && p.len() > 2 => Segment::One,
            p if p.contains(['*', '{', '}', '?']) => {
                return Err(format!(
                    "path `{path}`: `{p}`: a wildcard stands for a whole segment (`*`, `{{id}}`, \
                     or `**` last)"
                ))
            }
            p => Segment::Literal(p.to_owned()),
        };
        out.push(seg);
    }
    Ok(out)
}

fn header_name(s: &str) -> Result<HeaderName, String> {
    HeaderName::from_bytes(s.as_bytes()).map_err(|_| format!("`{s}` is not a header name"))
}

/// `500ms`, `2s`, `10m`, `1h`, `30d`.
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 500ms, 2s, 10m, 1h or 30d"))?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("`{s}`: the unit is one of ms, s, m, h, d")),
    };
    n.checked_mul(ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("`{s}` is too long"))
}

/// `1024`, `512B`, `64KiB`, `1MiB`, `1GiB`.
fn size(s: &str) -> Result<usize, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: usize = n
        .parse()
        .map_err(|_| format!("`{s}` is not a size like 4096, 64KiB or 1MiB"))?;
    let mul = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(format!("`{s}`: the unit is one of B, KiB, MiB, GiB")),
    };
    n.checked_mul(mul)
        .ok_or_else(|| format!("`{s}` is too large"))
}

fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, n) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= n && ms.is_multiple_of(n) {
            return format!("{}{unit}", ms / n);
        }
    }
    format!("{ms}ms")
}

fn human_size(n: usize) -> String {
    for (unit, m) in [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= m && n.is_multiple_of(m) {
            return format!("{}{unit}", n / m);
        }
    }
    format!("{n}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(line: &str) -> Route {
        parse_line(line, 1).unwrap().unwrap()
    }

    #[test]
    fn patterns_match_whole_segments() {
        let r = route("POST /orders/*/items hard");
        assert!(r.matches_path("/orders/7/items"));
        assert!(!r.matches_path("/orders//items"));
        assert!(!r.matches_path("/orders/7/items/8"));
        let r = route("POST /api/** soft");
        assert!(r.matches_path("/api"));
        assert!(r.matches_path("/api/a/b"));
        assert!(!r.matches_path("/apix"));
        let r = route("* / none");
        assert!(r.matches_path("/"));
        assert!(!r.matches_path("/a"));
    }

    #[test]
    fn errors_name_the_line_and_the_field() {
        let e = Routes::parse("# ok\nPOST /p hard\nPOST /q maybe\n").unwrap_err();
        assert!(e.starts_with("line 3: level `maybe`"), "{e}");
        let e = Routes::parse("post /p hard").unwrap_err();
        assert!(e.contains("upper-case"), "{e}");
        let e = Routes::parse("POST /p hard lease=0s").unwrap_err();
        assert!(e.contains("lease=0s"), "{e}");
        let e = Routes::parse("POST /p none lease=1s").unwrap_err();
        assert!(e.contains("takes no options"), "{e}");
        let e = Routes::parse("POST /p/a** hard").unwrap_err();
        assert!(e.contains("whole segment"), "{e}");
        let e = Routes::parse("POST /p hard colour=blue").unwrap_err();
        assert!(e.contains("unknown option `colour`"), "{e}");
        let e = Routes::parse("POST /p hard lease=1s lease=2s").unwrap_err();
        assert!(e.contains("twice"), "{e}");
        assert!(Routes::parse("# nothing\n\n").is_err());
    }

    /// Regression: such a route was accepted, then every keyed request on it was refused with a
    /// 400 that blamed the client's key (the store refuses a lease longer than the retention).
    #[test]
    fn a_retention_shorter_than_the_lease_is_refused_at_start() {
        let e = Routes::parse("POST /p hard\nPOST /q soft retention=1s").unwrap_err();
        assert!(
            e.starts_with("line 2: retention 1s is shorter than the lease 30s"),
            "{e}"
        );
        assert!(Routes::parse("POST /q soft lease=1s retention=1s").is_ok());
        assert!(Routes::parse("POST /q none").is_ok());
    }

    #[test]
    fn first_matching_route_wins() {
        let routes = Routes::parse("POST /p/special none\nPOST /p/* hard\n* /** soft\n").unwrap();
        assert_eq!(routes.find(&Method::POST, "/p/special").unwrap().1.line, 1);
        assert_eq!(routes.find(&Method::POST, "/p/x").unwrap().1.line, 2);
        assert_eq!(routes.find(&Method::GET, "/p/x").unwrap().1.line, 3);
        assert!(route("POST /a hard").keyed_methods() == vec![Method::POST]);
        assert!(!route("* /a hard").keyed_methods().contains(&Method::GET));
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(size("64KiB"), Ok(65536));
        assert_eq!(size("512B"), Ok(512));
        assert!(size("1MB").is_err());
        assert_eq!(duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(duration("2 s").is_err());
        assert_eq!(human_duration(Duration::from_secs(86400)), "1d");
        assert_eq!(human_size(3 << 20), "3MiB");
    }
}
