//! A server (or anything in the path) that answers "N" to the TLS request is connected to only
//! by `sslmode=disable` and `prefer` (in plain text); `require`, `verify-ca`, `verify-full` and
//! a URL with only `sslrootcert=system` are refused as `Error::ConnectionRejected`, never
//! connected in plain text (regression, issue 43 item 1: `sslrootcert=system` alone ran as
//! `prefer`, so a relay answering "N" got the connection in plain text). The system server
//! (which has TLS) stands behind a relay that answers "N" itself.

use idemdb::{Config, Error};

use crate::relay;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_tls_is_refused_unless_the_mode_allows_plain() {
    let url = crate::system_url();
    let config: tokio_postgres::Config = url.parse().expect("the system server's URL");
    let target = crate::system_addr();
    let relay = relay::refusing_tls(target);
    let db = config.get_dbname().unwrap_or("test");
    let user = config.get_user().unwrap_or("postgres");
    let via = |query: &str| format!("postgres://{user}@127.0.0.1:{relay}/{db}?{query}");
    // Opened without migrating: the schema's state is none of this test's business, an answer
    // of the server (a store, or SchemaMismatch) is.
    let open = |query: &str| {
        Config::postgres(via(query))
            .migrate_on_open(false)
            .open_async()
    };
    for query in [
        "sslmode=disable",
        "sslmode=prefer",
        "application_name=default-prefer",
    ] {
        match open(query).await {
            Ok(_) | Err(Error::SchemaMismatch { .. }) => {}
            Err(e) => panic!("{query}: a plain connection is allowed, got {e:?}"),
        }
    }
    for query in [
        "sslmode=require",
        "sslrootcert=system",
        "sslmode=verify-full&sslrootcert=system",
    ] {
        match open(query).await {
            Err(e @ Error::ConnectionRejected { .. }) => {
                assert!(!e.is_transient(), "{query}: {e}");
            }
            // A machine without system roots refuses `system` before connecting.
            Err(e @ Error::InvalidInput(_)) if query.contains("system") => {
                assert!(e.to_string().contains("roots"), "{query}: {e}");
            }
            Err(Error::SchemaMismatch { .. }) | Ok(_) => {
                panic!("{query}: connected in plain text")
            }
            Err(e) => panic!("{query}: expected ConnectionRejected, got {e:?}"),
        }
    }
}
