//! The routes file: the proxy's idempotency inventory, one endpoint per line with its
//! requirement. Invariant: a file is taken whole or not at all; every line is a comment, blank,
//! or a route each of whose fields was understood, and anything else stops the proxy at start
//! naming the file and the line. The first route that matches a request's method and path
//! decides it; a request no route matches passes through untouched.
//!
//! ```text
//! # METHODS   PATH            LEVEL  OPTIONS
//! POST        /payments       hard   principal=header:x-api-key lease=10s max-body=64KiB
//! POST,PATCH  /orders/*       soft   principal=jwt-sub:authorization jwt-key=jwks:/etc/idemdb/jwks.json
//! *           /internal/**    none
//! POST        /hooks/stripe   webhook scheme=stripe secret=file:/etc/idemdb/stripe.secret
//! ```
//!
//! A request's path is matched in its normal form ([`normalise`]), so that every spelling the
//! upstream would route to one endpoint (`/payments/`, `//payments`, `/%70ayments`,
//! `/x/../payments`) meets that endpoint's route.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use http::{HeaderName, Method};
use idemdb::http::{WebhookScheme, WebhookSecrets};

use super::jwt::{JwtRule, KeyFile};

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
    /// Signed webhook deliveries: the signature verified first (401 otherwise), the event id
    /// the key, scoped by the route's endpoint ([`WebhookRoute`]).
    Webhook,
}

/// A `webhook` route's scheme, secrets, endpoint name and timestamp tolerance.
#[derive(Debug, Clone)]
pub(crate) struct WebhookRoute {
    pub(crate) scheme: WebhookScheme,
    /// Read from the file or the variable when the routes are loaded; never printed.
    pub(crate) secrets: WebhookSecrets,
    /// Where they came from (`file:PATH` or `env:VAR`), for the inventory.
    pub(crate) secret_source: String,
    /// The endpoint's events are its own: `endpoint=NAME`, by default the route's path.
    pub(crate) endpoint: String,
    pub(crate) tolerance: Duration,
}

impl WebhookRoute {
    /// `secret=file:PATH`: the file, read again when it changes (`server.rs`, `SecretsFile`).
    pub(crate) fn secret_file(&self) -> Option<&Path> {
        self.secret_source.strip_prefix("file:").map(Path::new)
    }
}

/// Whom a key belongs to: keys are scoped by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principal {
    /// Every caller shares one scope.
    Anonymous,
    /// The value of this request header (an API key, a user id set by a gateway).
    Header(HeaderName),
    /// The `sub` claim of the JWT in this header (`Bearer` prefix optional), once the proxy has
    /// verified the token under the route's `jwt-key` (`jwt.rs`).
    JwtSub(HeaderName, JwtRule),
    /// The `sub` claim of the JWT in this header, NOT verified: for a proxy behind a gateway
    /// that verified the token and removes tokens it refuses. Anyone who can reach the proxy
    /// directly can claim any subject with a forged token.
    JwtSubUnverified(HeaderName),
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
    /// `scope-headers=`: request headers whose values scope the key with the principal (and are
    /// part of the fingerprint).
    pub(crate) scope_headers: Vec<HeaderName>,
    pub(crate) wait: Duration,
    pub(crate) on_unknown: OnUnknown,
    /// `Some` exactly for a `webhook` route.
    pub(crate) webhook: Option<WebhookRoute>,
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

    /// The first route for this method and path (in its normal form, [`normalise`]), if any.
    pub(crate) fn find(&self, method: &Method, path: &str) -> Option<(usize, &Route)> {
        let path = normalise(path);
        self.routes
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches_method(method) && r.matches_path(&path))
    }

    /// What an operator should know before trusting these routes, one line each: a keyed route
    /// whose keys every caller shares, and a keyed GET or HEAD (a replay hides the current
    /// state).
    pub(crate) fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for r in self.routes.iter().filter(|r| r.keyed_by_header()) {
            let at = match r.line {
                0 => format!("the built-in route `{}`", r.path),
                n => format!("line {n} (`{}`)", r.path),
            };
            if r.principal == Principal::Anonymous && r.scope_headers.is_empty() {
                out.push(format!(
                    "{at}: every caller shares one key scope (principal=anonymous): one caller \
                     can replay, block or probe another's key. Set principal=header:NAME or \
                     principal=jwt-sub:NAME, or scope-headers=authorization"
                ));
            }
            if let Principal::JwtSubUnverified(h) = &r.principal {
                out.push(format!(
                    "{at}: principal=jwt-sub-unverified:{h} trusts tokens the proxy does not \
                     verify: only safe behind a gateway that verified them, with the proxy \
                     unreachable otherwise"
                ));
            }
            if r.keys(&Method::GET) || r.keys(&Method::HEAD) {
                out.push(format!(
                    "{at}: GET is keyed: a replayed GET answers the state of its first request, \
                     not the current one"
                ));
            }
        }
        out
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
                    Level::Webhook => "webhook",
                }
                .to_owned(),
                match (&r.level, &r.webhook) {
                    (Level::Hard, _) => "Idempotency-Key, required".to_owned(),
                    (Level::Soft, _) => "Idempotency-Key, optional".to_owned(),
                    (Level::Webhook, Some(w)) => format!(
                        "event id, {} signature required (secrets {}, tolerance {})",
                        w.scheme.name(),
                        w.secret_source,
                        human_duration(w.tolerance)
                    ),
                    _ => dash(),
                },
                if keyed { scope_of(r) } else { dash() },
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

