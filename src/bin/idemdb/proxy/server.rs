//! The proxy's server: connections, routing, the admin paths and shutdown. Invariant: every
//! request is handled in a task of its own, counted until it ends, so that a client that goes
//! away never cuts a keyed request short (its response is still stored or its key released), and
//! a shutdown waits for every such task: first while connections finish (`--drain-timeout`),
//! then after telling calls still at the upstream to give up (their keys end as the route says).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use idemdb::http::{
    HttpBody, Idempotency, IdempotencyLayer, Webhook, WebhookLayer, WebhookSecrets, WhileRunning,
};
use idemdb::{AsyncStore, Config, Durability};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::{watch, Notify, Semaphore};
use tower_layer::Layer;
use tower_service::Service;

use super::body::{ProxyBody, Timed};
use super::jwt::Verifier;
use super::routes::{Level, OnUnknown, Principal, Route, Routes};
use super::upstream::{Forwarder, Peer, Upstream};
use super::watch::{every_second, Stamp};
use super::Options;
use crate::Target;

/// The prefix of the paths the proxy answers itself.
const ADMIN: &str = "/_idemdb/";

/// Logs to stderr: `--log` is a list of `target=level` (or a bare level); with
/// `idemdb::http=info`, every request's span is printed when it ends (an access log).
pub(crate) fn init_logging(filter: &str) -> Result<(), String> {
    use tracing_subscriber::fmt::format::FmtSpan;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let targets: tracing_subscriber::filter::Targets = filter.parse().map_err(|e| {
        format!("--log {filter}: {e} (write a level, like warn, or target=level pairs)")
    })?;
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .with_span_events(FmtSpan::CLOSE),
        )
        .with(targets)
        .try_init()
        .map_err(|e| format!("logging could not start: {e}"))
}

/// Requests still being handled, and a wake-up when one ends.
#[derive(Default)]
struct InFlight {
    count: AtomicUsize,
    ended: Notify,
}

struct Guard(Arc<InFlight>);

impl InFlight {
    fn enter(this: &Arc<InFlight>) -> Guard {
        this.count.fetch_add(1, Ordering::SeqCst);
        Guard(this.clone())
    }

    /// Waits until no request is in flight, at most `limit`: whether none is.
    async fn settle(&self, limit: Duration) -> bool {
        let until = tokio::time::Instant::now() + limit;
        loop {
            let ended = self.ended.notified();
            if self.count.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(until, ended).await.is_err() {
                return self.count.load(Ordering::SeqCst) == 0;
            }
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::SeqCst);
        self.0.ended.notify_waiters();
    }
}

/// Everything a request needs, shared by every connection.
struct App {
    routes: Routes,
    /// The idempotent service of each keyed route (`None` for a `none` or `webhook` route), by
    /// index.
    keyed: Vec<Option<Idempotency<Forwarder>>>,
    /// The webhook receiver of each `webhook` route (`None` for the others), by index.
    webhooks: Vec<Option<Webhook<Forwarder>>>,
    /// The secrets files of the `webhook` routes, each read again when it changes while the
    /// app lives.
    _secret_files: Vec<Arc<SecretsFile>>,
    /// How each keyed route scopes its keys (`None` for a `none` route), by index.
    scopers: Vec<Option<Scoper>>,
    /// Problem documents in the layer's format.
    problems: IdempotencyLayer,
    /// When a keyed request that no keyed route took was last logged (seconds since the Unix
    /// epoch): at most one such warning a second.
    ignored_logged: AtomicU64,
    /// Requests no keyed route takes.
    passthrough: Forwarder,
    store: AsyncStore,
    metrics: PrometheusHandle,
    request_timeout: Duration,
    in_flight: Arc<InFlight>,
}

