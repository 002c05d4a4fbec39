//! The upstream: the service the proxy stands in front of, reached over pooled HTTP/1.1
//! connections. Invariant: a request is sent at most once per call, and every answer says what
//! the upstream may have done: an answer of the upstream itself; 502 `upstream-unreachable` when
//! no connection could be made (the request was never sent, the key is released); 502
//! `upstream-outcome-unknown` or 504 `upstream-timeout` when the request was sent and no answer
//! came back, and a key whose lease was taken over from a proxy that died. With
//! [`OnUnknown::Fail`] those outcomes are stored (the request is never sent again); with
//! [`OnUnknown::Release`] the key is released for a retry.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, Scheme};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemdb::http::{Attempt, HttpBody, IdempotencyLayer, StoreOverride};
use tokio::sync::watch;

use super::body::{ProxyBody, Timed};
use super::routes::OnUnknown;

/// What every route's forwarder shares.
pub(crate) struct Upstream {
    client: Client<HttpConnector, ProxyBody>,
    authority: Authority,
    /// How long the upstream may take to answer, and to send each next part of its body.
    timeout: Duration,
    /// Problem documents in the layer's format.
    problems: IdempotencyLayer,
    /// Turns true when the proxy's drain time is over: calls still waiting give up.
    stopping: watch::Receiver<bool>,
}

impl Upstream {
    /// The upstream at `url` (`http://host:port`, a path prefix is not supported).
    pub(crate) fn new(
        url: &str,
        timeout: Duration,
        max_idle: usize,
        problems: IdempotencyLayer,
        stopping: watch::Receiver<bool>,
    ) -> Result<Upstream, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("--upstream {url}: not a URL: {e}"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(format!(
                    "--upstream {url}: scheme {other} is not supported: the proxy speaks plain \
                     HTTP/1.1 to its upstream (run it beside the service, on loopback)"
                ))
            }
            None => {
                return Err(format!(
                    "--upstream {url}: give the scheme, like http://127.0.0.1:8000"
                ))
            }
        }
        if uri
            .path_and_query()
            .is_some_and(|p| p.as_str() != "/" && !p.as_str().is_empty())
        {
            return Err(format!(
                "--upstream {url}: a path is not supported; requests keep their own path"
            ));
        }
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| format!("--upstream {url}: no host"))?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout.min(Duration::from_secs(10))));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(max_idle)
            .build(connector);
        Ok(Upstream {
            client,
            authority,
            timeout,
            problems,
            stopping,
        })
    }

    pub(crate) fn authority(&self) -> &Authority {
        &self.authority
    }
}

/// A route's way to the upstream: a tower service that never fails (every failure is an answer).
#[derive(Clone)]
pub(crate) struct Forwarder {
    upstream: Arc<Upstream>,
    on_unknown: OnUnknown,
}

impl Forwarder {
    pub(crate) fn new(upstream: Arc<Upstream>, on_unknown: OnUnknown) -> Forwarder {
        Forwarder {
            upstream,
            on_unknown,
        }
    }
}

impl tower_service::Service<Request<ProxyBody>> for Forwarder {
    type Response = Response<HttpBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<HttpBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ProxyBody>) -> Self::Future {
        let up = self.upstream.clone();
        let on_unknown = self.on_unknown;
        Box::pin(async move { Ok(forward(&up, on_unknown, req).await) })
    }
}

