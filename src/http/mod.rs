//! The HTTP idempotency layer for tower and axum (feature `http`), after the IETF draft "The
//! Idempotency-Key HTTP Header Field" and payment APIs such as Stripe's. Invariant: for one
//! principal and one key, the wrapped handler runs at most once per stored outcome; every other
//! request with that key gets the stored response, a 409 while it runs, or a 422 if its fingerprint
//! differs, and a request never reads or blocks another principal's key.
//!
//! ```no_run
//! use axum::{routing::post, Router};
//! use idemdb::http::IdempotencyLayer;
//!
//! # async fn serve(store: idemdb::Store) {
//! let app: Router = Router::new()
//!     .route("/payments", post(|| async { (axum::http::StatusCode::CREATED, "charged") }))
//!     .layer(
//!         IdempotencyLayer::new(store)
//!             .require_key(true)
//!             .principal(|req| {
//!                 req.headers.get("authorization")?.to_str().ok().map(str::to_owned)
//!             }),
//!     );
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! axum::serve(listener, app).await.unwrap();
//! # }
//! ```
//!
//! # Problem codes
//!
//! Every refusal the layer makes itself is an RFC 9457 `application/problem+json` document with
//! `type`, `title`, `status`, a stable machine-readable `code` (one of those below) and a `detail`
//! saying what to change. Its `type` is the documentation base followed by the code (by default
//! this page, so that `type` points at the code's entry below; see
//! [`IdempotencyLayer::problem_type_base`]), and the response carries the same URI in
//! `Link: <type>; rel="help"`. Responses of the handler itself pass through unchanged.
//!
//! ### `idempotency-key-missing`
//! **400 Bad Request.** The method is one the layer applies to, `require_key(true)` is set, and
//! the request has no `Idempotency-Key` header. Send one: a unique value per operation, the same
//! on every retry of it.
//!
//! ### `idempotency-key-invalid`
//! **400 Bad Request.** The `Idempotency-Key` header was sent more than once, is empty, is longer
//! than the layer's `max_key_len`, or is neither a structured-field string (`"abc"`, escapes `\"`
//! and `\\` only) nor a bare token of visible ASCII without `"` `\` `,` `;` (the `detail` says
//! which). Also sent if the store refuses the key.
//!
//! ### `request-body-unreadable`
//! **400 Bad Request.** The request body failed before its end, so it could not be fingerprinted;
//! the handler did not run.
//!
//! ### `principal-missing`
//! **401 Unauthorized.** The principal function returned no principal (or an empty one) for this
//! request: keys are scoped by the caller, so an anonymous request cannot use one.
//!
//! ### `request-too-large`
//! **413 Content Too Large.** The request body is larger than `max_request_bytes` (1 MiB by
//! default), the most the layer reads to fingerprint it.
//!
//! ### `idempotency-key-reused`
//! **422 Unprocessable Content.** This key was already used by the same principal with a different
//! request (method, path, query, body or a fingerprinted header). Nothing was run or changed; use a
//! new key for a new operation.
//!
//! ### `idempotency-key-in-progress`
//! **409 Conflict.** A request with this key is still being processed. Retry after the
//! `Retry-After` delay (see [`WhileRunning::Reject`] for how it is chosen) to get its response.
//!
//! ### `idempotency-store-busy`
//! **503 Service Unavailable**, with `Retry-After: 1`. The idempotency store is momentarily busy;
//! the request was not processed.
//!
//! ### `idempotency-store-unavailable`
//! **503 Service Unavailable**, with `Retry-After: 2`. The idempotency store's database could not
//! be reached or did not answer in time ([`crate::Error::Unavailable`]); the request was not
//! processed.
//!
//! ### `idempotency-store-failed`
//! **500 Internal Server Error.** The idempotency store failed; the request was not processed.
//!
//! ### `principal-unstorable`
//! **500 Internal Server Error.** The principal does not fit the store's tenant limit and the limit
//! (`max_tenant_len` below 33 bytes) leaves no room for its hash (see
//! [`IdempotencyLayer::principal`]); a configuration error, the request was not processed.
//!
//! ### `webhook-signature-invalid`
//! **401 Unauthorized.** A [`WebhookLayer`] endpoint received a delivery whose signature did
//! not verify: a header of the scheme missing or sent twice, a malformed signature or timestamp,
//! no signature made by one of the endpoint's secrets over this body, or a signed timestamp
//! further from the server's clock than the tolerance (the `detail` says which). Nothing was
//! stored and the handler did not run. A provider retries it; check the endpoint's secret.
//!
//! ### `webhook-event-id-invalid`
//! **400 Bad Request.** A [`WebhookLayer`] delivery verified, but its event id is longer than
//! the layer's `max_key_len` or holds a byte outside visible ASCII, so it cannot be its key.
//! Nothing was stored and the handler did not run.
//!
//! ### `handler-panicked`
//! **500 Internal Server Error.** The handler panicked; the key was released, so the request may
//! be retried.
//!
//! ### `handler-body-failed`
//! **502 Bad Gateway.** The handler's response body failed before its end; the key was released,
//! so the request may be retried (unless the response carried [`StoreOverride::Store`]: then
//! this answer is stored as the key's outcome and replayed to every retry).
//!
//! ## Answers of `idemdb proxy`
//!
//! The proxy (the `idemdb` binary, feature `proxy`) answers these itself, in the same format.
//!
//! ### `upstream-unreachable`
//! **502 Bad Gateway.** No connection to the upstream could be made, so the request was not
//! sent; its key was released. Retry later.
//!
//! ### `upstream-outcome-unknown`
//! **502 Bad Gateway.** The request reached the upstream and no whole answer came back (the
//! connection was lost, the proxy shut down, or a proxy holding the key died and its lease was
//! taken over): the upstream may have acted. On a route with `on-unknown=fail` (the default) this
//! answer is stored for the key and replayed to every retry, so the request is never sent twice;
//! an operator who has checked the upstream can `idemdb forget` the key. With
//! `on-unknown=release` the key was released.
//!
//! ### `upstream-timeout`
//! **504 Gateway Timeout.** The upstream did not answer within the proxy's `--upstream-timeout`;
//! it may still act. Stored or released as `upstream-outcome-unknown` is.
//!
//! ### `proxy-request-invalid`
//! **400 Bad Request.** The request's path could not be sent on to the upstream.
//!
//! ### `principal-unverified`
//! **401 Unauthorized**, with `WWW-Authenticate: Bearer error="invalid_token"`. The route scopes
//! keys by a JWT's subject (`principal=jwt-sub:NAME`) and the token did not verify under the
//! route's keys: a bad or missing signature, an algorithm the key does not allow (`none` never),
//! `exp` passed or `nbf` to come (beyond the leeway), no `sub`, or an `iss`/`aud` the route does
//! not accept (the `detail` says which). Nothing was stored or forwarded. Send a valid token.
//!
//! ### `principal-ambiguous`
//! **400 Bad Request.** A header the route's key scope is read from (the principal's, or one of
//! `scope-headers`) was sent more than once. Nothing was stored or forwarded. Send it once.
//!
//! # What the handler sees and can decide
//!
//! - Every request the handler runs for carries an [`Attempt`] in its extensions: which attempt
//!   of the key this is and whether its lease was taken over from a holder that vanished (a
//!   crashed process: the effect may already have happened).
//! - A response may carry a [`StoreOverride`] in its extensions, which decides for that response
//!   whether it is stored or releases the key, whatever its status.
//! - A response too large for the store is sent to its client whole. If its status is one the
//!   layer stores (or it carries [`StoreOverride::Store`]), its status and headers are stored
//!   without the body and it carries `Idempotent-Stored: body-omitted`: a retry replays them with
//!   an empty body and `Idempotent-Body-Omitted: true`, and the handler does not run again.
//!   Otherwise the key is released and it carries `Idempotent-Stored: false`.
//!
//! # Headers on answers
//!
//! - `Idempotent-Replayed: true` and `Idempotency-Replayed: true` on every replayed answer (the
//!   first is Stripe's spelling, the second the one of the IETF draft's discussion).
//! - `Idempotency-Key-Retention: <seconds>` on stored and replayed answers: how long the layer
//!   keeps a key's outcome ([`IdempotencyLayer::retention`]), counted from its first request.