/// Opens the store, binds, prints the address, serves until a signal, then drains.
pub(crate) async fn serve(
    o: Options,
    routes: Routes,
    metrics: PrometheusHandle,
) -> Result<(), String> {
    let store = open_store(&o).await?;
    upkeep_metrics(metrics.clone());
    let (stop, stopping) = watch::channel(false);
    let problems = IdempotencyLayer::new(store.clone());
    let upstream = Arc::new(Upstream::new(
        &o.upstream,
        o.upstream_timeout,
        o.max_connections,
        problems,
        stopping,
    )?);
    let app = build_app(&o, routes, metrics, &store, &upstream)?;
    let listener = bind(&o, &app, &upstream).await?;
    let graceful = GracefulShutdown::new();
    accept_until_signalled(&o, listener, &app, &graceful).await?;
    drain(&o, graceful, stop, &app).await;
    eprintln!("idemdb proxy: stopped");
    Ok(())
}

/// Step 1: opens the store `--db` or `--postgres` names.
async fn open_store(o: &Options) -> Result<AsyncStore, String> {
    Ok(match &o.store {
        Target::Db(dir) => Config::new(dir)
            .durability(if o.buffered {
                Durability::Buffered
            } else {
                Durability::Synced
            })
            .open()
            .map_err(|e| format!("the store in {}: {e}", dir.display()))?
            .into(),
        Target::Postgres(url) => Config::postgres(url)
            .buffered_claims(!o.flushed_claims)
            .open_async()
            .await
            .map_err(|e| format!("the store on PostgreSQL: {e}"))?,
    })
}

/// Step 2: drains the metrics recorder's samples every 5 s, for the life of the process.
fn upkeep_metrics(upkeep: PrometheusHandle) {
    // The recorder keeps every histogram sample until upkeep drains it into its summary: without
    // this, a proxy nobody scrapes would grow by a sample per store call, forever.
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
}

/// Step 3: what every request shares: the routes (their warnings printed), each keyed route's
/// scoper and idempotent service, and the pass-through to the upstream.
fn build_app(
    o: &Options,
    routes: Routes,
    metrics: PrometheusHandle,
    store: &AsyncStore,
    upstream: &Arc<Upstream>,
) -> Result<Arc<App>, String> {
    for w in routes.warnings() {
        eprintln!("idemdb proxy: warning: {w}");
    }
    let scopers = routes
        .routes
        .iter()
        .map(|r| r.keyed_by_header().then(|| Scoper::new(r)).transpose())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("routes file {}, {e}", routes.source))?;
    let keyed = routes
        .routes
        .iter()
        .map(|r| {
            r.keyed_by_header()
                .then(|| keyed_service(r, store, upstream))
        })
        .collect();
    let mut secret_files = Vec::new();
    let webhooks = routes
        .routes
        .iter()
        .map(|r| webhook_service(r, store, upstream, &mut secret_files))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("routes file {}, {e}", routes.source))?;
    Ok(Arc::new(App {
        routes,
        keyed,
        webhooks,
        _secret_files: secret_files,
        scopers,
        problems: IdempotencyLayer::new(store.clone()),
        ignored_logged: AtomicU64::new(0),
        passthrough: Forwarder::new(upstream.clone(), OnUnknown::Release),
        store: store.clone(),
        metrics,
        request_timeout: o.request_timeout,
        in_flight: Arc::default(),
    }))
}

/// Step 3, for one keyed route: the idempotency layer its settings make, in front of the
/// upstream.
fn keyed_service(
    r: &Route,
    store: &AsyncStore,
    upstream: &Arc<Upstream>,
) -> Idempotency<Forwarder> {
    let layer = IdempotencyLayer::new(store.clone())
        .methods(r.keyed_methods())
        .require_key(r.level == Level::Hard)
        // The scope was resolved (and a token verified) before the layer: `handle`.
        .principal(|parts| parts.extensions.get::<Scope>().and_then(|s| s.0.clone()))
        .fingerprint_headers(r.fingerprint.clone())
        .lease(r.lease)
        .retention(r.retention)
        .max_request_bytes(r.max_body)
        .while_running(wait_of(r))
        // A key of a route that must not send a request twice outlives a crash of this process,
        // so that its next holder sees the takeover.
        .written_pending(r.on_unknown == OnUnknown::Fail);
    layer.layer(Forwarder::new(upstream.clone(), r.on_unknown))
}

