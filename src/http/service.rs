//! The service the layer wraps around a handler. Invariant: once a claim acquires a key's lease,
//! the handler and the recording of its outcome always end by storing the response or releasing
//! the key, whether or not the client is still connected (a dropped request hands its unfinished
//! work to the runtime; a claim still in flight when its request is dropped finishes on its own
//! and releases what it acquires) and whether or not the handler panics. Every store call goes
//! through the [`AsyncStore`](crate::AsyncStore), on either backend: calls that may sync the disk
//! run on tokio's blocking pool and PostgreSQL calls are async, never blocking a runtime worker.

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::ControlFlow::{self, Break, Continue};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response as HttpResponse, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::body::{boxed, full, read_limited, BoxError, HttpBody, Read};
use super::estimate::{retry_after_secs, Route};
use super::key::{fingerprint_request, parse_key};
use super::problem::{problem, problem_parts};
use super::stored::{meta_of, meta_size, replay_response, BODY_OMITTED, RETENTION};
use super::tenant::{tenant_of, NoTenant};
use super::{Attempt, Counters, Options, StoreOverride, WhileRunning};
use crate::async_store::{Detached, OnRelease};
use crate::error::{Error, Result};
use crate::record::{Claim, ClaimOptions, FailKind, Lease, LeaseLost, Response};

/// The idempotent service built by [`super::IdempotencyLayer`].
#[derive(Clone)]
pub struct Idempotency<S> {
    inner: S,
    opts: Arc<Options>,
}

impl<S> Idempotency<S> {
    pub(crate) fn new(inner: S, opts: Arc<Options>) -> Self {
        Idempotency { inner, opts }
    }
}

pub(super) type Reply<E> = std::result::Result<HttpResponse<HttpBody>, E>;

/// What a step of [`handle`] gives: `Continue` with what the next step needs, or `Break` with
/// the answer the request gets.
pub(super) type Step<T> = ControlFlow<HttpResponse<HttpBody>, T>;

impl<S, B, RB> tower_service::Service<Request<B>> for Idempotency<S>
where
    S: tower_service::Service<Request<B>, Response = HttpResponse<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = HttpResponse<HttpBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Reply<S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The clone takes the place of the service that was polled ready; the ready one serves
        // this request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        // One span per request (docs/operating.md): the route is the path without its query;
        // the caller and the key appear only as hashes, and no body bytes at all.
        let span = tracing::info_span!(
            target: "idemdb::http",
            "idemdb.http",
            method = %req.method(),
            route = req.uri().path(),
            principal_hash = tracing::field::Empty,
            key_hash = tracing::field::Empty,
            outcome = tracing::field::Empty,
            status = tracing::field::Empty,
            duration_us = tracing::field::Empty,
        );
        let fut = handle(self.opts.clone(), inner, req);
        Box::pin(tracing::Instrument::instrument(
            async move {
                let started = Instant::now();
                let reply = fut.await;
                let span = tracing::Span::current();
                if let Ok(r) = &reply {
                    span.record("status", r.status().as_u16());
                }
                let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                span.record("duration_us", took);
                reply
            },
            span,
        ))
    }
}

/// Serves one request: its key, its caller, its body and its claim decide whether the handler
/// runs under a lease, or the answer is a replay, a refusal or a problem.
async fn handle<S, B, RB>(opts: Arc<Options>, inner: S, req: Request<B>) -> Reply<S::Error>
where
    S: tower_service::Service<Request<B>, Response = HttpResponse<RB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let key = match covered_key(&opts, &req) {
        Continue(Some(key)) => key,
        Continue(None) => return without_key(&opts, inner, req).await,
        Break(answer) => return Ok(answer),
    };
    let (parts, body) = req.into_parts();
    let tenant = match caller_tenant(&opts, &parts, &key) {
        Continue(tenant) => tenant,
        Break(answer) => return Ok(answer),
    };
    let body = match read_request_body(&opts, body).await {
        Continue(body) => body,
        Break(answer) => return Ok(answer),
    };
    serve_keyed(opts, inner, parts, body, &tenant, &key).await
}

