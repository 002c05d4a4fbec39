//! Through PgBouncer in transaction mode (Debian's 1.18, which has no `max_prepared_statements`)
//! a store with `statement_mode=unnamed` runs every call, from several stores at once sharing
//! the pooler's server connections; a store with named prepared statements fails there with a
//! configuration error that names the fix (`statement_mode=unnamed`), never a transient one; and
//! `sslmode=require` to a pooler without TLS is refused as configuration.

use std::time::Duration;

use idemdb::{Config, Error, StatementMode};

use crate::lab::Lab;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let schema = "idemdb_t_connections_pgbouncer";
    let direct = crate::system_url();
    // The pooler drops startup options (a schema's search_path): the test's own database.
    crate::admin(
        &direct,
        &format!("DROP DATABASE IF EXISTS {schema} WITH (FORCE)"),
    )
    .await;
    crate::admin(&direct, &format!("CREATE DATABASE {schema}")).await;
    let port = direct
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap_or("5432")
        .to_string();
    let lab = Lab::new("bouncer", &["bouncer", "--to", &port]);
    let bouncer = format!(
        "postgres://postgres@127.0.0.1:{}/{schema}",
        lab.get("bouncer_port")
    );

    // Unnamed statements: four stores, eight tasks, through four pooled server connections.
    let mut tasks = Vec::new();
    for s in 0..4 {
        let store = Config::postgres(format!("{bouncer}?statement_mode=unnamed"))
            .sweep_interval(None)
            .pool_size(4)
            .open_async()
            .await
            .unwrap_or_else(|e| panic!("through PgBouncer, unnamed statements: {e}"));
        for t in 0..2 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                crate::requests_work(&store, &format!("pgb-{s}-{t}"), 25).await;
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    // The setter says the same.
    let store = Config::postgres(&bouncer)
        .statement_mode(StatementMode::Unnamed)
        .sweep_interval(None)
        .open_async()
        .await
        .unwrap();
    crate::requests_work(&store, "pgb-setter", 5).await;

    // Named prepared statements: they meet another client's server connection and fail, as a
    // configuration error naming the fix (bounded: a few hundred calls from several stores).
    let named_failed = named_statements_fail(&bouncer).await;
    match named_failed {
        Some(e @ Error::ConnectionRejected { .. }) => {
            assert!(e.to_string().contains("statement_mode=unnamed"), "{e}");
            assert!(!e.is_transient());
        }
        Some(other) => panic!("named statements through PgBouncer: {other:?}"),
        None => panic!(
            "named prepared statements never failed through PgBouncer in transaction mode: \
             the pooler is not in transaction mode, or the test does not exercise it"
        ),
    }

    // TLS required of a pooler that offers none.
    match Config::postgres(format!("{bouncer}?sslmode=require&statement_mode=unnamed"))
        .sweep_interval(None)
        .connect_timeout(Duration::from_secs(3))
        .open_async()
        .await
    {
        Err(Error::ConnectionRejected { .. }) => {}
        other => panic!("sslmode=require to a pooler without TLS: {:?}", other.err()),
    }
    drop(lab);
    crate::admin(
        &direct,
        &format!("DROP DATABASE IF EXISTS {schema} WITH (FORCE)"),
    )
    .await;
}

/// The first error of three stores with named prepared statements on the pooler, opening and
/// claiming from concurrent tasks (the schema is there already); `None` if every call succeeds.
async fn named_statements_fail(url: &str) -> Option<Error> {
    let mut stores = Vec::new();
    for _ in 0..3 {
        match Config::postgres(url)
            .sweep_interval(None)
            .pool_size(4)
            .migrate_on_open(false)
            .open_async()
            .await
        {
            Ok(s) => stores.push(s),
            Err(e) => return Some(e),
        }
    }
    // Concurrent callers, so that the pooler interleaves the stores' clients on its server
    // connections.
    let mut tasks = Vec::new();
    for (i, s) in stores.into_iter().enumerate() {
        for t in 0..4 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..50 {
                    let key = format!("named-{i}-{t}-{round}");
                    let _claimed = s
                        .claim("acme", &key, b"fp", idemdb::ClaimOptions::default())
                        .await?;
                }
                Ok::<(), Error>(())
            }));
        }
    }
    let mut first = None;
    for t in tasks {
        if let Err(e) = t.await.unwrap() {
            first.get_or_insert(e);
        }
    }
    first
}