mod body;
mod estimate;
mod key;
pub(crate) mod problem;
mod service;
mod signature;
mod stored;
mod tenant;
mod webhook;

use crate::telemetry::counters::Count;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{header, HeaderName, Method, StatusCode};

use crate::async_store::AsyncStore;

pub use body::{BoxError, HttpBody};

/// An empty body, for a layer above that answers in its own protocol (the gRPC layer).
#[cfg(feature = "grpc")]
pub(crate) fn empty_body() -> HttpBody {
    body::full(bytes::Bytes::new())
}
pub use service::Idempotency;
pub use webhook::{Webhook, WebhookError, WebhookLayer, WebhookScheme, WebhookSecrets};

/// In the extensions of every request the wrapped handler runs for: which attempt of its key
/// this is. A handler that must not repeat an effect after a crash checks
/// [`Attempt::takeover`]: the previous holder's lease ran out without an outcome (its process
/// died or hung), so its effect may or may not have happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// 1 for the first attempt, then one more per release (a 5xx, by default) or takeover.
    pub number: u32,
    /// Whether this lease was taken over from a holder whose lease expired.
    pub takeover: bool,
    /// The lease's fencing token (increases with every acquisition of the key).
    pub fence: u64,
}

/// Put in a response's extensions by the handler, to decide for this response whether the layer
/// stores it or releases the key, whatever [`IdempotencyLayer::store_status`] says of its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreOverride {
    /// Store the response and replay it to every retry. Also: if its body fails before its end,
    /// store a 502 (`handler-body-failed`) as the key's outcome instead of releasing the key
    /// (the handler has said its effect happened, so a retry must not run it again).
    Store,
    /// Release the key: a retry runs the handler again.
    Release,
}

type PrincipalFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;
type StatusFn = dyn Fn(StatusCode) -> bool + Send + Sync;

/// What a request gets while another request with the same key is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WhileRunning {
    /// `409 Conflict` with `Retry-After` (the default, as the IETF draft and Stripe do).
    ///
    /// `Retry-After` (whole seconds) follows how long such requests take: the layer keeps a moving
    /// average of handler durations (each new duration weighs a quarter) per route, a route being
    /// the request's method and path, for up to 1,024 routes; requests of other routes, and of a
    /// route none of whose requests has finished yet, use the average over every route. The
    /// delay is that estimate minus the time since the running request's lease was last taken or
    /// renewed (the layer's lease minus the lease remaining), rounded up to whole seconds, at least
    /// 1 and at most the remaining lease rounded up; 1 when no handler has finished yet. A 50 ms
    /// handler's duplicate thus gets `Retry-After: 1`, not the 30 s lease.
    Reject,
    /// Wait up to this long for the first request to finish and replay its response; 409 after.
    /// The claim waits in the store ([`crate::ClaimOptions::wait`]): it is woken when the first
    /// request's lease ends, in this process or, on PostgreSQL, in any instance of the fleet (by
    /// `LISTEN/NOTIFY`, no polling); if the first request's key is released (a 5xx), the waiting
    /// duplicate runs the handler itself. For a wait per route, give each route its own layer
    /// (axum's `route_layer`).
    Wait(Duration),
}

/// A `tower::Layer` that makes the wrapped service idempotent under the `Idempotency-Key` header.
/// Build it with [`IdempotencyLayer::new`] and the setters below; each documents its default.
///
/// Requests must carry a body type that can be rebuilt from bytes (`From<Bytes>`, as axum's
/// `Body` and `Full<Bytes>` are): the layer reads the body to fingerprint it. Responses are
/// returned with the boxed [`HttpBody`]. The service must run inside a tokio runtime: a request
/// whose client disconnects hands its unfinished handler to the runtime, so that its key is never
/// left in progress. Response bodies are read before the response is sent (up to the store's
/// limit, past which they are streamed unstored): do not put the layer in front of an endless
/// stream such as server-sent events.
#[derive(Clone)]
pub struct IdempotencyLayer {
    pub(crate) opts: Arc<Options>,
}

#[derive(Clone)]
pub(crate) struct Options {
    pub(crate) store: AsyncStore,
    pub(crate) methods: Vec<Method>,
    pub(crate) require_key: bool,
    pub(crate) max_key_len: usize,
    pub(crate) principal: Arc<PrincipalFn>,
    pub(crate) fingerprint_headers: Vec<HeaderName>,
    pub(crate) replay_headers: Vec<HeaderName>,
    pub(crate) while_running: WhileRunning,
    pub(crate) store_status: Arc<StatusFn>,
    pub(crate) max_request_bytes: usize,
    pub(crate) written_pending: bool,
    pub(crate) lease: Duration,
    pub(crate) retention: Duration,
    pub(crate) problem_docs: String,
    pub(crate) durations: Arc<estimate::Durations>,
    pub(crate) stats: Arc<Counters>,
    /// Counts the releases of leases acquired for a client that had gone away.
    pub(crate) on_release: crate::async_store::OnRelease,
}