/// What a duplicate of a route's request gets while the first runs: its `wait=`, or 409.
fn wait_of(r: &Route) -> WhileRunning {
    if r.wait.is_zero() {
        WhileRunning::Reject
    } else {
        WhileRunning::Wait(r.wait)
    }
}

/// Step 3, for one `webhook` route: the webhook receiver its settings make, in front of the
/// upstream (its secrets file, if it has one, watched from `secret_files`); `Ok(None)` for any
/// other route.
fn webhook_service(
    r: &Route,
    store: &AsyncStore,
    upstream: &Arc<Upstream>,
    secret_files: &mut Vec<Arc<SecretsFile>>,
) -> Result<Option<Webhook<Forwarder>>, String> {
    let Some(w) = &r.webhook else {
        return Ok(None);
    };
    let layer = WebhookLayer::new(store.clone(), w.scheme, &w.endpoint, w.secrets.clone())
        .map_err(|e| format!("line {}: {e}", r.line))?
        .tolerance(w.tolerance)
        .lease(r.lease)
        .retention(r.retention)
        .max_request_bytes(r.max_body)
        .while_running(wait_of(r))
        .written_pending(r.on_unknown == OnUnknown::Fail);
    if let Some(path) = w.secret_file() {
        let file = Arc::new(SecretsFile {
            path: path.to_owned(),
            line: r.line,
            // Read when the routes were loaded, before any stamp: the first look reads it again.
            stamp: Stamp::unread(),
            layer: layer.clone(),
        });
        every_second(
            "idemdb-webhook-secrets",
            Arc::downgrade(&file),
            SecretsFile::reload_if_changed,
        )?;
        secret_files.push(file);
    }
    Ok(Some(
        layer.layer(Forwarder::new(upstream.clone(), r.on_unknown)),
    ))
}

/// A `webhook` route's `secret=file:PATH`: read again within a second or two of a change, so a
/// secret is rotated without a restart; a file that cannot be read or holds an unusable secret
/// keeps the secrets in use, and a warning says why (never a secret).
struct SecretsFile {
    path: std::path::PathBuf,
    /// The route's line in the routes file, for the log.
    line: usize,
    stamp: Stamp,
    /// Shares its secrets with the route's receiver (`WebhookLayer::set_secrets`).
    layer: WebhookLayer,
}

impl SecretsFile {
    fn reload_if_changed(&self) {
        if !self.stamp.changed(&self.path) {
            return;
        }
        let file = self.path.display();
        match WebhookSecrets::from_file(&self.path).and_then(|s| self.layer.set_secrets(s)) {
            Ok(()) => tracing::info!(target: "idemdb::proxy", %file, line = self.line,
                "webhook secrets read again"),
            Err(e) => tracing::warn!(target: "idemdb::proxy", %file, line = self.line,
                "webhook secrets not read again, the previous ones stay in use: {e}"),
        }
    }
}

/// Step 4: binds `--listen` and prints the address it got, and what the proxy serves.
async fn bind(
    o: &Options,
    app: &App,
    upstream: &Upstream,
) -> Result<tokio::net::TcpListener, String> {
    let listener = tokio::net::TcpListener::bind(o.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", o.listen))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("--listen {}: {e}", o.listen))?;
    // The one line a supervisor (or a test) waits for.
    println!("idemdb proxy: listening on {local}");
    eprintln!(
        "idemdb proxy: upstream http://{}, {} store, routes: {}",
        upstream.authority(),
        app.store.backend_name(),
        app.routes.source
    );
    Ok(listener)
}

/// Step 5: serves each connection accepted (at most `--max-connections` at once) in a task of
/// its own, watched by `graceful`, until SIGTERM or Ctrl-C; then closes the listener.
async fn accept_until_signalled(
    o: &Options,
    listener: tokio::net::TcpListener,
    app: &Arc<App>,
    graceful: &GracefulShutdown,
) -> Result<(), String> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("SIGTERM cannot be handled: {e}"))?;
    let signalled = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    tokio::pin!(signalled);
    let slots = Arc::new(Semaphore::new(o.max_connections.max(1)));
    loop {
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.map_err(|e| e.to_string())?,
            () = &mut signalled => break,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors, a connection reset before accept: not fatal.
                    tracing::warn!(target: "idemdb::proxy", "accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut signalled => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = service_fn(move |req| {
            let app = app.clone();
            async move { Ok::<_, Infallible>(handle(app, req, peer).await) }
        });
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(o.request_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(slot);
        });
    }
    drop(listener);
    Ok(())
}