/// Steps 4 on, for a request whose key, tenant and body are known (from its headers and
/// principal, or from a verified webhook delivery, `webhook.rs`): its claim decides whether the
/// handler runs under a lease, or the answer is a replay, a refusal or a problem.
pub(super) async fn serve_keyed<S, B, RB>(
    opts: Arc<Options>,
    inner: S,
    parts: http::request::Parts,
    body: Bytes,
    tenant: &str,
    key: &str,
) -> Reply<S::Error>
where
    S: tower_service::Service<Request<B>, Response = HttpResponse<RB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body + From<Bytes> + Send + 'static,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let fp = fingerprint_request(&parts, &opts.fingerprint_headers, &body);
    let route = opts.durations.route(&parts.method, parts.uri.path());
    let lease = match claim_key(&opts, tenant, key, &fp, route).await {
        Continue(lease) => lease,
        Break(answer) => return Ok(answer),
    };

    // From here on the outcome must be recorded even if this future is dropped (the client went
    // away): if it is, `Detached` hands the rest to the runtime to finish.
    let mut parts = parts;
    parts.extensions.insert(Attempt {
        number: lease.attempt(),
        takeover: lease.is_takeover(),
        fence: lease.fence(),
    });
    let req = Request::from_parts(parts, B::from(body));
    Detached::new(run_leased(opts, inner, req, lease, route)).await
}

/// Step 1: the request's Idempotency-Key, `None` when its method is not covered (other methods
/// pass untouched: their key is not even parsed) or it carries none; a malformed key is refused.
fn covered_key<B>(opts: &Options, req: &Request<B>) -> Step<Option<String>> {
    if !opts.methods.contains(req.method()) {
        return Continue(None);
    }
    match parse_key(req.headers(), opts.max_key_len) {
        Ok(key) => Continue(key),
        Err(e) => {
            let code = "idempotency-key-invalid";
            Break(refuse(opts, StatusCode::BAD_REQUEST, code, &e.detail()))
        }
    }
}

/// Step 1 without a key: refused when the layer requires one for the request's method,
/// otherwise passed to the handler untouched.
async fn without_key<S, B, RB>(opts: &Options, mut inner: S, req: Request<B>) -> Reply<S::Error>
where
    S: tower_service::Service<Request<B>, Response = HttpResponse<RB>>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    if opts.require_key && opts.methods.contains(req.method()) {
        let detail = "this endpoint requires an Idempotency-Key header";
        let code = "idempotency-key-missing";
        return Ok(refuse(opts, StatusCode::BAD_REQUEST, code, detail));
    }
    Counters::bump(&opts.stats.passed_through);
    inner.call(req).await.map(|r| r.map(boxed))
}

/// Step 2: the tenant the key is scoped by, from the caller's principal (both recorded on the
/// request's span as hashes); a request without a caller, or one whose principal cannot be
/// stored, is refused.
fn caller_tenant(opts: &Options, parts: &http::request::Parts, key: &str) -> Step<String> {
    let principal = (opts.principal)(parts).unwrap_or_default();
    let span = tracing::Span::current();
    if !span.is_disabled() && !principal.is_empty() {
        span.record(
            "principal_hash",
            crate::telemetry::spans::short_hash(&[principal.as_bytes()]).as_str(),
        );
    }
    match tenant_of(&principal, opts.store.common().max_tenant_len) {
        Ok(t) => {
            if !span.is_disabled() {
                let hash = crate::telemetry::spans::trace_key_hash(t.as_bytes(), key.as_bytes());
                span.record("key_hash", hash.as_str());
            }
            Continue(t)
        }
        Err(NoTenant::Empty) => {
            let detail = "an Idempotency-Key is scoped by the caller, and this request has none";
            Break(refuse(
                opts,
                StatusCode::UNAUTHORIZED,
                "principal-missing",
                detail,
            ))
        }
        Err(NoTenant::LimitTooSmall { max_tenant_len }) => {
            let detail = format!(
                "the caller's principal is longer than the idempotency store's tenant limit \
                 ({max_tenant_len} bytes), which is too small to hold its hash"
            );
            Break(refuse(
                opts,
                StatusCode::INTERNAL_SERVER_ERROR,
                "principal-unstorable",
                &detail,
            ))
        }
    }
}

/// Step 3: the whole request body, which the fingerprint covers; one over
/// `max_request_bytes`, or one that fails before its end, is refused.
pub(super) async fn read_request_body<B>(opts: &Options, body: B) -> Step<Bytes>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    match Limited::new(body, opts.max_request_bytes).collect().await {
        Ok(c) => Continue(c.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => {
            let detail = format!(
                "the request body is larger than {} bytes, the most this endpoint reads",
                opts.max_request_bytes
            );
            Break(refuse(
                opts,
                StatusCode::PAYLOAD_TOO_LARGE,
                "request-too-large",
                &detail,
            ))
        }
        Err(_) => {
            let detail = "the request body could not be read to its end";
            Break(refuse(
                opts,
                StatusCode::BAD_REQUEST,
                "request-body-unreadable",
                detail,
            ))
        }
    }
}

