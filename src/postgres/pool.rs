//! The connection pool of a PostgreSQL store, and how it heals. Invariants:
//! - a connection goes back to the pool only from a call that finished cleanly on it
//!   ([`Conn::keep`]); one whose call failed, timed out or was abandoned mid-statement (its
//!   future dropped, a request still pending on it) is closed, never handed out again, so a
//!   connection to a demoted primary (SQLSTATE 25006), a shutting-down or frozen server, or one
//!   that was lost serves at most the one call that found out;
//! - after a call fails as [`Error::Unavailable`], every idle connection is closed too (they
//!   lead to the same server), so the next call connects afresh, and a multi-host URL with
//!   `target_session_attrs=read-write` reaches the current primary by itself;
//! - connecting tries each host of a multi-host URL for at most the connect timeout (TCP, TLS,
//!   startup, authentication and the read-write check together), starting with the host that
//!   answered last (a host that failed hands that place to the next one): a frozen host that
//!   accepts TCP and never answers costs one timeout, never the whole pool's wait; and
//!   connecting is not counted in a statement's budget (`PgStore::timed`), so the next host is
//!   always reached.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio::task::JoinHandle;
use tokio_postgres::config::Host;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::errors::{classify, classify_parts, redact};
use super::settings::Resolved;
use crate::config::fleet::Settings;
use crate::error::{Error, InvalidInput, Result};

/// A pooled connection lent to one call: closed when dropped, unless the call finished cleanly
/// and said so with [`Conn::keep`].
pub(crate) struct Conn(Option<Object>);

impl Conn {
    /// The call finished cleanly: the connection goes back to the pool.
    pub(crate) fn keep(mut self) {
        drop(self.0.take());
    }

    /// The connection, for a caller that manages its lifetime itself (an application's
    /// transaction, which closes it unless it ends cleanly).
    pub(crate) fn into_object(mut self) -> Option<Object> {
        self.0.take()
    }
}

