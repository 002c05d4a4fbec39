//! Shared by the HTTP layer's end-to-end tests: a real axum server on 127.0.0.1 behind the layer,
//! and a real HTTP/1.1 client (hyper).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use idemdb::http::IdempotencyLayer;
use idemdb::{AsyncStore, Config, Durability, Store};

/// How many times each handler ran.
#[derive(Default)]
pub struct Calls {
    pub pay: AtomicU64,
    pub boom: AtomicU64,
    pub big: AtomicU64,
    pub panic: AtomicU64,
    pub encoded: AtomicU64,
}

pub struct Server {
    pub addr: SocketAddr,
    pub calls: Arc<Calls>,
    pub layer: IdempotencyLayer,
    pub store: Store,
    _dir: tempfile::TempDir,
}

pub fn store(dir: &std::path::Path, durability: Durability, max_response: usize) -> Store {
    Config::new(dir)
        .durability(durability)
        .max_response_bytes(max_response)
        .max_lease(Duration::from_secs(600))
        .sweep_interval(None)
        .open()
        .expect("open store")
}

/// The principal is the `x-user` header, as an authentication middleware would set it.
pub fn layer(store: impl Into<AsyncStore>) -> IdempotencyLayer {
    IdempotencyLayer::new(store).principal(|req| {
        req.headers
            .get("x-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    })
}

/// Starts the test service with the layer `configure` returns (given the default test layer).
pub async fn serve(
    durability: Durability,
    max_response: usize,
    configure: impl FnOnce(IdempotencyLayer) -> IdempotencyLayer,
) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(dir.path(), durability, max_response);
    let (addr, calls, layer) = serve_on(store.clone().into(), configure).await;
    Server {
        addr,
        calls,
        layer,
        store,
        _dir: dir,
    }
}

/// Starts the test service on `store` (either backend) with the layer `configure` returns;
/// its address, its handlers' call counts and the layer.
pub async fn serve_on(
    store: AsyncStore,
    configure: impl FnOnce(IdempotencyLayer) -> IdempotencyLayer,
) -> (SocketAddr, Arc<Calls>, IdempotencyLayer) {
    let layer = configure(layer(store));
    let calls = Arc::new(Calls::default());
    let app = Router::new()
        .route("/pay", post(pay))
        .route("/boom", post(boom))
        .route("/big", post(big))
        .route("/panic", post(panic))
        .route("/free", post(pay).get(pay))
        .route("/encoded", post(encoded))
        .layer(layer.clone())
        .with_state(calls.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve");
    });
    (addr, calls, layer)
}

/// Charges once per run: waits `x-delay-ms`, then answers 201 with a Location, a cookie, and a
/// body naming the run and echoing the request.
async fn pay(
    State(calls): State<Arc<Calls>>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let n = calls.pay.fetch_add(1, Ordering::SeqCst) + 1;
    let delay = headers
        .get("x-delay-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    (
        StatusCode::CREATED,
        [
            ("location", format!("/pay/{n}")),
            ("set-cookie", format!("session={n}")),
            ("content-type", "text/plain".to_owned()),
        ],
        format!("payment {n} for {}", String::from_utf8_lossy(&body)),
    )
}

/// A "compressed" body (the layer never looks inside) with its `Content-Encoding`, and an
/// `x-note` header with one value of visible ASCII and one with UTF-8 bytes.
async fn encoded(State(calls): State<Arc<Calls>>) -> impl IntoResponse {
    let n = calls.encoded.fetch_add(1, Ordering::SeqCst) + 1;
    let mut resp = (StatusCode::OK, vec![0x1f, 0x8b, 0x08, n as u8]).into_response();
    let h = resp.headers_mut();
    h.insert(
        "content-encoding",
        axum::http::HeaderValue::from_static("gzip"),
    );
    h.append("x-note", axum::http::HeaderValue::from_static("plain"));
    h.append(
        "x-note",
        axum::http::HeaderValue::from_bytes("café".as_bytes()).expect("obs-text value"),
    );
    resp
}

async fn boom(State(calls): State<Arc<Calls>>) -> impl IntoResponse {
    let n = calls.boom.fetch_add(1, Ordering::SeqCst) + 1;
    (StatusCode::SERVICE_UNAVAILABLE, format!("down {n}"))
}

#[derive(serde::Deserialize)]
struct Size {
    n: usize,
    /// The status to answer with (200 by default).
    status: Option<u16>,
}

async fn big(State(calls): State<Arc<Calls>>, Query(q): Query<Size>) -> impl IntoResponse {
    calls.big.fetch_add(1, Ordering::SeqCst);
    let body: Vec<u8> = (0..q.n).map(|i| (i % 251) as u8).collect();
    let status = q
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    (status, [("x-big", "yes")], body)
}

async fn panic(State(calls): State<Arc<Calls>>) -> &'static str {
    calls.panic.fetch_add(1, Ordering::SeqCst);
    panic!("handler panics on purpose");
}

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// What came back: status, headers and the whole body.
#[derive(Debug, Clone)]
pub struct Got {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Got {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }
    /// The `code` member of a problem+json body.
    pub fn problem_code(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "not a problem document: {self:?}"
        );
        let text = self.text();
        let start = text.find("\"code\":\"").expect("code member") + 8;
        let end = text[start..].find('"').expect("end of code") + start;
        text[start..end].to_owned()
    }
}

/// A request builder: `send(&c, srv.addr, "POST", "/pay").key("k1").user("alice").body("x")`.
pub struct Req {
    builder: axum::http::request::Builder,
    body: Vec<u8>,
}

pub fn req(addr: SocketAddr, method: &str, path: &str) -> Req {
    Req {
        builder: axum::http::Request::builder()
            .method(method)
            .uri(format!("http://{addr}{path}")),
        body: Vec::new(),
    }
}

impl Req {
    pub fn key(self, k: &str) -> Self {
        self.header("idempotency-key", &format!("\"{k}\""))
    }
    pub fn user(self, u: &str) -> Self {
        self.header("x-user", u)
    }
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.builder = self.builder.header(name, value);
        self
    }
    pub fn raw_header(mut self, name: &str, value: &[u8]) -> Self {
        self.builder = self.builder.header(
            name,
            axum::http::HeaderValue::from_bytes(value).expect("header value"),
        );
        self
    }
    pub fn body(mut self, b: &str) -> Self {
        self.body = b.as_bytes().to_vec();
        self
    }
    /// Sends the request from a task of its own (a client that is still waiting while the test
    /// goes on).
    pub fn spawn(self, client: &HttpClient) -> tokio::task::JoinHandle<Got> {
        let client = client.clone();
        tokio::spawn(async move { self.send(&client).await })
    }

    pub async fn send(self, client: &HttpClient) -> Got {
        let req = self
            .builder
            .body(Full::new(Bytes::from(self.body)))
            .expect("request");
        let resp = client.request(req).await.expect("HTTP request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .expect("response body")
            .to_bytes()
            .to_vec();
        Got {
            status,
            headers,
            body,
        }
    }
}
