//! `idemdb proxy`: the HTTP idempotency layer as a reverse proxy in front of a service written in
//! any language, on an embedded store (`--db`) or a fleet's PostgreSQL (`--postgres`, where
//! several proxies behave as one). Invariant: a keyed request reaches the upstream only when its
//! claim acquired the key, and its key always ends stored or released (a client gone, a
//! shutdown, an upstream fault); requests the routes do not key pass through untouched. The
//! proxy answers its own paths under `/_idemdb/` and no others.
//!
//! Layers, top down: `server` (connections, routing, admin paths, shutdown) over the library's
//! `IdempotencyLayer` per route over `upstream` (the pooled client); `routes` is the inventory,
//! `jwt` the verification of tokens that scope keys, `watch` the files read again when they
//! change (JWT keys, webhook secrets), and `body` the timed bodies.

mod body;
mod jwt;
mod routes;
mod server;
mod upstream;
mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub(crate) use routes::duration as parse_duration;
use routes::Routes;

use crate::Target;

/// What `idemdb proxy` was asked to do.
pub(crate) struct Options {
    pub(crate) listen: SocketAddr,
    pub(crate) upstream: String,
    pub(crate) store: Target,
    pub(crate) routes: Option<PathBuf>,
    pub(crate) max_connections: usize,
    pub(crate) upstream_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) drain_timeout: Duration,
    pub(crate) log: String,
    /// Threads serving requests (1: everything on one thread).
    pub(crate) threads: usize,
    /// `--durability buffered` (an embedded store only).
    pub(crate) buffered: bool,
    /// `--claims flushed` (a store on PostgreSQL only): `Config::buffered_claims(false)`.
    pub(crate) flushed_claims: bool,
}

/// `idemdb proxy --inventory`: the routes as a table.
pub(crate) fn inventory(routes: Option<PathBuf>) -> Result<ExitCode, String> {
    let routes = load(routes.as_deref())?;
    println!("routes: {}", routes.source);
    print!("{}", routes.table());
    for w in routes.warnings() {
        eprintln!("warning: {w}");
    }
    Ok(ExitCode::SUCCESS)
}

fn load(path: Option<&std::path::Path>) -> Result<Routes, String> {
    match path {
        Some(p) => Routes::load(p),
        None => Ok(Routes::default_routes()),
    }
}

/// Runs the proxy until SIGTERM or Ctrl-C, then drains it.
pub(crate) fn run(o: Options) -> Result<ExitCode, String> {
    let routes = load(o.routes.as_deref())?;
    server::init_logging(&o.log)?;
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("the metrics recorder could not be installed: {e}"))?;
    let mut builder = if o.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(o.threads);
        b
    };
    let runtime = builder
        .enable_all()
        .build()
        .map_err(|e| format!("the async runtime could not start: {e}"))?;
    runtime.block_on(server::serve(o, routes, metrics))?;
    Ok(ExitCode::SUCCESS)
}
