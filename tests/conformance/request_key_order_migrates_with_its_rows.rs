//! Migration 4 reorders the request table's primary key to `(key, tenant, ns)`; run on a table
//! that holds records, in either direction, it keeps every row: a record completed before the
//! step is replayed after it, a live lease is still held (its holder completes it), and two
//! tenants' records under the same key stay apart.

use idemdb::{Claim, ClaimOptions, Config, Response};

use crate::harness::{drop_schema, fresh_schema, in_schema, pg_url};

/// The request table's primary key columns, in index order.
async fn key_columns(schema: &str) -> Vec<String> {
    let (client, conn) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {} cannot be reached: {e}", pg_url()));
    let task = tokio::spawn(conn);
    let rows = client
        .query(
            "SELECT a.attname::text FROM pg_index i
             JOIN pg_class c ON c.oid = i.indrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(att, pos) ON true
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.att
             WHERE n.nspname = $1 AND c.relname = 'idemdb_requests' AND i.indisprimary
             ORDER BY k.pos",
            &[&schema],
        )
        .await
        .unwrap();
    drop(client);
    let _ = task.await;
    rows.iter().map(|r| r.get(0)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let schema = fresh_schema(module_path!()).await;
    let cfg = Config::postgres(in_schema(&schema));
    let store = cfg.clone().open_async().await.unwrap();
    assert_eq!(key_columns(&schema).await, ["key", "tenant", "ns"]);
    let receipt = Response::new(b"paid".to_vec()).with_status(201);
    let Claim::Acquired(done) = store
        .claim("acme", "order-1", b"fp", ClaimOptions::default())
        .await
        .unwrap()
    else {
        panic!("a new key is acquired");
    };
    store
        .complete(&done, receipt.clone())
        .await
        .unwrap()
        .unwrap();
    let Claim::Acquired(held) = store
        .claim("globex", "order-1", b"fp2", ClaimOptions::default())
        .await
        .unwrap()
    else {
        panic!("the same key of another tenant is another record");
    };
    drop(store);

    for (to, columns) in [(3, ["ns", "tenant", "key"]), (4, ["key", "tenant", "ns"])] {
        cfg.migrate_schema(Some(to)).await.unwrap();
        assert_eq!(
            key_columns(&schema).await,
            columns,
            "after migrating to {to}"
        );
    }
    let store = cfg.clone().open_async().await.unwrap();
    match store
        .claim("acme", "order-1", b"fp", ClaimOptions::default())
        .await
        .unwrap()
    {
        Claim::Completed(r) => assert_eq!(r.response, receipt),
        other => panic!("the completed record survives both steps, got {other:?}"),
    }
    assert!(matches!(
        store
            .claim("globex", "order-1", b"fp2", ClaimOptions::default())
            .await
            .unwrap(),
        Claim::InProgress { .. }
    ));
    store
        .complete(&held, Response::new(b"ok".to_vec()))
        .await
        .unwrap()
        .expect("the lease taken before the steps is still held");
    drop(store);
    drop_schema(&schema).await;
}
