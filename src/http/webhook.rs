//! Signed webhooks received once: a `tower::Layer` for an endpoint a provider delivers events to,
//! at least once. Invariant: a delivery reaches the store only after its signature verifies
//! (`signature.rs`), so a forged, tampered or stale delivery stores nothing and runs nothing;
//! its event id is the key, under the endpoint's tenant (`tenant::webhook_tenant`, which no
//! principal can spell); the handler runs at most once per stored outcome; only a 2xx answer is
//! stored (and replayed to every redelivery), anything else releases the key so that the
//! provider's retry runs the handler again.

use std::fmt;
use std::future::Future;
use std::ops::ControlFlow::{Break, Continue};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, Response as HttpResponse, StatusCode};
use http_body::Body;
use parking_lot::RwLock;

use super::body::{BoxError, HttpBody};
use super::service::{read_request_body, refuse, serve_keyed, Reply};
use super::signature::{self, BadSecret, Key};
use super::tenant::webhook_tenant;
use super::{HttpStats, IdempotencyLayer, Options, WhileRunning};
use crate::async_store::AsyncStore;

pub use super::signature::WebhookScheme;

/// An endpoint's signing secrets: one, or several while a secret is rotated (a delivery signed
/// by any of them verifies). Read from the code, a file or the environment; never printed (its
/// `Debug` shows only how many there are) and never logged.
#[derive(Clone)]
pub struct WebhookSecrets(Vec<String>);

impl fmt::Debug for WebhookSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WebhookSecrets({} redacted)", self.0.len())
    }
}

impl WebhookSecrets {
    /// The secrets as given, each as the provider shows it (`whsec_...` for Standard Webhooks
    /// and Stripe; GitHub's as typed in the webhook's settings).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        WebhookSecrets(secrets.into_iter().map(Into::into).collect())
    }

    /// One secret per line of the file (blank lines and a line's surrounding whitespace are
    /// left out). An unreadable file is a [`WebhookError::Read`]; one without a secret, a
    /// [`WebhookError::NoSecret`] when the layer is built.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, WebhookError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| WebhookError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self::lines(&text))
    }

    /// One secret per line of the environment variable `var` (so several while rotating). An
    /// unset or non-UTF-8 variable is a [`WebhookError::Env`].
    pub fn from_env(var: &str) -> Result<Self, WebhookError> {
        let text = std::env::var(var).map_err(|source| WebhookError::Env {
            var: var.to_owned(),
            source,
        })?;
        Ok(Self::lines(&text))
    }

    fn lines(text: &str) -> Self {
        WebhookSecrets(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }
}

/// Why a [`WebhookLayer`] cannot be built: a configuration error, never a secret's value.
#[derive(Debug)]
#[non_exhaustive]
pub enum WebhookError {
    /// The secrets' file could not be read.
    Read {
        /// The file named.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The secrets' environment variable is unset or not UTF-8.
    Env {
        /// The variable named.
        var: String,
        /// Unset, or not UTF-8.
        source: std::env::VarError,
    },
    /// No secret was given (or the file or variable held only blank lines).
    NoSecret,
    /// The secret at this position (0-based) is not one of the scheme's: empty, or, for Standard
    /// Webhooks, not `whsec_` followed by base64.
    BadSecret {
        /// Its position among the secrets, from 0.
        position: usize,
        /// The scheme it was meant for.
        scheme: WebhookScheme,
    },
    /// The endpoint's name is empty, longer than 200 bytes, or holds a byte outside visible
    /// ASCII.
    EndpointName {
        /// The name given.
        name: String,
    },
    /// The store's tenant limit (`max_tenant_len` below 34) leaves no room for the endpoint's
    /// tenant.
    TenantLimit {
        /// The store's limit.
        max_tenant_len: usize,
    },
}

impl fmt::Display for WebhookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WebhookError::Read { path, .. } => {
                write!(f, "cannot read the webhook secrets file {}", path.display())
            }
            WebhookError::Env { var, .. } => write!(
                f,
                "the webhook secrets variable {var} is unset or not UTF-8; set it to the \
                 endpoint's secret (one per line while rotating)"
            ),
            WebhookError::NoSecret => f.write_str(
                "no webhook secret was given: give the endpoint's signing secret (one per line)",
            ),
            WebhookError::BadSecret { position, scheme } => write!(
                f,
                "webhook secret #{} is not a {} secret{}",
                position + 1,
                scheme.name(),
                match scheme {
                    WebhookScheme::StandardWebhooks => " (`whsec_` followed by base64)",
                    _ => " (it is empty)",
                }
            ),
            WebhookError::EndpointName { name } => write!(
                f,
                "the webhook endpoint name {name:?} must be 1 to 200 bytes of visible ASCII"
            ),
            WebhookError::TenantLimit { max_tenant_len } => write!(
                f,
                "the store's max_tenant_len ({max_tenant_len}) leaves no room for a webhook \
                 endpoint's tenant; use at least 34"
            ),
        }
    }
}