/// The inventory's SCOPE cell of a keyed route.
fn scope_of(r: &Route) -> String {
    if let Some(w) = &r.webhook {
        return format!("endpoint {} ({})", w.endpoint, w.scheme.name());
    }
    let mut scope = match &r.principal {
        Principal::Anonymous => "anonymous (one scope)".to_owned(),
        Principal::Header(h) => format!("header {h}"),
        Principal::JwtSub(h, rule) => {
            format!("JWT sub in {h} (verified, {})", rule.keys.describe())
        }
        Principal::JwtSubUnverified(h) => format!("JWT sub in {h} (UNVERIFIED)"),
    };
    if !r.scope_headers.is_empty() {
        let names: Vec<&str> = r.scope_headers.iter().map(HeaderName::as_str).collect();
        scope.push_str(&format!(" + headers {}", names.join(",")));
    }
    scope
}

/// The form in which a request's path is matched against the routes: percent-escapes of
/// unreserved characters (`A-Z a-z 0-9 - . _ ~`, RFC 3986 2.3) decoded, `.` and `..` segments
/// resolved (RFC 3986 5.2.4), runs of `/` made one, and a trailing `/` dropped (`/` itself
/// stays). Every other escape stays as sent (`%2F` is not a separator). The request is
/// forwarded as it came; only matching uses this form.
pub(crate) fn normalise(path: &str) -> Cow<'_, str> {
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~');
    let bytes = path.as_bytes();
    let simple = !path.contains('%')
        && !path.contains("//")
        && (path == "/" || !path.ends_with('/'))
        && path.split('/').all(|s| s != "." && s != "..");
    if simple {
        return Cow::Borrowed(path);
    }
    let mut decoded = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(b) = hex.filter(|&b| unreserved(b)) {
                decoded.push(char::from(b));
                i += 3;
                continue;
            }
        }
        // `path` is a str: copy the whole character that starts here.
        let len = path[i..].chars().next().map_or(1, char::len_utf8);
        decoded.push_str(&path[i..i + len]);
        i += len;
    }
    let mut segments: Vec<&str> = Vec::new();
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    Cow::Owned(format!("/{}", segments.join("/")))
}

impl Route {
    /// Whether the route's keys come from `Idempotency-Key` (a `hard` or `soft` route).
    pub(crate) fn keyed_by_header(&self) -> bool {
        matches!(self.level, Level::Hard | Level::Soft)
    }

    fn matches_method(&self, m: &Method) -> bool {
        match &self.methods {
            None => true,
            Some(list) => list.contains(m),
        }
    }