/// Step 6: waits up to `--drain-timeout` for open connections to finish, then tells calls
/// still at the upstream to give up (`stop`) and waits up to 30 s for every request in flight.
async fn drain(o: &Options, graceful: GracefulShutdown, stop: watch::Sender<bool>, app: &App) {
    eprintln!(
        "idemdb proxy: stopping: no new connections; waiting up to {} ms for requests in flight",
        o.drain_timeout.as_millis()
    );
    if tokio::time::timeout(o.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        eprintln!("idemdb proxy: drain time over: calls still at the upstream give up");
    }
    let _ = stop.send(true);
    // Calls that gave up still store or release their keys (a store call is bounded by the
    // store's own timeouts).
    if !app.in_flight.settle(Duration::from_secs(30)).await {
        eprintln!(
            "idemdb proxy: requests still unfinished after 30 s; their keys end with their leases"
        );
    }
}

/// One request: an admin path, or routed to its keyed route or straight to the upstream, in a
/// task of its own.
async fn handle(app: Arc<App>, req: Request<Incoming>, peer: SocketAddr) -> Response<HttpBody> {
    if req.uri().path().starts_with(ADMIN) {
        return admin(&app, &req).await;
    }
    let deadline = tokio::time::Instant::now() + app.request_timeout;
    let mut req = req.map(|b| ProxyBody::Stream(Timed::deadline(b, deadline, "the request body")));
    req.extensions_mut().insert(Peer(peer));
    let guard = InFlight::enter(&app.in_flight);
    let task = tokio::spawn(async move {
        let _guard = guard;
        let route = app.routes.find(req.method(), req.uri().path());
        // A webhook route takes every request it matches: its signature is checked first.
        if let Some(mut svc) = route.and_then(|(i, _)| app.webhooks[i].clone()) {
            let _ = std::future::poll_fn(|cx| svc.poll_ready(cx)).await;
            return match svc.call(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
        }
        let keyed = route.and_then(|(i, r)| {
            let svc = app.keyed[i].clone()?;
            r.keys(req.method()).then_some((i, svc))
        });
        if keyed.is_none() && req.headers().contains_key(IDEMPOTENCY_KEY) {
            ignored_key(&app, route.map(|(_, r)| r), &req);
        }
        if let Some((i, _)) = &keyed {
            // A keyed request's scope is settled before anything is claimed or forwarded.
            if req.headers().contains_key(IDEMPOTENCY_KEY) {
                if let Some(scoper) = &app.scopers[*i] {
                    match scoper.resolve(req.headers()) {
                        Ok(scope) => {
                            req.extensions_mut().insert(scope);
                        }
                        Err(refused) => return refused.answer(&app.problems),
                    }
                }
            }
        }
        match keyed.map(|(_, svc)| svc) {
            Some(mut svc) => {
                let _ = std::future::poll_fn(|cx| svc.poll_ready(cx)).await;
                match svc.call(req).await {
                    Ok(r) => r,
                    Err(never) => match never {},
                }
            }
            None => match app.passthrough.clone().call(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            },
        }
    });
    match task.await {
        Ok(resp) => resp,
        Err(_) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the proxy failed on this request\n",
        ),
    }
}