impl std::error::Error for WebhookError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WebhookError::Read { source, .. } => Some(source),
            WebhookError::Env { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// What every delivery to the endpoint is checked against.
struct Verifier {
    scheme: WebhookScheme,
    /// Shared by the layer, its copies and every service they made: [`WebhookLayer::set_secrets`]
    /// replaces the set for all of them at once.
    keys: Arc<RwLock<Arc<Vec<Key>>>>,
    tolerance: Duration,
    tenant: String,
}

/// The keys of `secrets` under `scheme`: at least one, each usable, or why not.
fn keys_of(scheme: WebhookScheme, secrets: &WebhookSecrets) -> Result<Vec<Key>, WebhookError> {
    if secrets.0.is_empty() {
        return Err(WebhookError::NoSecret);
    }
    secrets
        .0
        .iter()
        .enumerate()
        .map(|(position, s)| {
            signature::key_of(scheme, s).map_err(|(BadSecret::Empty | BadSecret::NotBase64)| {
                WebhookError::BadSecret { position, scheme }
            })
        })
        .collect()
}

/// A `tower::Layer` that receives an endpoint's signed webhook deliveries exactly once: the
/// signature is verified before anything is claimed or stored (401 `webhook-signature-invalid`
/// otherwise), the event id is the idempotency key, scoped by the endpoint, and a redelivered
/// event gets the stored 2xx answer without reaching the handler. Built with
/// [`WebhookLayer::new`]; runs on an embedded store or PostgreSQL alike, as
/// [`IdempotencyLayer`] does (a fleet's instances share one store, so a redelivery to another
/// instance is answered too).
///
/// What a delivery gets:
/// - a bad, missing or stale signature: 401 `webhook-signature-invalid`; nothing stored;
/// - a verified event seen for the first time: the handler's answer. A 2xx is stored for the
///   retention; any other status (or a handler error or panic) releases the key, so the
///   provider's retry runs the handler again;
/// - a redelivery of an event whose 2xx is stored: that answer, with `Idempotent-Replayed: true`;
/// - a redelivery while the first is still running: 409 with `Retry-After` (the provider retries
///   later and then gets the stored answer), or, with [`WebhookLayer::while_running`] set to
///   [`WhileRunning::Wait`], the first one's answer once it ends;
/// - the same event id with a different body: 422 `idempotency-key-reused`.
///
/// ```no_run
/// use axum::{routing::post, Router};
/// use idemdb::http::{WebhookLayer, WebhookScheme, WebhookSecrets};
///
/// # async fn serve(store: idemdb::Store) -> Result<(), Box<dyn std::error::Error>> {
/// let stripe = WebhookLayer::new(
///     store,
///     WebhookScheme::Stripe,
///     "payments",
///     WebhookSecrets::from_env("STRIPE_WEBHOOK_SECRET")?,
/// )?;
/// let app: Router = Router::new()
///     .route("/webhooks/stripe", post(|_body: String| async move { "ok" }))
///     .layer(stripe);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct WebhookLayer {
    layer: IdempotencyLayer,
    verifier: Arc<Verifier>,
}