/// Step 4: claims the key; the lease when this request is to run the handler, otherwise the
/// answer: the stored response replayed, 422 for another request under the key, 409 while the
/// first still runs, or the store's failure.
async fn claim_key(
    opts: &Options,
    tenant: &str,
    key: &str,
    fp: &[u8],
    route: Route,
) -> Step<Lease> {
    let stats = &opts.stats;
    let claim_opts = ClaimOptions::default()
        .lease(opts.lease)
        .retention(opts.retention)
        .written_pending(opts.written_pending);
    // A duplicate waits in the store (`ClaimOptions::wait`): woken when the first request's lease
    // ends, in this process or, on PostgreSQL, in any instance.
    let claim_opts = match opts.while_running {
        WhileRunning::Reject => claim_opts,
        WhileRunning::Wait(d) => claim_opts.wait(d),
    };
    let claim = opts
        .store
        .claim_with(
            crate::format::Namespace::Requests,
            tenant.as_bytes(),
            key.as_bytes(),
            fp,
            claim_opts,
            &opts.on_release,
        )
        .await;
    match claim {
        Err(e) => Break(store_error(opts, &e)),
        Ok(Claim::Acquired(lease)) => Continue(lease),
        Ok(Claim::Completed(r) | Claim::Failed(r)) => {
            Counters::bump(&stats.replayed);
            let mut resp = replay_response(r);
            advertise_retention(opts, resp.headers_mut());
            Break(resp)
        }
        Ok(Claim::Mismatch) => {
            Counters::bump(&stats.mismatched);
            let detail = "this Idempotency-Key was already used with a different request \
                          (method, path, query, body or fingerprinted headers)";
            Break(problem(
                &opts.problem_docs,
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency-key-reused",
                detail,
            ))
        }
        Ok(Claim::InProgress { retry_after }) => {
            Counters::bump(&stats.in_progress);
            let estimate = opts.durations.estimate(route);
            let secs = retry_after_secs(retry_after, opts.lease, estimate);
            Break(in_progress(opts, secs))
        }
    }
}

/// Counts the releases of leases acquired for a client that had gone away before the claim
/// answered (a claim on the blocking pool or on PostgreSQL finishes on its own and releases).
pub(crate) fn release_counter(stats: &Arc<Counters>) -> OnRelease {
    let stats = stats.clone();
    Arc::new(move |released| {
        Counters::bump(match released {
            Ok(Ok(())) => &stats.abandoned,
            Ok(Err(_)) => &stats.lease_lost,
            Err(_) => &stats.store_errors,
        })
    })
}

/// The handler's future, with a panic turned into `None` (the panic hook has already reported
/// it). Never polled again after it is ready.
struct CatchPanic<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchPanic<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<F::Output>> {
        let this = self.get_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| this.0.as_mut().poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Some(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_panic) => Poll::Ready(None),
        }
    }
}

/// What the handler's own task produced.
enum Ran<E> {
    Error(E),
    /// The whole response, with the metadata it is stored under.
    Whole(http::response::Parts, BTreeMap<String, String>, Bytes),
    TooLarge(http::response::Parts, HttpBody),
    /// The body failed; `keep` when the response said [`StoreOverride::Store`].
    BodyFailed {
        keep: bool,
    },
}

/// Whether the response with these parts is stored: its [`StoreOverride`] if it carries one,
/// otherwise what the layer's `store_status` says of its status.
fn stored(opts: &Options, parts: &http::response::Parts) -> bool {
    match parts.extensions.get::<StoreOverride>() {
        Some(StoreOverride::Store) => true,
        Some(StoreOverride::Release) => false,
        None => (opts.store_status)(parts.status),
    }
}

