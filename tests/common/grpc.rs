//! A real gRPC payment service for the gRPC layer's tests: prost messages derived here (no
//! protoc), a tonic server on 127.0.0.1 behind a `GrpcIdempotencyLayer`, written as tonic's
//! generated code is (`tonic::server::Grpc::unary`), and a tonic client over a real channel.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use idemdb::grpc::GrpcIdempotencyLayer;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};

#[derive(Clone, PartialEq, prost::Message)]
pub struct ChargeRequest {
    #[prost(string, tag = "1")]
    pub account: String,
    #[prost(uint64, tag = "2")]
    pub amount: u64,
    /// The method sleeps this long before its effect.
    #[prost(uint32, tag = "3")]
    pub delay_ms: u32,
    /// The method answers with this status code (0: OK).
    #[prost(int32, tag = "4")]
    pub fail_with: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ChargeReply {
    /// Which run of the method answered (1 for the first).
    #[prost(uint64, tag = "1")]
    pub run: u64,
    #[prost(string, tag = "2")]
    pub account: String,
}

pub const CHARGE: &str = "/test.Payments/Charge";

/// How often the method ran.
#[derive(Default)]
pub struct Runs(pub AtomicU64);

#[derive(Clone)]
pub struct Payments(pub Arc<Runs>);

impl tonic::server::NamedService for Payments {
    const NAME: &'static str = "test.Payments";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

struct Charge(Arc<Runs>);

impl tonic::server::UnaryService<ChargeRequest> for Charge {
    type Response = ChargeReply;
    type Future = BoxFuture<Result<tonic::Response<ChargeReply>, Status>>;

    fn call(&mut self, req: tonic::Request<ChargeRequest>) -> Self::Future {
        let runs = self.0.clone();
        Box::pin(async move {
            let req = req.into_inner();
            tokio::time::sleep(Duration::from_millis(u64::from(req.delay_ms))).await;
            let run = runs.0.fetch_add(1, Ordering::SeqCst) + 1;
            if req.fail_with != 0 {
                let mut s = Status::new(Code::from_i32(req.fail_with), format!("failed run {run}"));
                s.metadata_mut()
                    .insert("x-run", run.to_string().parse().unwrap());
                return Err(s);
            }
            let mut resp = tonic::Response::new(ChargeReply {
                run,
                account: req.account,
            });
            resp.metadata_mut()
                .insert("x-run", run.to_string().parse().unwrap());
            Ok(resp)
        })
    }
}

impl tower_service::Service<http::Request<tonic::body::Body>> for Payments {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let runs = self.0.clone();
        Box::pin(async move {
            if req.uri().path() != CHARGE {
                return Ok(Status::unimplemented("no such method").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(Charge(runs), req).await)
        })
    }
}

/// Serves `Payments` behind `layer` on a free port of 127.0.0.1.
pub async fn serve_grpc(layer: GrpcIdempotencyLayer) -> (SocketAddr, Arc<Runs>) {
    let runs = Arc::new(Runs::default());
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).expect("bind 127.0.0.1");
    let addr = incoming.local_addr().expect("local addr");
    let svc = Payments(runs.clone());
    tokio::spawn(async move {
        Server::builder()
            .layer(layer)
            .add_service(svc)
            .serve_with_incoming(incoming)
            .await
            .expect("serve");
    });
    (addr, runs)
}

/// A client of the service at `addr`.
pub async fn grpc_client(addr: SocketAddr) -> tonic::client::Grpc<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to the gRPC server");
    tonic::client::Grpc::new(channel)
}

/// What a call got: the reply or the status, with the answer's metadata.
#[derive(Debug)]
pub struct Called {
    pub reply: Result<ChargeReply, Status>,
    pub metadata: tonic::metadata::MetadataMap,
}

impl Called {
    pub fn replayed(&self) -> bool {
        self.metadata
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true")
    }
    pub fn code(&self) -> Code {
        self.reply.as_ref().map_or_else(|s| s.code(), |_| Code::Ok)
    }
}

/// Calls Charge with `key` (none when empty) and `principal` (metadata `x-account`).
pub async fn charge(
    client: &mut tonic::client::Grpc<Channel>,
    key: &str,
    principal: &str,
    req: ChargeRequest,
) -> Called {
    client.ready().await.expect("channel ready");
    let mut r = tonic::Request::new(req);
    if !key.is_empty() {
        r.metadata_mut()
            .insert("idempotency-key", key.parse().unwrap());
    }
    r.metadata_mut()
        .insert("x-account", principal.parse().unwrap());
    let path = http::uri::PathAndQuery::from_static(CHARGE);
    match client
        .unary(r, path, tonic_prost::ProstCodec::default())
        .await
    {
        Ok(resp) => Called {
            metadata: resp.metadata().clone(),
            reply: Ok(resp.into_inner()),
        },
        Err(status) => Called {
            metadata: status.metadata().clone(),
            reply: Err(status),
        },
    }
}