    /// Whether `path`, in its normal form, matches the pattern.
    fn matches_path(&self, path: &str) -> bool {
        let mut parts = path.split('/').filter(|s| !s.is_empty());
        for seg in &self.segments {
            match seg {
                Segment::Rest => return true,
                Segment::One => {
                    if parts.next().is_none() {
                        return false;
                    }
                }
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
            None => ANY_KEYED.to_vec(),
        }
    }

    /// Whether the idempotency layer applies to `m` on this route ([`Route::keyed_methods`],
    /// without building the list: asked once per request).
    pub(crate) fn keys(&self, m: &Method) -> bool {
        match &self.methods {
            Some(list) => list.contains(m),
            None => ANY_KEYED.contains(m),
        }
    }
}

/// The methods a keyed `*` route keys.
const ANY_KEYED: [Method; 4] = [Method::POST, Method::PUT, Method::PATCH, Method::DELETE];

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
    let mut route = route_with_defaults(number, methods, path, level)?;
    let mut jwt = JwtOptions::default();
    let mut hook = WebhookOptions::default();
    let mut seen: Vec<&str> = Vec::new();
    for option in fields {
        let webhook_option = WebhookOptions::NAMES.contains(&option_name(option));
        if (route.level == Level::Webhook || webhook_option)
            && hook.apply(&route, &mut seen, option)?
        {
            continue;
        }
        apply_option(&mut route, &mut jwt, &mut seen, option)?;
    }
    jwt.complete_principal(&mut route)?;
    hook.complete(&mut route)?;
    finish_route(route).map(Some)
}

/// Step 1: the route a line's `METHODS PATH LEVEL` make, every option at its default.
fn route_with_defaults(
    number: usize,
    methods: &str,
    path: &str,
    level: &str,
) -> Result<Route, String> {
    let methods = parse_methods(methods)?;
    let segments = parse_path(path)?;
    let level = match level {
        "hard" => Level::Hard,
        "soft" => Level::Soft,
        "none" => Level::None,
        "webhook" => Level::Webhook,
        other => {
            return Err(format!(
                "level `{other}` is not one of hard (key required), soft (key optional), none \
                 (passed through), webhook (signed deliveries, the event id as key)"
            ))
        }
    };
    Ok(Route {
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
        scope_headers: Vec::new(),
        wait: Duration::ZERO,
        on_unknown: OnUnknown::Fail,
        webhook: None,
    })
}

/// The name of a `NAME=VALUE` option (the whole text when it has no `=`).
fn option_name(option: &str) -> &str {
    option.split_once('=').map_or(option, |(n, _)| n)
}

/// A `webhook` line's own options, made into its [`WebhookRoute`] once the line is read.
#[derive(Default)]
struct WebhookOptions {
    scheme: Option<WebhookScheme>,
    secrets: Option<(WebhookSecrets, String)>,
    endpoint: Option<String>,
    tolerance: Option<Duration>,
}

impl WebhookOptions {
    const NAMES: [&'static str; 4] = ["scheme", "secret", "endpoint", "tolerance"];

    /// Step 2 for a webhook option: `Ok(true)` when `option` is one (set here), `Ok(false)` when
    /// it is for [`apply_option`]; an option a webhook route does not take is refused.
    fn apply<'a>(
        &mut self,
        route: &Route,
        seen: &mut Vec<&'a str>,
        option: &'a str,
    ) -> Result<bool, String> {
        let name = option_name(option);
        if route.level != Level::Webhook {
            return Err(format!(
                "option `{name}` is for `webhook` routes (signed deliveries)"
            ));
        }
        if matches!(name, "principal" | "scope-headers" | "fingerprint") || name.starts_with("jwt-")
        {
            return Err(format!(
                "option `{name}` on a `webhook` route: its events are scoped by its endpoint \
                 and proven by their signature, not by a caller or a header"
            ));
        }
        if !Self::NAMES.contains(&name) {
            return Ok(false);
        }
        let Some((_, value)) = option.split_once('=') else {
            return Err(format!("`{option}` is not an option: write NAME=VALUE"));
        };
        if seen.contains(&name) {
            return Err(format!("option `{name}` is given twice"));
        }
        seen.push(name);
        let bad = |why: &str| format!("{name}={value}: {why}");
        match name {
            "scheme" => {
                self.scheme = Some(match value {
                    "standard" => WebhookScheme::StandardWebhooks,
                    "stripe" => WebhookScheme::Stripe,
                    "github" => WebhookScheme::GitHub,
                    _ => {
                        return Err(bad(
                            "expected standard (Standard Webhooks), stripe or github",
                        ))
                    }
                })
            }
            "secret" => {
                let secrets = match value.split_once(':') {
                    Some(("file", path)) if !path.is_empty() => WebhookSecrets::from_file(path),
                    Some(("env", var)) if !var.is_empty() => WebhookSecrets::from_env(var),
                    _ => {
                        return Err(bad(
                            "expected file:PATH or env:VAR (one secret per line; never the \
                             secret itself on the line)",
                        ))
                    }
                }
                .map_err(|e| bad(&e.to_string()))?;
                self.secrets = Some((secrets, value.to_owned()));
            }
            "endpoint" => {
                if value.is_empty() || value.len() > 200 {
                    return Err(bad("an endpoint name is 1 to 200 bytes"));
                }
                self.endpoint = Some(value.to_owned());
            }
            _ => {
                let d = duration(value).map_err(|e| bad(&e))?;
                if d < Duration::from_secs(1) || d > Duration::from_secs(3600) {
                    return Err(bad("a tolerance is from 1s to 1h"));
                }
                self.tolerance = Some(d);
            }
        }
        Ok(true)
    }

