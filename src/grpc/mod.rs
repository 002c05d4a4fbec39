//! gRPC methods made idempotent (feature `grpc`): a tower layer for tonic servers, built on the
//! HTTP layer ([`crate::http`]). Invariant: for one principal and one key, a method runs at most
//! once per stored outcome; every other call with that key gets the stored answer (its message,
//! its status and its trailers), `ABORTED` while the first runs, or `FAILED_PRECONDITION` if it
//! is another request; a call never reads or blocks another principal's key.
//!
//! ```no_run
//! use idemdb::grpc::GrpcIdempotencyLayer;
//!
//! # async fn serve(store: idemdb::Store, routes: tonic::service::Routes) {
//! let layer = GrpcIdempotencyLayer::new(store)
//!     .principal(|req| req.headers.get("x-account")?.to_str().ok().map(str::to_owned));
//! tonic::transport::Server::builder()
//!     .layer(layer)
//!     .add_routes(routes)
//!     .serve("127.0.0.1:50051".parse().unwrap())
//!     .await
//!     .unwrap();
//! # }
//! ```
//!
//! A call is keyed by its `idempotency-key` metadata ([`GrpcIdempotencyLayer::key_header`]),
//! with the same syntax as the HTTP header: a bare token of visible ASCII without `"` `\` `,`
//! `;`, or a structured-field string. Its fingerprint covers the method (the request's path,
//! `/package.Service/Method`), `content-type` and the encoded request message(s), as sent.
//!
//! # Outcomes
//!
//! | the call | its answer |
//! |---|---|
//! | first with its key | the method's answer; stored when its status is final (below) |
//! | a retry after a stored answer | that answer: message, status, trailers, `idempotent-replayed: true` |
//! | a retry while the first runs | `ABORTED`, with `retry-after` (seconds) and `grpc-retry-pushback-ms`; or, with [`WhileRunning::Wait`], the first's answer once it ends |
//! | the same key, another request (method, message or `content-type`) | `FAILED_PRECONDITION` (`idempotency-key-reused`) |
//! | no key, with [`GrpcIdempotencyLayer::require_key`] | `INVALID_ARGUMENT` (`idempotency-key-missing`) |
//! | a malformed key, or a request body that broke off | `INVALID_ARGUMENT` |
//! | no principal | `UNAUTHENTICATED` (`principal-missing`) |
//! | a request larger than `max_request_bytes` | `RESOURCE_EXHAUSTED` (`request-too-large`) |
//! | the store unreachable or busy | `UNAVAILABLE` (the method did not run) |
//! | the store failed, or the method panicked | `INTERNAL` (the key released) |
//! | a stored answer too large to keep, replayed | `INTERNAL`, `idempotent-body-omitted: true` (the method ran) |
//!
//! A refusal's `grpc-message` starts with its code (as in [`crate::http`]'s problem codes).
//! **Stored statuses** (by default): `OK`, `INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`,
//! `PERMISSION_DENIED`, `FAILED_PRECONDITION`, `OUT_OF_RANGE`, `UNIMPLEMENTED`,
//! `UNAUTHENTICATED`; every other status (`UNAVAILABLE`, `INTERNAL`, `ABORTED`, ...) and an
//! answer whose body fails release the key, so a retry runs the method again
//! ([`GrpcIdempotencyLayer::store_code`] changes the rule).
//!
//! Every call the method runs for carries the HTTP layer's [`crate::http::Attempt`] in its
//! extensions (`request.extensions()` in tonic): which attempt of its key this is, and whether
//! its lease was taken over from a holder that vanished (the effect may already have happened).
//!
//! Answers are read whole before they are sent (server-streaming answers too, up to the store's
//! limit): do not put the layer in front of an endless stream. Duplicates wait fleet-wide on
//! PostgreSQL as in the HTTP layer.

mod codes;
mod service;

use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderName, CONTENT_TYPE};
use http::request::Parts;
use http::Method as HttpMethod;
pub use tonic::Code;

use crate::async_store::AsyncStore;
use crate::http::{HttpStats, IdempotencyLayer, WhileRunning};

pub use service::{GrpcBody, GrpcIdempotency, Method};

/// The metadata a call's key is read from by default.
pub(crate) const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// A `tower::Layer` that makes the methods of a tonic server idempotent under the
/// `idempotency-key` metadata. Build it with [`GrpcIdempotencyLayer::new`] and the setters
/// below; each documents its default. See the [module](self) for what each call gets.
#[derive(Clone)]
pub struct GrpcIdempotencyLayer {
    http: IdempotencyLayer,
    key_header: Option<HeaderName>,
    store_code: service::StoreCode,
}

