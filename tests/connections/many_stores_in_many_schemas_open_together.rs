//! Forty-five stores in nine schemas of one server open at the same moment and all work: the
//! migration lock belongs to a schema, and a store whose schema is current takes none. A store
//! that must migrate while another session holds its schema's lock waits for
//! `Config::migration_lock_timeout`, then fails with its own error (`Error::MigrationTimeout`,
//! transient), not the statement timeout's; a store on a current schema opens meanwhile.

use std::time::Duration;

use idemdb::{Config, Error};

fn in_schema(schema: &str) -> String {
    format!(
        "{}?options=-c%20search_path%3D{schema}",
        crate::system_url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let direct = crate::system_url();
    let schemas: Vec<String> = (0..9)
        .map(|i| format!("idemdb_t_connections_many_{i}"))
        .collect();
    for s in &schemas {
        crate::admin(
            &direct,
            &format!("DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}"),
        )
        .await;
    }
    let mut opens = Vec::new();
    for i in 0..45 {
        let url = in_schema(&schemas[i % schemas.len()]);
        opens.push(tokio::spawn(async move {
            let store = Config::postgres(url)
                .sweep_interval(None)
                .pool_size(2)
                .open_async()
                .await
                .unwrap_or_else(|e| panic!("store {i} of 45 opening together: {e}"));
            crate::requests_work(&store, &format!("many-{i}"), 1).await;
        }));
    }
    for o in opens {
        o.await.unwrap();
    }

    // Another session holds the lock of a schema that still needs its migrations.
    let held = "idemdb_t_connections_many_held";
    crate::admin(
        &direct,
        &format!("DROP SCHEMA IF EXISTS {held} CASCADE; CREATE SCHEMA {held}"),
    )
    .await;
    let (client, conn) = tokio_postgres::connect(&in_schema(held), tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    client
        .execute(
            "SELECT pg_advisory_lock($1, hashtext(current_schema()))",
            &[&0x6964_656d_i32],
        )
        .await
        .unwrap();
    let r = Config::postgres(in_schema(held))
        .sweep_interval(None)
        .migration_lock_timeout(Duration::from_secs(1))
        .statement_timeout(Duration::from_secs(30))
        .open_async()
        .await;
    match r {
        Err(e @ Error::MigrationTimeout { .. }) => assert!(e.is_transient(), "{e}"),
        other => panic!(
            "a held migration lock: MigrationTimeout expected, got {:?}",
            other.err()
        ),
    }
    // A store whose schema is current opens while that lock is held (and the lock is the
    // schema's: the held one blocks none of the nine).
    let store = Config::postgres(in_schema(&schemas[0]))
        .sweep_interval(None)
        .open_async()
        .await
        .unwrap();
    crate::requests_work(&store, "many-while-held", 1).await;
    drop(client);
    let _ = task.await;
    // Released: the held schema migrates.
    let store = Config::postgres(in_schema(held))
        .sweep_interval(None)
        .open_async()
        .await
        .unwrap();
    crate::requests_work(&store, "many-after", 1).await;
    for s in schemas.iter().map(String::as_str).chain([held]) {
        crate::admin(&direct, &format!("DROP SCHEMA IF EXISTS {s} CASCADE")).await;
    }
}