impl fmt::Debug for WebhookLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookLayer")
            .field("scheme", &self.verifier.scheme)
            .field("tenant", &self.verifier.tenant)
            .field("secrets", &self.verifier.keys.read().len())
            .field("tolerance", &self.verifier.tolerance)
            .finish()
    }
}

impl WebhookLayer {
    /// A layer for one endpoint: deliveries signed under `scheme` by one of `secrets`, whose
    /// events are kept under the endpoint `name` (its scope: two endpoints never share an event
    /// id, nor does any [`IdempotencyLayer`] principal). Defaults: a timestamp tolerance of 5
    /// minutes either way (the schemes' own), the store's lease and retention, 1 MiB bodies,
    /// [`WhileRunning::Reject`].
    pub fn new(
        store: impl Into<AsyncStore>,
        scheme: WebhookScheme,
        name: &str,
        secrets: WebhookSecrets,
    ) -> Result<Self, WebhookError> {
        if name.is_empty() || name.len() > 200 || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(WebhookError::EndpointName {
                name: name.to_owned(),
            });
        }
        let keys = Arc::new(RwLock::new(Arc::new(keys_of(scheme, &secrets)?)));
        let store = store.into();
        let max_tenant_len = store.common().max_tenant_len;
        let tenant = webhook_tenant(scheme.name(), name, max_tenant_len)
            .ok_or(WebhookError::TenantLimit { max_tenant_len })?;
        let layer = IdempotencyLayer::new(store).store_status(|s| s.is_success());
        Ok(WebhookLayer {
            layer,
            verifier: Arc::new(Verifier {
                scheme,
                keys,
                tolerance: Duration::from_secs(300),
                tenant,
            }),
        })
    }

    fn verifier(mut self, f: impl FnOnce(&mut Verifier)) -> Self {
        if let Some(v) = Arc::get_mut(&mut self.verifier) {
            f(v);
        } else {
            let mut v = Verifier {
                scheme: self.verifier.scheme,
                keys: self.verifier.keys.clone(),
                tolerance: self.verifier.tolerance,
                tenant: self.verifier.tenant.clone(),
            };
            f(&mut v);
            self.verifier = Arc::new(v);
        }
        self
    }

    /// Replaces the endpoint's secrets, for this layer and every service it made, from the next
    /// delivery on (a secret rotated without a restart: list the new one beside the old while
    /// the provider switches, then the new one alone). Secrets that cannot be used (none, or one
    /// that is not valid under the scheme) are refused with the error [`WebhookLayer::new`]
    /// gives, and the secrets in use stay as they were.
    pub fn set_secrets(&self, secrets: WebhookSecrets) -> Result<(), WebhookError> {
        let keys = keys_of(self.verifier.scheme, &secrets)?;
        *self.verifier.keys.write() = Arc::new(keys);
        Ok(())
    }

    /// How far a signed timestamp may be from this server's clock, either way, before the
    /// delivery is refused as stale (a replay of a captured delivery). Default: 5 minutes.
    /// GitHub signs no timestamp: this does not apply to it.
    #[must_use]
    pub fn tolerance(self, d: Duration) -> Self {
        self.verifier(|v| v.tolerance = d)
    }

    /// What a redelivery gets while the first delivery of its event runs; see
    /// [`IdempotencyLayer::while_running`].
    #[must_use]
    pub fn while_running(mut self, w: WhileRunning) -> Self {
        self.layer = self.layer.while_running(w);
        self
    }

    /// The handler's lease; see [`IdempotencyLayer::lease`].
    #[must_use]
    pub fn lease(mut self, d: Duration) -> Self {
        self.layer = self.layer.lease(d);
        self
    }

    /// How long an event's stored answer is replayed to its redeliveries (set it at least as
    /// long as the provider retries: 3 days for Stripe and Standard Webhooks' usual schedules);
    /// see [`IdempotencyLayer::retention`].
    #[must_use]
    pub fn retention(mut self, d: Duration) -> Self {
        self.layer = self.layer.retention(d);
        self
    }

    /// The largest delivery body read (413 past it); see
    /// [`IdempotencyLayer::max_request_bytes`].
    #[must_use]
    pub fn max_request_bytes(mut self, n: usize) -> Self {
        self.layer = self.layer.max_request_bytes(n);
        self
    }

    /// Whether an event's pending record is written when its delivery claims it, so that after
    /// a crash of this process a redelivery waits for the lease to end and its handler sees
    /// [`super::Attempt::takeover`]; see [`IdempotencyLayer::written_pending`].
    #[must_use]
    pub fn written_pending(mut self, yes: bool) -> Self {
        self.layer = self.layer.written_pending(yes);
        self
    }

    /// Where problem documents point; see [`IdempotencyLayer::problem_type_base`].
    #[must_use]
    pub fn problem_type_base(mut self, base: impl Into<String>) -> Self {
        self.layer = self.layer.problem_type_base(base);
        self
    }

    /// The store tenant the endpoint's events are kept under (an event's record is the tenant
    /// and its event id: `idemdb inspect`, `idemdb forget`).
    pub fn tenant(&self) -> &str {
        &self.verifier.tenant
    }

    /// The layer's counters since it was built (a refused signature counts as `refused`).
    pub fn stats(&self) -> HttpStats {
        self.layer.stats()
    }
}

