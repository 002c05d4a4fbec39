//! How fleet mode connects to PostgreSQL in production: TLS as `sslmode` says (against a cluster
//! made by the test with its own CA), configuration errors that are never reported as
//! transient, PgBouncer in transaction mode (Debian's 1.18, started by the test), and many
//! stores in many schemas opening at once. Each test starts what it needs on loopback with
//! `scripts/pg-lab` and stops it; the system server (127.0.0.1:5432, database `test`) is used
//! where a plain server is enough. A test that cannot make or reach its server fails, naming it.

mod lab;
/// The TCP relay the tests put between a store and the server.
#[path = "../common/relay.rs"]
mod relay;

mod a_server_without_tls_is_refused_unless_the_mode_allows_plain;
mod a_silent_listening_connection_is_noticed;
mod configuration_errors_are_never_transient;
mod many_stores_in_many_schemas_open_together;
mod pgbouncer_transaction_mode_runs_unnamed_statements;
mod tls_connects_as_sslmode_says_and_refuses_what_does_not_verify;

/// The system server's address (its URL's first host, over TCP).
pub fn system_addr() -> std::net::SocketAddr {
    relay::server_addr(&system_url())
}

/// The system server.
pub fn system_url() -> String {
    std::env::var("IDEMDB_TEST_POSTGRES_ADMIN")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A short request workload on `store`: new keys acquired and completed, replays, a mismatch;
/// panics on any other outcome.
pub async fn requests_work(store: &idemdb::AsyncStore, prefix: &str, n: usize) {
    use idemdb::{Claim, ClaimOptions, Response};
    for i in 0..n {
        let key = format!("{prefix}-{i}");
        let fp = format!("fp-{i}");
        let Claim::Acquired(lease) = store
            .claim("acme", &key, fp.as_bytes(), ClaimOptions::default())
            .await
            .unwrap()
        else {
            panic!("a new key {key} is acquired");
        };
        let body = format!("done {key} fence {}", lease.fence());
        store
            .complete(&lease, Response::new(body.clone().into_bytes()))
            .await
            .unwrap()
            .expect("the holder completes");
        match store
            .claim("acme", &key, fp.as_bytes(), ClaimOptions::default())
            .await
            .unwrap()
        {
            Claim::Completed(r) => assert_eq!(r.response.body, body.as_bytes()),
            other => panic!("{key}: a replay expected, got {other:?}"),
        }
        assert_eq!(
            store
                .claim("acme", &key, b"another", ClaimOptions::default())
                .await
                .unwrap(),
            Claim::Mismatch
        );
    }
}

/// Runs SQL on `url` as the administrator.
pub async fn admin(url: &str, sql: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url} is needed by this test: {e}"));
    let task = tokio::spawn(conn);
    client.batch_execute(sql).await.unwrap();
    drop(client);
    let _ = task.await;
}
