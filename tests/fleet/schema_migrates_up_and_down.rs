//! The PostgreSQL schema: a new database is migrated on open; `migrate_schema(Some(0))` undoes
//! every step (opening without migrating then fails with `SchemaMismatch`, naming the command
//! to run), and migrating up again restores it; the status lists each step and when it ran.
//! Two instances opening a new database at once apply each step exactly once.

use idemdb::{Config, Error};

use crate::harness::{drop_schema, fresh_schema, in_schema};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let schema = fresh_schema(module_path!()).await;
    let cfg = Config::postgres(in_schema(&schema));
    let status = cfg.schema_status().await.unwrap();
    assert!(status.iter().all(|s| s.applied_at.is_none()), "{status:?}");
    match cfg.clone().migrate_on_open(false).open_async().await {
        Err(Error::SchemaMismatch { expected, .. }) => assert_eq!(expected, status.len() as i32),
        other => panic!("expected SchemaMismatch, got {other:?}"),
    }
    // Eight instances opening a new schema together: each step is applied once.
    let opens: Vec<_> = (0..8)
        .map(|_| tokio::spawn(cfg.clone().open_async()))
        .collect();
    for o in opens {
        o.await.unwrap().unwrap();
    }
    let status = cfg.schema_status().await.unwrap();
    assert!(status.iter().all(|s| s.applied_at.is_some()), "{status:?}");
    let latest = status.last().unwrap().version;
    assert_eq!(cfg.migrate_schema(None).await.unwrap(), Vec::<i32>::new());
    let undone = cfg.migrate_schema(Some(0)).await.unwrap();
    assert_eq!(undone, (1..=latest).rev().collect::<Vec<_>>());
    assert!(cfg
        .schema_status()
        .await
        .unwrap()
        .iter()
        .all(|s| s.applied_at.is_none()));
    assert!(matches!(
        cfg.clone().migrate_on_open(false).open_async().await,
        Err(Error::SchemaMismatch { .. })
    ));
    assert_eq!(
        cfg.migrate_schema(None).await.unwrap(),
        (1..=latest).collect::<Vec<_>>()
    );
    cfg.clone()
        .migrate_on_open(false)
        .open_async()
        .await
        .unwrap();
    assert!(matches!(
        cfg.migrate_schema(Some(latest + 1)).await,
        Err(Error::InvalidInput(_))
    ));
    drop_schema(&schema).await;
}