impl IdempotencyLayer {
    /// A layer over `store` with every default (see each setter): an embedded
    /// [`Store`](crate::Store) or an [`AsyncStore`] on either backend (a fleet's instances share
    /// one store on PostgreSQL). The layer behaves the same on both; on PostgreSQL, an
    /// unreachable database answers 503 (`idempotency-store-unavailable`) and the handler does
    /// not run.
    pub fn new(store: impl Into<AsyncStore>) -> Self {
        let store = store.into();
        let stats = Arc::new(Counters::default());
        let lease = store.common().lease;
        let retention = store.common().retention;
        let max_key_len = store.common().max_key_len;
        IdempotencyLayer {
            opts: Arc::new(Options {
                store,
                methods: vec![Method::POST, Method::PATCH],
                require_key: false,
                max_key_len,
                principal: Arc::new(|_| Some("anonymous".to_owned())),
                fingerprint_headers: vec![header::CONTENT_TYPE],
                replay_headers: vec![
                    header::CONTENT_TYPE,
                    header::CONTENT_ENCODING,
                    header::LOCATION,
                    header::ETAG,
                    header::CONTENT_LOCATION,
                    header::LAST_MODIFIED,
                ],
                while_running: WhileRunning::Reject,
                store_status: Arc::new(|s: StatusCode| s.as_u16() < 500),
                max_request_bytes: 1 << 20,
                written_pending: false,
                lease,
                retention,
                problem_docs: problem::DEFAULT_DOCS.to_owned(),
                durations: Arc::new(estimate::Durations::default()),
                on_release: service::release_counter(&stats),
                stats,
            }),
        }
    }

    fn with(mut self, f: impl FnOnce(&mut Options)) -> Self {
        f(Arc::make_mut(&mut self.opts));
        self
    }