/// Runs the handler under `lease`, renewing it every third of its length, then stores the
/// response or releases the key, and returns what the client gets.
async fn run_leased<S, B, RB>(
    opts: Arc<Options>,
    mut inner: S,
    req: Request<B>,
    mut lease: Lease,
    route: Route,
) -> Reply<S::Error>
where
    S: tower_service::Service<Request<B>, Response = HttpResponse<RB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let stats = &opts.stats;
    let allowed = opts.replay_headers.clone();
    let max = opts.store.common().max_response_bytes;
    let mut handler = CatchPanic(Box::pin(async move {
        let resp = match inner.call(req).await {
            Ok(r) => r,
            Err(e) => return Ran::Error(e),
        };
        let (parts, body) = resp.into_parts();
        let meta = meta_of(&parts, &allowed);
        match read_limited(body, max.saturating_sub(meta_size(&meta))).await {
            Read::Whole(b) => Ran::Whole(parts, meta, b),
            Read::TooLarge(b) => Ran::TooLarge(parts, b),
            Read::Failed => Ran::BodyFailed {
                keep: parts.extensions.get::<StoreOverride>() == Some(&StoreOverride::Store),
            },
        }
    }));

    let every = (opts.lease / 3).max(Duration::from_millis(10));
    let mut renewing = true;
    let started = Instant::now();
    // Until when the lease is surely still ours (measured from before the call that set it).
    let mut held_until = started + opts.lease;
    let ran = loop {
        tokio::select! {
            r = &mut handler => break r,
            _ = tokio::time::sleep(every), if renewing => {
                let asked = Instant::now();
                match opts.store.renew(&mut lease, opts.lease).await {
                    Ok(Ok(())) => held_until = asked + opts.lease,
                    // The key is no longer ours; the handler finishes but its result will not be
                    // stored (complete reports the loss).
                    Ok(Err(_)) => renewing = false,
                    Err(_) => Counters::bump(&stats.store_errors),
                }
            }
        }
    };
    opts.durations.record(route, started.elapsed());

    match ran {
        Some(Ran::Whole(mut parts, meta, bytes)) => {
            if stored(&opts, &parts) {
                store(&opts, &lease, held_until, &bytes, &meta).await;
                advertise_retention(&opts, &mut parts.headers);
            } else {
                release(&opts, lease, held_until, &stats.released).await;
            }
            Ok(HttpResponse::from_parts(parts, full(bytes)))
        }
        Some(Ran::TooLarge(mut parts, body)) => {
            if stored(&opts, &parts) {
                // The handler ran and its answer is the key's outcome: a retry must not run it
                // again. Its status and headers are stored with a marker in place of the body,
                // which only this caller gets.
                let mut meta = meta_of(&parts, &opts.replay_headers);
                if meta_size(&meta) + BODY_OMITTED.len() + 4 > max {
                    meta = meta_of(&parts, &[]);
                }
                meta.insert(BODY_OMITTED.to_owned(), "true".to_owned());
                Counters::bump(&stats.oversized);
                store(&opts, &lease, held_until, &Bytes::new(), &meta).await;
                parts
                    .headers
                    .insert(NOT_STORED, HeaderValue::from_static("body-omitted"));
                advertise_retention(&opts, &mut parts.headers);
            } else {
                release(&opts, lease, held_until, &stats.oversized).await;
                parts
                    .headers
                    .insert(NOT_STORED, HeaderValue::from_static("false"));
            }
            Ok(HttpResponse::from_parts(parts, body))
        }
        Some(Ran::Error(e)) => {
            release(&opts, lease, held_until, &stats.released).await;
            Err(e)
        }
        Some(Ran::BodyFailed { keep: false }) => {
            release(&opts, lease, held_until, &stats.released).await;
            Ok(problem(
                &opts.problem_docs,
                StatusCode::BAD_GATEWAY,
                "handler-body-failed",
                "the handler's response body failed before its end; the key was released",
            ))
        }
        Some(Ran::BodyFailed { keep: true }) => {
            // The handler said its effect happened: its failure is the key's outcome.
            let status = StatusCode::BAD_GATEWAY;
            let detail = "the handler's response body failed before its end, after its effect; \
                          this answer is stored for every retry";
            let code = "handler-body-failed";
            let (parts, body) = problem_parts(&opts.problem_docs, status, code, detail);
            let meta = meta_of(&parts, &[header::CONTENT_TYPE, header::LINK]);
            store(&opts, &lease, held_until, &body, &meta).await;
            let mut parts = parts;
            advertise_retention(&opts, &mut parts.headers);
            Ok(HttpResponse::from_parts(parts, full(body)))
        }
        None => {
            release(&opts, lease, held_until, &stats.released).await;
            Ok(problem(
                &opts.problem_docs,
                StatusCode::INTERNAL_SERVER_ERROR,
                "handler-panicked",
                "the handler panicked; the key was released and the request may be retried",
            ))
        }
    }
}

/// The header on a response too large to store, sent whole: `false` when the key was released,
/// `body-omitted` when its status and headers were stored without the body.
const NOT_STORED: &str = "idempotent-stored";