impl GrpcIdempotencyLayer {
    /// A layer over `store` (an embedded [`Store`](crate::Store) or an [`AsyncStore`] of either
    /// backend) with every default: keys optional, one shared principal, the store's lease and
    /// retention, `ABORTED` for a duplicate while the first runs.
    pub fn new(store: impl Into<AsyncStore>) -> Self {
        let http = IdempotencyLayer::new(store)
            .methods([HttpMethod::POST])
            .fingerprint_headers([CONTENT_TYPE])
            .replay_headers([
                CONTENT_TYPE,
                HeaderName::from_static("grpc-encoding"),
                HeaderName::from_static("grpc-status"),
                HeaderName::from_static("grpc-message"),
                HeaderName::from_static("grpc-status-details-bin"),
                service::TRAILER,
            ]);
        GrpcIdempotencyLayer {
            http,
            key_header: None,
            store_code: Arc::new(codes::stored_by_default),
        }
    }

    fn with_http(mut self, f: impl FnOnce(IdempotencyLayer) -> IdempotencyLayer) -> Self {
        self.http = f(self.http);
        self
    }

    /// The metadata a call's key is read from. Default: `idempotency-key`.
    #[must_use]
    pub fn key_header(mut self, name: HeaderName) -> Self {
        self.key_header = (name != IDEMPOTENCY_KEY).then_some(name);
        self
    }

    /// Whether a call without a key is refused with `INVALID_ARGUMENT`. Default: `false` (it
    /// runs, without protection).
    #[must_use]
    pub fn require_key(self, required: bool) -> Self {
        self.with_http(|h| h.require_key(required))
    }

    /// Who is calling: keys are scoped by the principal this function returns (from the
    /// request's head: its metadata, or an extension an authentication layer before this one
    /// set). `None` refuses the call with `UNAUTHENTICATED`. Default: one shared principal, as
    /// [`IdempotencyLayer::principal`].
    #[must_use]
    pub fn principal(self, f: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Self {
        self.with_http(|h| h.principal(f))
    }

    /// Which statuses are stored and replayed; any other releases the key. Default: see the
    /// module's table.
    #[must_use]
    pub fn store_code(mut self, f: impl Fn(Code) -> bool + Send + Sync + 'static) -> Self {
        self.store_code = Arc::new(f);
        self
    }

    /// Response metadata (headers) stored and replayed besides `content-type`, `grpc-encoding`
    /// and the status; trailers are always replayed.
    #[must_use]
    pub fn replay_metadata(self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        let mut all = vec![
            CONTENT_TYPE,
            HeaderName::from_static("grpc-encoding"),
            HeaderName::from_static("grpc-status"),
            HeaderName::from_static("grpc-message"),
            HeaderName::from_static("grpc-status-details-bin"),
            service::TRAILER,
        ];
        all.extend(names);
        self.with_http(|h| h.replay_headers(all))
    }

    /// What a duplicate gets while the first call runs. Default: [`WhileRunning::Reject`]
    /// (`ABORTED` with a retry hint).
    #[must_use]
    pub fn while_running(self, w: WhileRunning) -> Self {
        self.with_http(|h| h.while_running(w))
    }

    /// Whether a key's pending record is written when its call claims it, so that after a crash
    /// of this process the key stays in progress until its lease ends and the next call runs as
    /// a takeover ([`crate::http::Attempt::takeover`] in the request's extensions: the method
    /// checks whether its effect happened); see [`IdempotencyLayer::written_pending`]. Default:
    /// `false`.
    #[must_use]
    pub fn written_pending(self, yes: bool) -> Self {
        self.with_http(|h| h.written_pending(yes))
    }

    /// The method's lease, renewed while it runs. Default: the store's (30 s).
    #[must_use]
    pub fn lease(self, d: Duration) -> Self {
        self.with_http(|h| h.lease(d))
    }

    /// How long a stored answer is replayed. Default: the store's retention (24 h).
    #[must_use]
    pub fn retention(self, d: Duration) -> Self {
        self.with_http(|h| h.retention(d))
    }

    /// The largest request read for the fingerprint; a larger one is `RESOURCE_EXHAUSTED`.
    /// Default: 1 MiB.
    #[must_use]
    pub fn max_request_bytes(self, n: usize) -> Self {
        self.with_http(|h| h.max_request_bytes(n))
    }

    /// The store's tenant of a principal (for `idemdb inspect` and `forget`).
    pub fn tenant_of(&self, principal: &str) -> Option<String> {
        self.http.tenant_of(principal)
    }

    /// The layer's counters since it was built (as [`IdempotencyLayer::stats`]).
    pub fn stats(&self) -> HttpStats {
        self.http.stats()
    }
}

impl<S> tower_layer::Layer<S> for GrpcIdempotencyLayer {
    type Service = GrpcIdempotency<S>;

    fn layer(&self, inner: S) -> GrpcIdempotency<S> {
        let method = Method::new(inner, self.store_code.clone());
        GrpcIdempotency::new(self.http.layer(method), self.key_header.clone())
    }
}