    /// Step 3 for a `webhook` route: its [`WebhookRoute`], or which option it lacks.
    fn complete(self, route: &mut Route) -> Result<(), String> {
        if route.level != Level::Webhook {
            return Ok(());
        }
        let scheme = self
            .scheme
            .ok_or("a webhook route needs scheme=standard|stripe|github")?;
        let (secrets, secret_source) = self
            .secrets
            .ok_or("a webhook route needs secret=file:PATH or secret=env:VAR")?;
        route.webhook = Some(WebhookRoute {
            scheme,
            secrets,
            secret_source,
            endpoint: self.endpoint.unwrap_or_else(|| route.path.clone()),
            tolerance: self.tolerance.unwrap_or(Duration::from_secs(300)),
        });
        Ok(())
    }
}

/// A line's `jwt-*` options, applied to the principal's rule once every option is read.
#[derive(Default)]
struct JwtOptions {
    key: Option<KeyFile>,
    iss: Vec<String>,
    aud: Vec<String>,
    leeway: Option<Duration>,
    /// The header of `principal=jwt-sub:NAME`.
    header: Option<HeaderName>,
}

/// Step 2: one `NAME=VALUE` option, set on `route` (or, for the `jwt-*` options, kept in `jwt`);
/// `seen` holds the names of the line's options before it, each allowed once.
fn apply_option<'a>(
    route: &mut Route,
    jwt: &mut JwtOptions,
    seen: &mut Vec<&'a str>,
    option: &'a str,
) -> Result<(), String> {
    let Some((name, value)) = option.split_once('=') else {
        return Err(format!("`{option}` is not an option: write NAME=VALUE"));
    };
    if route.level == Level::None {
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
        "principal" => route.principal = principal_option(value, jwt).map_err(|e| bad(&e))?,
        "jwt-key" => jwt.key = Some(KeyFile::parse(value).map_err(|e| bad(&e))?),
        "jwt-iss" | "jwt-aud" => {
            let list: Vec<String> = value.split(',').map(str::to_owned).collect();
            if list.iter().any(String::is_empty) {
                return Err(bad("expected one value or several separated by commas"));
            }
            if name == "jwt-iss" {
                jwt.iss = list;
            } else {
                jwt.aud = list;
            }
        }
        "jwt-leeway" => {
            let d = duration(value).map_err(|e| bad(&e))?;
            if d > Duration::from_secs(300) {
                return Err(bad("a leeway is at most 5m"));
            }
            jwt.leeway = Some(d);
        }
        "scope-headers" => {
            route.scope_headers = value
                .split(',')
                .map(header_name)
                .collect::<Result<_, _>>()
                .map_err(|e| bad(&e))?
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
                "unknown option `{name}`; the options are principal, jwt-key, jwt-iss, \
                 jwt-aud, jwt-leeway, scope-headers, lease, retention, max-body, \
                 fingerprint, wait, on-unknown; and on a webhook route scheme, secret, \
                 endpoint, tolerance"
            ))
        }
    }
    Ok(())
}