/// `GET /_idemdb/health` (200 when the store answers, 503 otherwise) and `GET
/// /_idemdb/metrics` (Prometheus text).
async fn admin(app: &App, req: &Request<Incoming>) -> Response<HttpBody> {
    let path = &req.uri().path()[ADMIN.len()..];
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "the proxy's own paths answer GET\n",
        );
    }
    match path {
        "health" => {
            let backend = app.store.backend_name();
            match tokio::time::timeout(Duration::from_secs(5), app.store.now()).await {
                Ok(Ok(_)) => json(
                    StatusCode::OK,
                    serde_json::json!({"status": "ok", "store": backend}),
                ),
                Ok(Err(e)) => json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    serde_json::json!({"status": "unavailable", "store": backend, "error": e.to_string()}),
                ),
                Err(_) => json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    serde_json::json!({"status": "unavailable", "store": backend, "error": "no answer within 5 s"}),
                ),
            }
        }
        "metrics" => {
            let mut resp = plain(StatusCode::OK, &app.metrics.render());
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            resp
        }
        _ => plain(
            StatusCode::NOT_FOUND,
            "the proxy's own paths are /_idemdb/health and /_idemdb/metrics\n",
        ),
    }
}

fn plain(status: StatusCode, text: &str) -> Response<HttpBody> {
    let mut resp = Response::new(full(text.to_owned()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn json(status: StatusCode, value: serde_json::Value) -> Response<HttpBody> {
    let mut resp = Response::new(full(value.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn full(s: String) -> HttpBody {
    Full::new(bytes::Bytes::from(s))
        .map_err(|never| match never {})
        .boxed_unsync()
}

const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Counts (and logs, at most once a second) a request that carries an `Idempotency-Key` but
/// that no keyed route took: it passes through unkeyed, and its sender may believe otherwise.
fn ignored_key<B>(app: &App, route: Option<&Route>, req: &Request<B>) {
    let reason = match route {
        None => "no_route",
        Some(r) if r.level == Level::None => "none_route",
        Some(_) => "method_not_keyed",
    };
    metrics::counter!("idemdb_proxy_keys_ignored_total", "reason" => reason).increment(1);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if app.ignored_logged.swap(now, Ordering::Relaxed) != now {
        tracing::warn!(target: "idemdb::proxy", method = %req.method(), path = req.uri().path(),
            reason, "a request with an Idempotency-Key matched no keyed route and was passed \
                     through unkeyed (counted in idemdb_proxy_keys_ignored_total)");
    }
}

/// The scope of a keyed request's key, put in its extensions for the layer's principal
/// function: `None` when the request has no principal (the layer answers 401
/// `principal-missing`).
#[derive(Debug, Clone)]
struct Scope(Option<String>);

/// Why a keyed request is refused before its key is looked at.
enum Refused {
    /// A header the scope is read from came more than once (400 `principal-ambiguous`).
    Ambiguous(HeaderName),
    /// The token did not verify (401 `principal-unverified`).
    Unverified(String),
}

impl Refused {
    fn answer(self, problems: &IdempotencyLayer) -> Response<HttpBody> {
        match self {
            Refused::Ambiguous(h) => {
                metrics::counter!("idemdb_proxy_refused_total", "code" => "principal-ambiguous")
                    .increment(1);
                let detail = format!(
                    "the header `{h}`, which scopes this route's keys, was sent more than once; \
                     send it once"
                );
                problems.problem(StatusCode::BAD_REQUEST, "principal-ambiguous", &detail)
            }
            Refused::Unverified(why) => {
                metrics::counter!("idemdb_proxy_refused_total", "code" => "principal-unverified")
                    .increment(1);
                let detail = format!(
                    "the token that scopes this route's keys did not verify: {why}; nothing was \
                     stored or forwarded"
                );
                let mut resp =
                    problems.problem(StatusCode::UNAUTHORIZED, "principal-unverified", &detail);
                resp.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer error=\"invalid_token\""),
                );
                resp
            }
        }
    }
}

/// How a keyed route scopes its keys: the principal (a token's subject only once verified) and
/// the route's scope headers.
struct Scoper {
    principal: Principal,
    verifier: Option<Arc<Verifier>>,
    headers: Vec<HeaderName>,
}

impl Scoper {
    /// The route's scoper; its JWT keys are loaded now (an error names the route's line).
    fn new(route: &Route) -> Result<Scoper, String> {
        let verifier = match &route.principal {
            Principal::JwtSub(_, rule) => Some(
                Verifier::start(rule).map_err(|e| format!("line {}: jwt-key: {e}", route.line))?,
            ),
            _ => None,
        };
        Ok(Scoper {
            principal: route.principal.clone(),
            verifier,
            headers: route.scope_headers.clone(),
        })
    }

    /// The request's scope, or why it is refused.
    fn resolve(&self, headers: &HeaderMap) -> Result<Scope, Refused> {
        let text = |name: &HeaderName| -> Result<Option<&str>, Refused> {
            Ok(single(headers, name)?
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty()))
        };
        let principal = match &self.principal {
            Principal::Anonymous => Some("anonymous".to_owned()),
            Principal::Header(name) => text(name)?.map(str::to_owned),
            Principal::JwtSub(name, _) => match (text(name)?, &self.verifier) {
                (Some(v), Some(verifier)) => Some(
                    verifier
                        .subject(bearer(v))
                        .map_err(|u| Refused::Unverified(u.0))?,
                ),
                _ => None,
            },
            Principal::JwtSubUnverified(name) => text(name)?.and_then(|v| jwt_subject(bearer(v))),
        };
        let Some(principal) = principal else {
            return Ok(Scope(None));
        };
        if self.headers.is_empty() {
            return Ok(Scope(Some(principal)));
        }
        // The principal and each scope header's value (or its absence), hashed: a scope header
        // may carry a secret (a token), which the store never holds in the clear.
        let mut parts: Vec<Vec<u8>> = vec![b"scope".to_vec(), principal.into_bytes()];
        for name in &self.headers {
            parts.push(name.as_str().as_bytes().to_vec());
            parts.push(match single(headers, name)? {
                None => vec![0],
                Some(v) => [&[1u8][..], v.as_bytes()].concat(),
            });
        }
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        Ok(Scope(Some(idemdb::derive_key(&refs))))
    }
}

/// The value of a header a scope is read from, if sent: sent twice, it scopes nothing.
fn single<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'a HeaderValue>, Refused> {
    let mut all = headers.get_all(name).iter();
    let first = all.next();
    if all.next().is_some() {
        return Err(Refused::Ambiguous(name.clone()));
    }
    Ok(first)
}

/// A token without its `Bearer ` prefix (any case), if it has one.
fn bearer(value: &str) -> &str {
    match value.get(..7) {
        Some(p) if p.eq_ignore_ascii_case("bearer ") => value[7..].trim_start(),
        _ => value,
    }
}

/// The `sub` claim of a JWT, NOT verified (`principal=jwt-sub-unverified`: a gateway in front
/// verified the token).
fn jwt_subject(token: &str) -> Option<String> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let sub = claims.get("sub")?.as_str()?;
    (!sub.is_empty()).then(|| sub.to_owned())
}

#[cfg(test)]
mod tests {
    use super::{bearer, jwt_subject};

    #[test]
    fn a_jwt_subject_is_read_from_its_payload() {
        // {"alg":"none"} . {"sub":"acct_42","exp":1}
        let token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhY2N0XzQyIiwiZXhwIjoxfQ.";
        assert_eq!(jwt_subject(token).as_deref(), Some("acct_42"));
        assert_eq!(jwt_subject("not-a-jwt"), None);
        assert_eq!(jwt_subject("a.!!!.c"), None);
        assert_eq!(bearer("Bearer abc"), "abc");
        assert_eq!(bearer("bearer  abc"), "abc");
        assert_eq!(bearer("abc"), "abc");
    }
}
