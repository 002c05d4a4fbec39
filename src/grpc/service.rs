//! The services the gRPC layer builds around the HTTP layer's: [`GrpcIdempotency`] in front
//! (gRPC's answers for the layer's refusals, the method's trailers put back), [`Method`] behind
//! (the method's whole answer read, its trailers kept as a header the store replays, and whether
//! it is stored decided by its status). Invariant: every answer a client gets is a gRPC answer
//! (HTTP 200 with a `grpc-status`): the method's own, first or replayed with its trailers, or a
//! refusal with the one code [`codes::refusal`] gives it; an answer is stored only when its
//! status is final (`store_code`), never after its body failed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use tonic::Code;

use super::codes;
use crate::http::problem::Refusal;
use crate::http::{BoxError, HttpBody, Idempotency, StoreOverride};

/// The header a method's trailers are kept in, one `name:value` per trailer, between
/// [`Method`] and [`GrpcIdempotency`] (and in the store); never sent to a client.
pub(crate) const TRAILER: HeaderName = HeaderName::from_static("idemdb-grpc-trailer");

/// Which statuses are stored (see [`codes::stored_by_default`]).
pub(crate) type StoreCode = Arc<dyn Fn(Code) -> bool + Send + Sync>;

/// A request body as the HTTP layer reads and rebuilds it: tonic's body, which cannot be built
/// from bytes itself.
#[derive(Debug)]
pub struct GrpcBody(tonic::body::Body);

impl From<Bytes> for GrpcBody {
    fn from(bytes: Bytes) -> Self {
        GrpcBody(tonic::body::Body::new(Full::new(bytes)))
    }
}

impl Body for GrpcBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        Pin::new(&mut self.0).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The method behind the HTTP layer: reads its whole answer and says whether it is stored.
#[derive(Clone)]
pub struct Method<S> {
    inner: S,
    store_code: StoreCode,
}

impl<S> Method<S> {
    pub(crate) fn new(inner: S, store_code: StoreCode) -> Self {
        Method { inner, store_code }
    }
}

impl<S, RB> tower_service::Service<Request<GrpcBody>> for Method<S>
where
    S: tower_service::Service<Request<tonic::body::Body>, Response = Response<RB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<Full<Bytes>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<Full<Bytes>>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<GrpcBody>) -> Self::Future {
        let fut = self.inner.call(req.map(|b| b.0));
        let store_code = self.store_code.clone();
        Box::pin(async move {
            let (mut parts, body) = fut.await?.into_parts();
            let (data, trailers) = match body.collect().await {
                Ok(c) => {
                    let trailers = c.trailers().cloned().unwrap_or_default();
                    (c.to_bytes(), trailers)
                }
                Err(_) => {
                    // The answer broke off: the method may have acted, but nothing whole can
                    // be stored or sent; the key is released for a retry.
                    let failed = tonic::Status::internal(
                        "the method's answer failed before its end; its key was released",
                    );
                    let (p, ()) = failed.into_http::<()>().into_parts();
                    let mut p = p;
                    p.extensions.insert(StoreOverride::Release);
                    return Ok(Response::from_parts(p, Full::new(Bytes::new())));
                }
            };
            // The status is in the trailers, or in the head of a trailers-only answer.
            let status = tonic::Status::from_header_map(&trailers)
                .or_else(|| tonic::Status::from_header_map(&parts.headers));
            let code = status.map_or(Code::Unknown, |s| s.code());
            for (name, value) in &trailers {
                let kept = format!("{}:{}", name.as_str(), value.to_str().unwrap_or(""));
                if let Ok(v) = HeaderValue::from_str(&kept) {
                    parts.headers.append(TRAILER, v);
                }
            }
            parts.extensions.insert(if store_code(code) {
                StoreOverride::Store
            } else {
                StoreOverride::Release
            });
            Ok(Response::from_parts(parts, Full::new(data)))
        })
    }
}

/// The service built by [`super::GrpcIdempotencyLayer`]: put in front of a tonic server's
/// services (`Server::builder().layer(...)`).
#[derive(Clone)]
pub struct GrpcIdempotency<S> {
    inner: Idempotency<Method<S>>,
    /// `key_header(...)` other than `idempotency-key`: its value is moved there.
    key_header: Option<HeaderName>,
}

impl<S> GrpcIdempotency<S> {
    pub(crate) fn new(inner: Idempotency<Method<S>>, key_header: Option<HeaderName>) -> Self {
        GrpcIdempotency { inner, key_header }
    }
}

impl<S, RB> tower_service::Service<Request<tonic::body::Body>> for GrpcIdempotency<S>
where
    S: tower_service::Service<Request<tonic::body::Body>, Response = Response<RB>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<HttpBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<HttpBody>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<tonic::body::Body>) -> Self::Future {
        let mut req = req.map(GrpcBody);
        if let Some(name) = &self.key_header {
            let headers = req.headers_mut();
            headers.remove(super::IDEMPOTENCY_KEY);
            let values: Vec<HeaderValue> = headers.get_all(name).iter().cloned().collect();
            for v in values {
                headers.append(super::IDEMPOTENCY_KEY, v);
            }
        }
        let fut = self.inner.call(req);
        Box::pin(async move { Ok(to_grpc(fut.await?)) })
    }
}

/// What the client gets for the HTTP layer's answer: the layer's refusal as a gRPC status, or
/// the method's answer with its trailers back in place.
fn to_grpc(resp: Response<HttpBody>) -> Response<HttpBody> {
    let (mut parts, body) = resp.into_parts();
    if let Some(refusal) = parts.extensions.remove::<Refusal>() {
        let code = codes::refusal(&refusal.code);
        let message = format!("{}: {}", refusal.code, refusal.detail);
        let (mut p, ()) = tonic::Status::new(code, message)
            .into_http::<()>()
            .into_parts();
        if let Some(secs) = parts.headers.get(RETRY_AFTER) {
            // The HTTP layer's estimate, as metadata and as gRPC's retry pushback.
            let ms = secs
                .to_str()
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .map(|s| s.saturating_mul(1000));
            p.headers.insert(RETRY_AFTER, secs.clone());
            if let Some(v) = ms.and_then(|ms| HeaderValue::from_str(&ms.to_string()).ok()) {
                p.headers
                    .insert(HeaderName::from_static("grpc-retry-pushback-ms"), v);
            }
        }
        return Response::from_parts(p, crate::http::empty_body());
    }
    if parts.headers.contains_key("idempotent-body-omitted") {
        // Replayed without its message: the method ran, but its answer was larger than the
        // store keeps. A client must not take an empty message for the answer.
        let status = tonic::Status::new(
            Code::Internal,
            "the method ran; its answer was larger than the idempotency store keeps, so it \
             cannot be replayed",
        );
        let (mut p, ()) = status.into_http::<()>().into_parts();
        p.headers.insert(
            HeaderName::from_static("idempotent-body-omitted"),
            HeaderValue::from_static("true"),
        );
        return Response::from_parts(p, crate::http::empty_body());
    }
    let mut trailers = HeaderMap::new();
    for kept in parts.headers.get_all(TRAILER) {
        let Some((name, value)) = kept.to_str().ok().and_then(|t| t.split_once(':')) else {
            continue;
        };
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            trailers.append(n, v);
        }
    }
    parts.headers.remove(TRAILER);
    parts.status = http::StatusCode::OK;
    let body = if trailers.is_empty() {
        body
    } else {
        body.with_trailers(std::future::ready(Some(Ok(trailers))))
            .boxed_unsync()
    };
    Response::from_parts(parts, body)
}