    /// The methods the layer applies to; others pass through untouched. Default: POST and PATCH.
    #[must_use]
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods = methods.into_iter().collect();
        self.with(|o| o.methods = methods)
    }

    /// Whether a request without `Idempotency-Key` is refused with 400. Default: `false` (such a
    /// request passes through, without protection).
    #[must_use]
    pub fn require_key(self, required: bool) -> Self {
        self.with(|o| o.require_key = required)
    }

    /// The longest key accepted, in bytes. Default and ceiling: the store's `max_key_len` (255).
    #[must_use]
    pub fn max_key_len(self, n: usize) -> Self {
        self.with(|o| o.max_key_len = n.min(o.store.common().max_key_len))
    }

    /// Who is asking: every key is scoped by the principal (account, tenant, API key id) this
    /// function returns, so one principal can never replay, block or probe another's response.
    /// `None` (or an empty string) refuses the request with 401 (`principal-missing`).
    /// Default: one shared principal, `"anonymous"`: set this in any service with more than one
    /// caller.
    ///
    /// The store's tenant of a principal (see [`IdempotencyLayer::tenant_of`]) is one tag byte
    /// followed by either the principal or its hash, so that no principal can ever spell another's
    /// tenant:
    /// - `p` + the principal's bytes, when that fits the store's `max_tenant_len` (64 bytes by
    ///   default, so principals of up to 63 bytes);
    /// - otherwise `h` + the first `min(64, max_tenant_len - 1)` hex digits of
    ///   [`crate::derive_key`]`(&[principal.as_bytes()])` (its SHA-256; 63 digits by default).
    ///
    /// A store whose `max_tenant_len` is below 33 has no room for 32 hex digits: a principal too
    /// long for it literally is refused with 500 (`principal-unstorable`).
    ///
    /// Stores written by versions before this scheme kept a principal as the tenant itself (or its
    /// 64-digit hash when longer than the limit): their stored responses are not found under the
    /// new tenants, so a retry of a request made before the upgrade runs its handler again.
    #[must_use]
    pub fn principal(self, f: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Self {
        self.with(|o| o.principal = Arc::new(f))
    }

    /// The request headers that are part of the fingerprint, besides the method, path, query and
    /// body. Default: `Content-Type`.
    #[must_use]
    pub fn fingerprint_headers(self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        let names = names.into_iter().collect();
        self.with(|o| o.fingerprint_headers = names)
    }

    /// The response headers stored and replayed. `Set-Cookie` is never stored, even if listed.
    /// Default: `Content-Type`, `Content-Encoding` (the body is stored as sent, so a compressed
    /// body replays with its encoding), `Location`, `ETag`, `Content-Location`, `Last-Modified`.
    /// Only values of visible ASCII (and tab) are stored: a value with any other byte is left out
    /// of the replay without an error, and so is the header if none of its values is left.
    #[must_use]
    pub fn replay_headers(self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        let names = names
            .into_iter()
            .filter(|n| *n != header::SET_COOKIE)
            .collect();
        self.with(|o| o.replay_headers = names)
    }

    /// What a duplicate gets while the first request runs. Default: [`WhileRunning::Reject`] (409
    /// with a `Retry-After` estimated from how long the route's handlers take).
    #[must_use]
    pub fn while_running(self, w: WhileRunning) -> Self {
        self.with(|o| o.while_running = w)
    }

    /// Which response statuses are stored and replayed; any other releases the key so that a
    /// retry runs the handler again. Default: every status below 500 (2xx, 3xx and 4xx are stored,
    /// 5xx releases), as most payment APIs do.
    #[must_use]
    pub fn store_status(self, f: impl Fn(StatusCode) -> bool + Send + Sync + 'static) -> Self {
        self.with(|o| o.store_status = Arc::new(f))
    }

    /// The largest request body read for the fingerprint; a larger one gets 413. Default: 1 MiB.
    #[must_use]
    pub fn max_request_bytes(self, n: usize) -> Self {
        self.with(|o| o.max_request_bytes = n)
    }

    /// Whether a key's pending record is written to the store when its claim acquires it
    /// ([`crate::ClaimOptions::written_pending`]: without a sync of its own), so that after a
    /// crash of this process the key stays in progress until its lease ends and the next holder
    /// sees [`Attempt::takeover`]. Without it, an embedded store keeps pending records in memory:
    /// a crash of the process forgets them and a retry runs the handler as a first attempt. A
    /// crash of the machine forgets an unsynced pending record either way. PostgreSQL always
    /// writes it. Default: `false`.
    #[must_use]
    pub fn written_pending(self, yes: bool) -> Self {
        self.with(|o| o.written_pending = yes)
    }

    /// The handler's lease, renewed every third of it while the handler runs. Default: the
    /// store's lease (30 s).
    #[must_use]
    pub fn lease(self, d: Duration) -> Self {
        self.with(|o| o.lease = d)
    }

    /// How long a stored response is replayed. Default: the store's retention (24 h).
    #[must_use]
    pub fn retention(self, d: Duration) -> Self {
        self.with(|o| o.retention = d)
    }

    /// Where problem documents point for their documentation: a problem's `type` is this base
    /// followed by its code, and the same URI is sent in `Link: <uri>; rel="help"`, on every
    /// problem response the layer makes (400, 401, 409, 413, 422, 500, 502, 503; see
    /// [Problem codes](crate::http#problem-codes)). Give a base that ends where the code goes, for
    /// example `https://api.example.com/docs/errors#`. The `Link` header is left out when the URI
    /// holds a byte outside visible ASCII or `<` `>`. An empty base gives `type: "about:blank"`
    /// and no `Link`. Default: this version's module documentation on docs.rs,
    /// `https://docs.rs/idemdb/<version>/idemdb/http/index.html#`, whose "Problem codes" section
    /// has an anchor per code.
    #[must_use]
    pub fn problem_type_base(self, base: impl Into<String>) -> Self {
        let base = base.into();
        self.with(|o| o.problem_docs = base)
    }

    /// The store tenant under which this layer keeps `principal`'s keys (see
    /// [`IdempotencyLayer::principal`]), for example to inspect or forget a record with the
    /// `idemdb` command; `None` for an empty principal or one the store cannot hold.
    pub fn tenant_of(&self, principal: &str) -> Option<String> {
        tenant::tenant_of(principal, self.opts.store.common().max_tenant_len).ok()
    }

    /// What the layer has done so far (shared by every service this layer built).
    pub fn stats(&self) -> HttpStats {
        self.opts.stats.snapshot()
    }

    /// A problem response in this layer's format (RFC 9457 `application/problem+json` with a
    /// `code`, its `type` and `Link` from [`IdempotencyLayer::problem_type_base`]), for refusals
    /// a handler makes itself.
    pub fn problem(
        &self,
        status: StatusCode,
        code: &str,
        detail: &str,
    ) -> http::Response<HttpBody> {
        problem::problem(&self.opts.problem_docs, status, code, detail)
    }
}