impl<S> tower_layer::Layer<S> for WebhookLayer {
    type Service = Webhook<S>;

    fn layer(&self, inner: S) -> Webhook<S> {
        Webhook {
            inner,
            opts: self.layer.opts.clone(),
            verifier: self.verifier.clone(),
        }
    }
}

/// The service built by [`WebhookLayer`].
#[derive(Clone)]
pub struct Webhook<S> {
    inner: S,
    opts: Arc<Options>,
    verifier: Arc<Verifier>,
}

impl<S, B, RB> tower_service::Service<Request<B>> for Webhook<S>
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
        // The service that was polled ready serves this call; a clone takes its place.
        let inner = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, inner);
        let (opts, verifier) = (self.opts.clone(), self.verifier.clone());
        // One span per delivery, as the idempotency layer's (docs/operating.md): the event id
        // appears only as a hash, and no body bytes at all.
        let span = tracing::info_span!(
            target: "idemdb::http",
            "idemdb.webhook",
            scheme = verifier.scheme.name(),
            route = req.uri().path(),
            key_hash = tracing::field::Empty,
            outcome = tracing::field::Empty,
            status = tracing::field::Empty,
        );
        let fut = receive(opts, verifier, inner, req);
        Box::pin(tracing::Instrument::instrument(
            async move {
                let reply = fut.await;
                if let Ok(r) = &reply {
                    tracing::Span::current().record("status", r.status().as_u16());
                }
                reply
            },
            span,
        ))
    }
}

/// One delivery: its body, its signature, then its event as an idempotent request.
async fn receive<S, B, RB>(
    opts: Arc<Options>,
    v: Arc<Verifier>,
    inner: S,
    req: Request<B>,
) -> Reply<S::Error>
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
    let (parts, body) = req.into_parts();
    let body = match read_request_body(&opts, body).await {
        Continue(body) => body,
        Break(answer) => return Ok(answer),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let keys = v.keys.read().clone();
    let event = match signature::verify(v.scheme, &keys, v.tolerance, &parts.headers, &body, now) {
        Ok(event) => event,
        Err(refused) => {
            let detail = format!(
                "{}; nothing was stored, and the delivery was not handled",
                refused.detail()
            );
            let code = "webhook-signature-invalid";
            return Ok(refuse(&opts, StatusCode::UNAUTHORIZED, code, &detail));
        }
    };
    if event.len() > opts.max_key_len || !event.bytes().all(|b| b.is_ascii_graphic()) {
        let detail = format!(
            "the signed event id is not 1 to {} bytes of visible ASCII, so it cannot be kept",
            opts.max_key_len
        );
        let code = "webhook-event-id-invalid";
        return Ok(refuse(&opts, StatusCode::BAD_REQUEST, code, &detail));
    }
    serve_keyed(opts, inner, parts, body, &v.tenant, &event).await
}