/// Step 2 for `principal=VALUE`: the principal it names (an error leaves the option out: the
/// caller adds it). `jwt-sub:NAME` keeps NAME in `jwt` and stays anonymous until
/// [`JwtOptions::complete_principal`].
fn principal_option(value: &str, jwt: &mut JwtOptions) -> Result<Principal, String> {
    Ok(match value.split_once(':') {
        _ if value == "anonymous" => Principal::Anonymous,
        Some(("header", h)) => Principal::Header(header_name(h)?),
        Some(("jwt-sub", h)) => {
            // Its rule is completed from the `jwt-*` options once the line is read.
            jwt.header = Some(header_name(h)?);
            Principal::Anonymous
        }
        Some(("jwt-sub-unverified", h)) => Principal::JwtSubUnverified(header_name(h)?),
        _ => {
            return Err(
                "expected anonymous, header:NAME, jwt-sub:NAME (the `sub` of the \
                        JWT in header NAME, verified with jwt-key=) or \
                        jwt-sub-unverified:NAME"
                    .to_owned(),
            )
        }
    })
}

impl JwtOptions {
    /// Step 3: `principal=jwt-sub:NAME` with its verifying rule from the `jwt-*` options, or
    /// why those options do not go together.
    fn complete_principal(self, route: &mut Route) -> Result<(), String> {
        match (self.header, self.key) {
            (Some(h), Some(keys)) => {
                let mut rule = JwtRule::new(keys);
                rule.issuers = self.iss;
                rule.audiences = self.aud;
                if let Some(l) = self.leeway {
                    rule.leeway = l;
                }
                route.principal = Principal::JwtSub(h, rule);
            }
            (Some(h), None) => {
                return Err(format!(
                    "principal=jwt-sub:{h} needs jwt-key=secret:PATH, pem:PATH or jwks:PATH: the \
                     proxy answers replays itself, so a token it has not verified would let \
                     anyone use another caller's keys (behind a gateway that verifies tokens, \
                     write principal=jwt-sub-unverified:{h})"
                ))
            }
            (None, _) if !self.iss.is_empty() || !self.aud.is_empty() || self.leeway.is_some() => {
                return Err("jwt-iss, jwt-aud and jwt-leeway go with principal=jwt-sub:NAME".into())
            }
            (None, Some(_)) => {
                return Err("jwt-key goes with principal=jwt-sub:NAME".into());
            }
            (None, None) => {}
        }
        Ok(())
    }
}