impl std::ops::Deref for Conn {
    type Target = Object;
    fn deref(&self) -> &Object {
        self.0
            .as_ref()
            .expect("a Conn holds its connection until it is kept or dropped")
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Object {
        self.0
            .as_mut()
            .expect("a Conn holds its connection until it is kept or dropped")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(obj) = self.0.take() {
            // Not kept: out of the pool, and closed.
            drop(Object::take(obj));
        }
    }
}

/// Lends a connection from `pool`.
pub(crate) async fn lend(pool: &Pool) -> Result<Conn> {
    pool.get().await.map(|o| Conn(Some(o))).map_err(pool_error)
}

/// Whether a call would get a connection at once: one is idle, or the pool may open another.
pub(crate) fn has_room(pool: &Pool) -> bool {
    let s = pool.status();
    s.available > 0 || s.size < s.max_size
}

/// Closes every idle connection of `pool` (after a call found the server gone, read-only or
/// shutting down: the idle ones lead to the same server).
pub(crate) fn flush_idle(pool: &Pool) {
    drop(pool.retain(|_, _| false));
}

pub(crate) fn pool_error(e: deadpool_postgres::PoolError) -> Error {
    match e {
        deadpool_postgres::PoolError::Backend(e) => classify(e),
        other => {
            Error::unavailable(format!("PostgreSQL connection pool: {other}")).with_source(other)
        }
    }
}

/// The pool for `s`, not yet connected (nothing is checked against the server here), and the
/// settings as resolved from the URL and the setters.
pub(crate) fn build(s: &Settings) -> Result<(Pool, Resolved)> {
    let (pg, connect, resolved) = session(s)?;
    let hosts = pg.get_hosts().len().max(pg.get_hostaddrs().len()).max(1);
    let mgr = Manager::from_connect(
        pg,
        connect,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let hosts = u32::try_from(hosts).unwrap_or(u32::MAX);
    let pool = Pool::builder(mgr)
        .max_size(s.pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(s.connect_timeout))
        .create_timeout(Some(
            s.connect_timeout.saturating_mul(hosts) + Duration::from_secs(1),
        ))
        .recycle_timeout(Some(s.connect_timeout))
        .build()
        .map_err(|e| Error::InvalidInput(InvalidInput::Config(e.to_string())))?;
    Ok((pool, resolved))
}

/// How a store's sessions connect: the client's configuration (the URL without idemdb's own
/// options, the store's session settings added) and the host-by-host connector.
fn session(s: &Settings) -> Result<(tokio_postgres::Config, HostByHost, Resolved)> {
    let resolved = s.resolve()?;
    let mut pg: tokio_postgres::Config = resolved.rest.parse().map_err(|e| {
        Error::InvalidInput(InvalidInput::Config(format!(
            "PostgreSQL URL {:?}: {e}",
            redact(&s.url)
        )))
    })?;
    pg.ssl_mode(resolved.tls.ssl_mode());
    pg.connect_timeout(s.connect_timeout);
    if pg.get_application_name().is_none() {
        pg.application_name("idemdb");
    }
    // Keep the URL's own options (a search_path, for example) and add the store's session
    // settings.
    let mut options = format!(
        "{} -c statement_timeout={}",
        pg.get_options().unwrap_or_default(),
        s.statement_timeout.as_millis()
    );
    if let Some(sc) = s.synchronous_commit {
        options.push_str(&format!(" -c synchronous_commit={}", sc.as_str()));
    }
    pg.options(options.trim_start());
    let connect = HostByHost {
        tls: resolved.tls.connector()?,
        per_host: s.connect_timeout,
        preferred: AtomicUsize::new(0),
    };
    Ok((pg, connect, resolved))
}

/// A connection of its own, outside the pool, whose messages its owner reads (the listening
/// connection of `waits.rs`): the client and the connection, not yet driven.
pub(crate) type Raw = (tokio_postgres::Client, RawConnection);
pub(crate) type RawConnection = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream,
>;

/// Opens connections of its own (outside the pool) as the pool would: `s`'s URL, TLS, hosts
/// and session settings.
pub(crate) struct Dialer {
    pg: tokio_postgres::Config,
    connect: HostByHost,
}

impl Dialer {
    pub(crate) fn new(s: &Settings) -> Result<Dialer> {
        let (pg, connect, _) = session(s)?;
        Ok(Dialer { pg, connect })
    }

    /// A new connection, host by host as the pool connects.
    pub(crate) async fn dial(&self) -> Result<Raw> {
        self.connect.open(&self.pg).await.map_err(classify)
    }
}

/// Connects host by host, each within the connect timeout.
struct HostByHost {
    tls: MakeRustlsConnect,
    per_host: Duration,
    /// The host that answered last: tried first.
    preferred: AtomicUsize,
}

type Connected = (tokio_postgres::Client, JoinHandle<()>);

impl deadpool_postgres::Connect for HostByHost {
    fn connect(
        &self,
        pg: &tokio_postgres::Config,
    ) -> Pin<
        Box<dyn Future<Output = std::result::Result<Connected, tokio_postgres::Error>> + Send + '_>,
    > {
        let pg = pg.clone();
        Box::pin(async move {
            let (client, connection) = self.open(&pg).await?;
            let task = tokio::spawn(async move {
                // The connection's end (closed, lost) shows in the client, which the pool checks
                // before lending it again.
                let _ = connection.await;
            });
            Ok((client, task))
        })
    }
}

impl HostByHost {
    /// A connection to the first host that takes one, not yet driven.
    async fn open(
        &self,
        pg: &tokio_postgres::Config,
    ) -> std::result::Result<Raw, tokio_postgres::Error> {
        let n = pg.get_hosts().len().max(pg.get_hostaddrs().len()).max(1);
        let start = self.preferred.load(Ordering::Relaxed) % n;
        let mut rejected = None;
        let mut last = None;
        for k in 0..n {
            let i = (start + k) % n;
            let one = if n == 1 { pg.clone() } else { one_host(pg, i) };
            match tokio::time::timeout(self.per_host, one.connect(self.tls.clone())).await {
                Ok(Ok(raw)) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(raw);
                }
                Ok(Err(e)) => {
                    if matches!(classify_parts(&e), Error::ConnectionRejected { .. }) {
                        rejected.get_or_insert(e);
                    } else {
                        last = Some(e);
                    }
                }
                // The host took TCP and said nothing in time (a frozen server): the next.
                Err(_) => last = Some(tokio_postgres::Error::__private_api_timeout()),
            }
            // This host failed: the next connection (this one's caller may give up before
            // the next host answers) starts with the one after it.
            let _ = self.preferred.compare_exchange(
                i,
                (i + 1) % n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        // A rejection (TLS, credentials) says what to fix; it wins over a host being away.
        Err(rejected
            .or(last)
            .unwrap_or_else(tokio_postgres::Error::__private_api_timeout))
    }
}

/// `pg` reduced to its `i`-th host (with its port and host address), every other setting kept.
fn one_host(pg: &tokio_postgres::Config, i: usize) -> tokio_postgres::Config {
    let mut one = tokio_postgres::Config::new();
    if let Some(u) = pg.get_user() {
        one.user(u);
    }
    if let Some(p) = pg.get_password() {
        one.password(p);
    }
    if let Some(d) = pg.get_dbname() {
        one.dbname(d);
    }
    if let Some(o) = pg.get_options() {
        one.options(o);
    }
    if let Some(a) = pg.get_application_name() {
        one.application_name(a);
    }
    one.ssl_mode(pg.get_ssl_mode());
    one.ssl_negotiation(pg.get_ssl_negotiation());
    match pg.get_hosts().get(i) {
        Some(Host::Tcp(h)) => {
            one.host(h);
        }
        #[cfg(unix)]
        Some(Host::Unix(p)) => {
            one.host_path(p);
        }
        None => {}
    }
    if let Some(a) = pg.get_hostaddrs().get(i) {
        one.hostaddr(*a);
    }
    let ports = pg.get_ports();
    if let Some(p) = ports.get(i).or_else(|| ports.first()) {
        one.port(*p);
    }
    if let Some(t) = pg.get_connect_timeout() {
        one.connect_timeout(*t);
    }
    if let Some(t) = pg.get_tcp_user_timeout() {
        one.tcp_user_timeout(*t);
    }
    one.keepalives(pg.get_keepalives());
    one.keepalives_idle(pg.get_keepalives_idle());
    if let Some(t) = pg.get_keepalives_interval() {
        one.keepalives_interval(t);
    }
    if let Some(r) = pg.get_keepalives_retries() {
        one.keepalives_retries(r);
    }
    one.target_session_attrs(pg.get_target_session_attrs());
    one.channel_binding(pg.get_channel_binding());
    one
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn one_host_keeps_every_setting_and_its_own_port() {
        let pg: tokio_postgres::Config =
            "postgres://u:pw@a:5001,b:5002/db?target_session_attrs=read-write&application_name=x"
                .parse()
                .unwrap();
        let b = one_host(&pg, 1);
        assert_eq!(b.get_hosts(), &[Host::Tcp("b".into())]);
        assert_eq!(b.get_ports(), &[5002]);
        assert_eq!(b.get_user(), Some("u"));
        assert_eq!(b.get_password(), Some(&b"pw"[..]));
        assert_eq!(b.get_dbname(), Some("db"));
        assert_eq!(b.get_application_name(), Some("x"));
        assert_eq!(
            b.get_target_session_attrs(),
            tokio_postgres::config::TargetSessionAttrs::ReadWrite
        );
    }
}
