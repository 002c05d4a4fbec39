//! A configuration the database refuses is an error that says what to fix and is not transient
//! (`Error::ConnectionRejected`, `InvalidInput::Config`): a wrong password, a database that does
//! not exist, a URL that does not parse, an `sslmode` idemdb does not know, TLS required of a
//! server that has none, coalescing's limits out of range. A server that is away is `Unavailable`, and transient.

use idemdb::{Config, Error, InvalidInput};

use crate::lab::Lab;

async fn open(url: &str) -> Result<idemdb::AsyncStore, Error> {
    Config::postgres(url)
        .sweep_interval(None)
        .connect_timeout(std::time::Duration::from_secs(3))
        .open_async()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let lab = Lab::new("config", &["tls"]);
    let port = lab.get("port");
    let checks: Vec<(String, &str)> = vec![
        (
            format!("postgres://secret:wrong@127.0.0.1:{port}/test?sslmode=require"),
            "a wrong password",
        ),
        (
            format!("postgres://secret@127.0.0.1:{port}/test?sslmode=require"),
            "no password",
        ),
        (
            format!("postgres://postgres@127.0.0.1:{port}/no_such_db"),
            "a database that does not exist",
        ),
    ];
    for (url, what) in &checks {
        match open(url).await {
            Err(e @ Error::ConnectionRejected { .. }) => {
                assert!(!e.is_transient(), "{what}");
                assert_eq!(e.class(), "connection_rejected");
            }
            Err(other) => panic!("{what}: ConnectionRejected expected, got {other:?}"),
            Ok(_) => panic!("{what}: opened"),
        }
    }
    // The right password works (the check above can fail).
    let store = open(&format!(
        "postgres://secret:right@127.0.0.1:{port}/test?sslmode=require&options=-c%20search_path%3Dpublic"
    ))
    .await;
    assert!(
        !matches!(store, Err(Error::ConnectionRejected { .. })),
        "the right password must be accepted: {:?}",
        store.err()
    );

    for url in [
        "postgres://postgres@127.0.0.1:5432/test?sslmode=sometimes".to_string(),
        "postgres://postgres@127.0.0.1:99999/test".to_string(),
        "postgres://postgres@127.0.0.1:5432/test?no_such_option=1".to_string(),
        "host=127.0.0.1 sslmode".to_string(),
    ] {
        match open(&url).await {
            Err(e @ Error::InvalidInput(InvalidInput::Config(_))) => assert!(!e.is_transient()),
            other => panic!(
                "{url}: InvalidInput::Config expected, got {:?}",
                other.err()
            ),
        }
    }

    // Coalescing's limits out of range: refused before anything connects, naming the setting.
    let base = || Config::postgres("postgres://postgres@127.0.0.1:5432/test").sweep_interval(None);
    for (cfg, setting) in [
        (base().coalesce_in_flight(0), "coalesce_in_flight"),
        (base().coalesce_in_flight(5000), "coalesce_in_flight"),
        (base().coalesce_limits(0, 1024), "coalesce_limits"),
        (base().coalesce_limits(16, 0), "coalesce_limits"),
    ] {
        match cfg.coalescing(true).open_async().await {
            Err(e @ Error::InvalidInput(InvalidInput::Config(_))) => {
                assert!(!e.is_transient());
                assert!(e.to_string().contains(setting), "{e}");
            }
            other => panic!(
                "{setting}: InvalidInput::Config expected, got {:?}",
                other.err()
            ),
        }
    }

    // Away, not misconfigured: transient.
    match open("postgres://postgres@127.0.0.1:1/test").await {
        Err(e @ Error::Unavailable { .. }) => assert!(e.is_transient()),
        other => panic!("a closed port: Unavailable expected, got {:?}", other.err()),
    }
}