/// Step 4: the route with its scope headers in its fingerprint, once its lease is checked
/// against its retention.
fn finish_route(mut route: Route) -> Result<Route, String> {
    // Scope headers are part of what a key's requests must share.
    for h in &route.scope_headers {
        if !route.fingerprint.contains(h) {
            route.fingerprint.push(h.clone());
        }
    }
    if route.level != Level::None && route.retention < route.lease {
        return Err(format!(
            "retention {} is shorter than the lease {}: a key's record must outlive its lease",
            human_duration(route.retention),
            human_duration(route.lease)
        ));
    }
    Ok(route)
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
    // A pattern is written in the normal form requests are matched in: no empty segment.
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
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
    fn webhook_routes_take_their_own_options_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s");
        std::fs::write(&file, "one\n\n  two  \n").unwrap();
        let f = file.display();
        let r = route(&format!(
            "POST /hooks webhook scheme=github secret=file:{f} lease=5s"
        ));
        let w = r.webhook.as_ref().unwrap();
        assert_eq!(
            (w.scheme, w.endpoint.as_str()),
            (WebhookScheme::GitHub, "/hooks")
        );
        assert_eq!(format!("{:?}", w.secrets), "WebhookSecrets(2 redacted)");
        assert_eq!(r.lease, Duration::from_secs(5));
        for (line, says) in [
            (format!("POST /h webhook secret=file:{f}"), "needs scheme="),
            ("POST /h webhook scheme=stripe".to_owned(), "needs secret="),
            (
                format!("POST /h webhook scheme=x secret=file:{f}"),
                "scheme=x",
            ),
            (
                "POST /h webhook scheme=stripe secret=whsec_abc".to_owned(),
                "file:PATH or env:VAR",
            ),
            (
                format!("POST /h webhook scheme=stripe secret=file:{f} principal=header:a"),
                "scoped by its endpoint",
            ),
            (
                format!("POST /h soft secret=file:{f}"),
                "for `webhook` routes",
            ),
            (
                "POST /h webhook scheme=stripe secret=file:/no/such/file".to_owned(),
                "cannot read",
            ),
        ] {
            let e = parse_line(&line, 1).unwrap_err();
            assert!(e.contains(says), "{line}: {e}");
        }
    }

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

    /// Regression (issue 42, item 4): `/payments/`, `//payments` and `/%70ayments` passed
    /// through a `POST /payments hard` route unkeyed.
    #[test]
    fn every_spelling_of_a_path_meets_its_route() {
        let routes = Routes::parse("POST /payments hard\nPOST /orders/*/items hard\n").unwrap();
        for path in [
            "/payments",
            "/payments/",
            "//payments",
            "/payments//",
            "/%70ayments",
            "/%70%61yments",
            "/x/../payments",
            "/./payments",
            "/x/%2E%2E/payments",
            "///payments///",
        ] {
            assert_eq!(
                routes.find(&Method::POST, path).map(|(i, _)| i),
                Some(0),
                "{path}"
            );
        }
        assert_eq!(normalise("/"), "/");
        assert_eq!(normalise("//"), "/");
        assert_eq!(normalise("/../.."), "/");
        assert_eq!(normalise("/a%2Fb/"), "/a%2Fb", "a %2F is not a separator");
        assert_eq!(normalise("/%7E%41%zz%"), "/~A%zz%");
        assert_eq!(normalise("/caf\u{e9}/%41"), "/caf\u{e9}/A");
        assert!(matches!(normalise("/plain/path"), Cow::Borrowed(_)));
        assert_eq!(
            routes
                .find(&Method::POST, "/orders/7//items/")
                .map(|(i, _)| i),
            Some(1)
        );
        assert!(routes.find(&Method::POST, "/orders//items").is_none());
        assert!(routes.find(&Method::POST, "/payment").is_none());
        let r = route("POST /trailing/ hard");
        assert!(r.matches_path(&normalise("/trailing")));
    }

    /// Regression (issue 42, item 1): `principal=jwt-sub:NAME` took the token's `sub` without
    /// checking its signature.
    #[test]
    fn a_jwt_subject_needs_a_key_to_verify_it() {
        let e = Routes::parse("POST /p hard principal=jwt-sub:authorization").unwrap_err();
        assert!(e.contains("needs jwt-key="), "{e}");
        let e = Routes::parse("POST /p hard jwt-key=secret:/s").unwrap_err();
        assert!(e.contains("goes with principal=jwt-sub"), "{e}");
        let e = Routes::parse("POST /p hard jwt-aud=api").unwrap_err();
        assert!(e.contains("go with principal=jwt-sub"), "{e}");
        let r = route(
            "POST /p hard jwt-key=jwks:/k.json jwt-iss=a,b jwt-aud=api jwt-leeway=5s \
             principal=jwt-sub:authorization",
        );
        let Principal::JwtSub(h, rule) = &r.principal else {
            panic!("{:?}", r.principal)
        };
        assert_eq!(h, "authorization");
        assert_eq!(rule.keys, KeyFile::Jwks("/k.json".into()));
        assert_eq!(rule.issuers, ["a", "b"]);
        assert_eq!(rule.audiences, ["api"]);
        assert_eq!(rule.leeway, Duration::from_secs(5));
        assert_eq!(
            route("POST /p hard principal=jwt-sub-unverified:x-token").principal,
            Principal::JwtSubUnverified(HeaderName::from_static("x-token"))
        );
    }

    #[test]
    fn scope_headers_scope_and_fingerprint_and_warnings_name_risky_routes() {
        let r = route("POST /p hard scope-headers=authorization,host");
        assert_eq!(r.scope_headers, ["authorization", "host"]);
        assert!(r
            .fingerprint
            .contains(&HeaderName::from_static("authorization")));
        let routes = Routes::parse(
            "POST /a hard\nPOST /b hard scope-headers=authorization\nGET,POST /c soft \
             principal=header:x-api-key\nPOST /d hard principal=jwt-sub-unverified:authorization\n",
        )
        .unwrap();
        let w = routes.warnings();
        assert_eq!(w.len(), 3, "{w:#?}");
        assert!(
            w[0].starts_with("line 1") && w[0].contains("principal=anonymous"),
            "{w:#?}"
        );
        assert!(
            w[1].starts_with("line 3") && w[1].contains("GET is keyed"),
            "{w:#?}"
        );
        assert!(
            w[2].starts_with("line 4") && w[2].contains("does not verify"),
            "{w:#?}"
        );
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
