//! `Config::synchronous_commit(SynchronousCommit::RemoteApply)` makes the store's sessions wait
//! for the synchronous standby to apply each commit: the setting reaches the server (`SHOW
//! synchronous_commit` in the store's own session answers `remote_apply`, where a store without
//! it answers the server's `on`), and every completion is visible on the standby as soon as the
//! call returns (read there right after each one; with `on` that read could still find the
//! record pending, so this part shows the promise, the `SHOW` the mechanism).

use std::time::Duration;

use idemdb::{Claim, ClaimOptions, Config, Response, SqlValue, SynchronousCommit};

use crate::lab::{self, Lab, Role};

async fn session_setting(store: &idemdb::AsyncStore) -> Vec<Vec<SqlValue>> {
    let mut tx = store.transaction().await.unwrap();
    let rows = tx.query("SHOW synchronous_commit", &[]).await.unwrap();
    tx.rollback().await.unwrap();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_sync_pair() {
    let lab = tokio::task::spawn_blocking(|| Lab::pair(true))
        .await
        .unwrap();
    let plain = lab::open(lab.primary_url(), 2, Duration::from_secs(10)).await;
    assert_eq!(
        session_setting(&plain).await,
        vec![vec![SqlValue::Text("on".into())]],
        "without the setter the server's own setting"
    );
    let store = Config::postgres(lab.url())
        .synchronous_commit(SynchronousCommit::RemoteApply)
        .pool_size(2)
        .sweep_interval(None)
        .open_async()
        .await
        .unwrap();
    assert_eq!(
        session_setting(&store).await,
        vec![vec![SqlValue::Text("remote_apply".into())]]
    );
    for i in 0..lab::size("IDEMDB_FAILOVER_KEYS", 20) {
        let key = format!("applied-{i}");
        let Claim::Acquired(lease) = store
            .claim("acme", &key, b"fp", ClaimOptions::default())
            .await
            .unwrap()
        else {
            panic!("{key} is new");
        };
        store
            .complete(&lease, Response::new(b"done".to_vec()))
            .await
            .unwrap()
            .expect("the holder completes");
        let sql =
            format!("SELECT state FROM idemdb_requests WHERE key = convert_to('{key}', 'UTF8')");
        let on_standby = lab.blocking(move |l| l.psql(Role::Standby, &sql)).await;
        assert_eq!(
            on_standby, "2",
            "{key}: completed on the primary, but the standby shows {on_standby:?} right after"
        );
    }
}