impl<S> tower_layer::Layer<S> for IdempotencyLayer {
    type Service = Idempotency<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency::new(inner, self.opts.clone())
    }
}

/// What the layer did, counted since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpStats {
    /// Requests passed through untouched (another method, or no key where none is required).
    pub passed_through: u64,
    /// Requests whose handler ran and whose response was stored.
    pub executed: u64,
    /// Requests answered from a stored response.
    pub replayed: u64,
    /// Duplicates refused with 409 while the first ran.
    pub in_progress: u64,
    /// Keys reused with a different request (422).
    pub mismatched: u64,
    /// Requests refused for their key, principal or body (400, 401, 413).
    pub refused: u64,
    /// Handlers whose status released the key (5xx by default), or that failed or panicked.
    pub released: u64,
    /// Responses larger than the store's limit, served whole: stored without their body when
    /// their status is stored (a retry replays the status and headers), else the key released.
    pub oversized: u64,
    /// Handlers whose lease was lost before their response could be stored.
    pub lease_lost: u64,
    /// Store errors (answered 503 or 500; the handler never ran for a failed claim).
    pub store_errors: u64,
    /// Keys acquired for a client that had gone away before the claim answered (a synced store
    /// claims on the blocking pool): released at once, the handler never ran.
    pub abandoned: u64,
}

/// The layer's outcome counters: each also counts `idemdb_http_requests_total{outcome}` in the
/// `metrics` facade (feature `metrics`) and names the outcome in the request's span.
pub(crate) struct Counters {
    pub(crate) passed_through: Count,
    pub(crate) executed: Count,
    pub(crate) replayed: Count,
    pub(crate) in_progress: Count,
    pub(crate) mismatched: Count,
    pub(crate) refused: Count,
    pub(crate) released: Count,
    pub(crate) oversized: Count,
    pub(crate) lease_lost: Count,
    pub(crate) store_errors: Count,
    pub(crate) abandoned: Count,
}

impl Default for Counters {
    fn default() -> Self {
        const M: &str = "idemdb_http_requests_total";
        Counters {
            passed_through: Count::new(M, &[("outcome", "passed_through")]),
            executed: Count::new(M, &[("outcome", "executed")]),
            replayed: Count::new(M, &[("outcome", "replayed")]),
            in_progress: Count::new(M, &[("outcome", "in_progress")]),
            mismatched: Count::new(M, &[("outcome", "mismatched")]),
            refused: Count::new(M, &[("outcome", "refused")]),
            released: Count::new(M, &[("outcome", "released")]),
            oversized: Count::new(M, &[("outcome", "oversized")]),
            lease_lost: Count::new(M, &[("outcome", "lease_lost")]),
            store_errors: Count::new(M, &[("outcome", "store_errors")]),
            abandoned: Count::new(M, &[("outcome", "abandoned")]),
        }
    }
}

impl Counters {
    /// Counts one outcome, and names it in the current request's span.
    pub(crate) fn bump(c: &Count) {
        c.add(1);
        tracing::Span::current().record("outcome", c.label());
    }

    fn snapshot(&self) -> HttpStats {
        let g = Count::load;
        HttpStats {
            passed_through: g(&self.passed_through),
            executed: g(&self.executed),
            replayed: g(&self.replayed),
            in_progress: g(&self.in_progress),
            mismatched: g(&self.mismatched),
            refused: g(&self.refused),
            released: g(&self.released),
            oversized: g(&self.oversized),
            lease_lost: g(&self.lease_lost),
            store_errors: g(&self.store_errors),
            abandoned: g(&self.abandoned),
        }
    }
}