/// Says on a stored or replayed answer how long the layer keeps a key's outcome
/// (`Idempotency-Key-Retention`, whole seconds, counted from the key's first request).
fn advertise_retention(opts: &Options, headers: &mut http::HeaderMap) {
    headers.insert(RETENTION, HeaderValue::from(opts.retention.as_secs()));
}

/// Stores the handler's response as the key's outcome and counts it.
async fn store(
    opts: &Options,
    lease: &Lease,
    held_until: Instant,
    bytes: &Bytes,
    meta: &BTreeMap<String, String>,
) {
    // Built per try from the shared bytes (one copy, as a single try needs).
    let response = || Response {
        body: bytes.to_vec(),
        meta: meta.clone(),
    };
    let finished = |l: &LeaseLost| matches!(l, LeaseLost::Finished);
    let stored = persist(held_until, finished, || {
        opts.store.complete(lease, response())
    });
    match stored.await {
        Ok(Ok(())) => Counters::bump(&opts.stats.executed),
        Ok(Err(_)) => Counters::bump(&opts.stats.lease_lost),
        Err(_) => Counters::bump(&opts.stats.store_errors),
    }
}

/// Releases the key for a retry and counts why.
async fn release(
    opts: &Options,
    lease: Lease,
    held_until: Instant,
    why: &crate::telemetry::counters::Count,
) {
    let released = |l: &LeaseLost| matches!(l, LeaseLost::Released);
    let done = persist(held_until, released, || {
        opts.store.fail(&lease, FailKind::Retryable)
    });
    match done.await {
        Ok(Ok(())) => Counters::bump(why),
        Ok(Err(_)) => Counters::bump(&opts.stats.lease_lost),
        Err(_) => Counters::bump(&opts.stats.store_errors),
    }
}

/// Runs a holder's call (`complete`, `fail`) until it gets an answer, while the lease is surely
/// ours: a store that is momentarily unavailable or busy (a database restarting, a connection
/// lost with the answer) is asked again after a pause (20 ms, doubling up to 1 s), so that an
/// effect that ran is recorded and not run again by a retry after the lease. A call asked again
/// may find its own earlier try's change (whose answer was lost): `ours` tells that loss
/// (`Finished` for a completion, `Released` for a release), which then counts as success.
async fn persist<F, Fut>(
    held_until: Instant,
    ours: fn(&LeaseLost) -> bool,
    mut call: F,
) -> Result<crate::record::LeaseResult>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<crate::record::LeaseResult>>,
{
    let mut pause = Duration::from_millis(20);
    let mut asked_before = false;
    loop {
        match call().await {
            Err(e) if e.is_transient() && Instant::now() + pause < held_until => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
                asked_before = true;
            }
            Ok(Err(lost)) if asked_before && ours(&lost) => return Ok(Ok(())),
            other => return other,
        }
    }
}

pub(super) fn refuse(
    opts: &Options,
    status: StatusCode,
    code: &str,
    detail: &str,
) -> HttpResponse<HttpBody> {
    Counters::bump(&opts.stats.refused);
    problem(&opts.problem_docs, status, code, detail)
}

/// The 409 for a duplicate, asked to retry after `secs` seconds (at least 1).
fn in_progress(opts: &Options, secs: u64) -> HttpResponse<HttpBody> {
    let mut resp = problem(
        &opts.problem_docs,
        StatusCode::CONFLICT,
        "idempotency-key-in-progress",
        "a request with this Idempotency-Key is still being processed; retry after the \
         Retry-After delay to get its response",
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    resp
}

fn store_error(opts: &Options, e: &Error) -> HttpResponse<HttpBody> {
    Counters::bump(&opts.stats.store_errors);
    let docs = opts.problem_docs.as_str();
    match e {
        Error::Busy(_) | Error::Contention { .. } => {
            let mut resp = problem(
                docs,
                StatusCode::SERVICE_UNAVAILABLE,
                "idempotency-store-busy",
                "the idempotency store is busy; retry shortly",
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            resp
        }
        Error::Unavailable { .. } => {
            let mut resp = problem(
                docs,
                StatusCode::SERVICE_UNAVAILABLE,
                "idempotency-store-unavailable",
                "the idempotency store's database is unavailable; the request was not \
                 processed: retry shortly",
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
            resp
        }
        Error::InvalidInput(_) => problem(
            docs,
            StatusCode::BAD_REQUEST,
            "idempotency-key-invalid",
            &format!("the idempotency store refused the key: {e}"),
        ),
        _ => problem(
            docs,
            StatusCode::INTERNAL_SERVER_ERROR,
            "idempotency-store-failed",
            "the idempotency store failed; the request was not processed",
        ),
    }
}
