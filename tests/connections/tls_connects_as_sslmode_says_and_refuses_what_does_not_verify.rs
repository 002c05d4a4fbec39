//! TLS as libpq's `sslmode` says, against a cluster with its own CA and a certificate for
//! `localhost` and `127.0.0.1`: `require` and `verify-full` connect (and the store works over
//! them); `verify-ca` accepts a certificate that names another host, `verify-full` does not;
//! a certificate from another CA, or a wrong host name under `verify-full`, is refused as a
//! configuration error (`Error::ConnectionRejected`), never `Unavailable`; the `Config` setters
//! say the same as the URL.

use idemdb::{Config, Error, TlsMode, TlsRoots};

use crate::lab::Lab;

async fn opens(url: &str) -> Result<idemdb::AsyncStore, Error> {
    Config::postgres(url)
        .sweep_interval(None)
        .pool_size(2)
        .open_async()
        .await
}

fn rejected(r: Result<idemdb::AsyncStore, Error>, what: &str) -> String {
    match r {
        Err(Error::ConnectionRejected { message, .. }) => message,
        Err(other) => panic!("{what}: a configuration error expected, got {other:?}"),
        Ok(_) => panic!("{what}: connected, but must be refused"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let lab = Lab::new("tls", &["tls"]);
    let port = lab.get("port");
    let (ca, other) = (lab.get("ca"), lab.get("other_ca"));
    let base = format!("postgres://postgres@127.0.0.1:{port}/test");

    // The server sees TLS: ssl_is_used() through the store's own application transaction.
    for mode in ["require", "verify-ca", "verify-full"] {
        let url = format!("{base}?sslmode={mode}&sslrootcert={ca}");
        let store = opens(&url).await.unwrap_or_else(|e| panic!("{mode}: {e}"));
        crate::requests_work(&store, &format!("tls-{mode}"), 3).await;
        let mut tx = store.transaction().await.unwrap();
        let rows = tx
            .query(
                "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(
            rows,
            vec![vec![idemdb::SqlValue::Text("true".into())]],
            "{mode}"
        );
        tx.rollback().await.unwrap();
    }
    // `require` without roots encrypts and verifies nothing (as libpq).
    let store = opens(&format!("{base}?sslmode=require")).await.unwrap();
    crate::requests_work(&store, "tls-require-noroot", 1).await;

    // Another CA: refused, saying what to check.
    for mode in ["verify-ca", "verify-full", "require"] {
        let m = rejected(
            opens(&format!("{base}?sslmode={mode}&sslrootcert={other}")).await,
            mode,
        );
        assert!(m.contains("sslrootcert"), "{mode}: {m}");
    }
    // A host name the certificate does not name (reached at 127.0.0.1 through hostaddr).
    let wrong_name = format!(
        "host=wrong.invalid hostaddr=127.0.0.1 port={port} user=postgres dbname=test \
         sslrootcert={ca}"
    );
    rejected(
        opens(&format!("{wrong_name} sslmode=verify-full")).await,
        "verify-full, wrong host name",
    );
    let store = opens(&format!("{wrong_name} sslmode=verify-ca"))
        .await
        .unwrap();
    crate::requests_work(&store, "tls-verify-ca-name", 1).await;

    // The setters say the same, and win over the URL.
    let store = Config::postgres(format!("{base}?sslmode=disable"))
        .tls(TlsMode::VerifyFull)
        .tls_roots(TlsRoots::File(ca.clone().into()))
        .sweep_interval(None)
        .open_async()
        .await
        .unwrap();
    crate::requests_work(&store, "tls-setters", 1).await;
    let r = Config::postgres(&base)
        .tls(TlsMode::VerifyFull)
        .tls_roots(TlsRoots::File(other.clone().into()))
        .sweep_interval(None)
        .open_async()
        .await;
    rejected(r, "setters, another CA");
    // A verifying mode with no roots, or roots that are no certificates: refused at open.
    for url in [
        format!("{base}?sslmode=verify-full"),
        format!("{base}?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"),
        format!("{base}?sslmode=verify-full&sslrootcert={port}"),
    ] {
        match opens(&url).await {
            Err(Error::InvalidInput(idemdb::InvalidInput::Config(m))) => {
                assert!(m.contains("sslrootcert"), "{url}: {m}")
            }
            other => panic!(
                "{url}: a configuration error expected, got {:?}",
                other.err()
            ),
        }
    }
}