/// Sends `req` to the upstream once and answers for it.
async fn forward(
    up: &Upstream,
    on_unknown: OnUnknown,
    req: Request<ProxyBody>,
) -> Response<HttpBody> {
    // A keyed request carries its attempt (the idempotency layer puts it there).
    let attempt = req.extensions().get::<Attempt>().copied();
    // What a keyed answer does to its key: an unknown outcome as the route says; the
    // upstream's own 5xx releases; its other answers are stored, and with `Fail` marked so, so
    // that a body cut short after them is stored as unknown too.
    let keep = |mut resp: Response<HttpBody>, unknown: bool| {
        if attempt.is_none() {
            return resp;
        }
        let fate = match (unknown, on_unknown) {
            (true, OnUnknown::Fail) => Some(StoreOverride::Store),
            (true, OnUnknown::Release) => Some(StoreOverride::Release),
            (false, _) if resp.status().is_server_error() => Some(StoreOverride::Release),
            (false, OnUnknown::Fail) => Some(StoreOverride::Store),
            (false, OnUnknown::Release) => None,
        };
        if let Some(fate) = fate {
            resp.extensions_mut().insert(fate);
        }
        resp
    };
    // An answer that says the upstream may have acted.
    let unknown = |status: StatusCode, code: &str, detail: &str| {
        keep(problem(up, status, code, detail), true)
    };
    if attempt.is_some_and(|a| a.takeover) && on_unknown == OnUnknown::Fail {
        count("takeover_not_resent");
        let detail = "an earlier attempt with this Idempotency-Key reached the proxy and its \
                      proxy stopped before the upstream's answer was stored: the upstream may \
                      have run it, so it is not sent again (ask the operator to check, then \
                      `idemdb forget` the key, or use a new key for a new operation)";
        return unknown(StatusCode::BAD_GATEWAY, "upstream-outcome-unknown", detail);
    }
    let req = match outgoing(up, req) {
        Ok(r) => r,
        Err(detail) => {
            return problem(
                up,
                StatusCode::BAD_REQUEST,
                "proxy-request-invalid",
                &detail,
            );
        }
    };
    let mut stopping = up.stopping.clone();
    let sent = tokio::select! {
        r = tokio::time::timeout(up.timeout, up.client.request(req)) => r,
        _ = stopping.wait_for(|s| *s) => {
            count("unknown");
            let detail = "the proxy shut down before the upstream answered; the upstream may \
                          have run the request";
            return unknown(StatusCode::BAD_GATEWAY, "upstream-outcome-unknown", detail);
        }
    };
    match sent {
        Ok(Ok(resp)) => {
            count("answered");
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            let body = Timed::idle(body, up.timeout, "the upstream's response body");
            keep(Response::from_parts(parts, body.boxed_unsync()), false)
        }
        Ok(Err(e)) if e.is_connect() => {
            count("unreachable");
            let detail = "the upstream could not be reached (no connection was made, so the \
                          request was not sent); retry later";
            let resp = problem(up, StatusCode::BAD_GATEWAY, "upstream-unreachable", detail);
            // A 502: the key is released, since nothing was sent.
            keep(resp, false)
        }
        Ok(Err(_)) => {
            count("unknown");
            let detail = "the connection to the upstream was lost after the request was sent: \
                          the upstream may have run it";
            unknown(StatusCode::BAD_GATEWAY, "upstream-outcome-unknown", detail)
        }
        Err(_) => {
            count("timeout");
            let detail = format!(
                "the upstream did not answer within {} ms: it may still run the request",
                up.timeout.as_millis()
            );
            unknown(StatusCode::GATEWAY_TIMEOUT, "upstream-timeout", &detail)
        }
    }
}

/// Counts a call's outcome at the upstream in `idemdb_proxy_upstream_total{outcome}`: `answered`,
/// `unreachable` (never sent), `unknown` and `timeout` (sent, no answer), `takeover_not_resent`.
/// Each but `answered` is also a warning in the log (the request's span names the key's hash).
fn count(outcome: &'static str) {
    metrics::counter!("idemdb_proxy_upstream_total", "outcome" => outcome).increment(1);
    if outcome != "answered" {
        tracing::warn!(target: "idemdb::proxy", outcome, "the upstream did not answer");
    }
}

fn problem(up: &Upstream, status: StatusCode, code: &str, detail: &str) -> Response<HttpBody> {
    up.problems.problem(status, code, detail)
}

/// The request as the upstream gets it: its URI on the upstream, its `Host` the upstream's, the
/// client's host and address in `X-Forwarded-*`, no hop-by-hop headers.
fn outgoing(up: &Upstream, req: Request<ProxyBody>) -> Result<Request<ProxyBody>, String> {
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = Uri::builder()
        .scheme(Scheme::HTTP)
        .authority(up.authority.clone())
        .path_and_query(path)
        .build()
        .map_err(|e| format!("the request's path cannot be sent on: {e}"))?;
    strip_hop_by_hop(&mut parts.headers);
    if let Some(host) = parts.headers.remove(header::HOST) {
        parts.headers.insert(X_FORWARDED_HOST, host);
    }
    if let Some(peer) = parts.extensions.get::<Peer>() {
        let ip = peer.0.ip().to_string();
        let value = match parts
            .headers
            .get(X_FORWARDED_FOR)
            .and_then(|v| v.to_str().ok())
        {
            Some(before) => format!("{before}, {ip}"),
            None => ip,
        };
        if let Ok(v) = HeaderValue::from_str(&value) {
            parts.headers.insert(X_FORWARDED_FOR, v);
        }
    }
    parts
        .headers
        .insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    if let Ok(host) = HeaderValue::from_str(up.authority.as_str()) {
        parts.headers.insert(header::HOST, host);
    }
    parts.version = http::Version::HTTP_11;
    Ok(Request::from_parts(parts, body))
}

/// The client's address, put in the request's extensions by the server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) std::net::SocketAddr);

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Removes the headers that belong to one connection (RFC 9110 7.6.1), and those `Connection`
/// names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}
