//! On PostgreSQL a sweeper leaves a lap under way to the instance walking it, and takes it over
//! once its cursor has not moved for a minute (its walker crashed or lost the database): a lap
//! left half-done never stops the fleet's sweeping.

use std::time::{Duration, Instant};

use idemdb::Config;

use crate::harness::{admin_in_schema, drop_schema, fresh_schema, in_schema};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let schema = fresh_schema(module_path!()).await;
    let url = in_schema(&schema);
    // The schema, with no sweeper.
    drop(
        Config::postgres(&url)
            .sweep_interval(None)
            .open_async()
            .await
            .unwrap(),
    );
    let admin_url = admin_in_schema(&schema);
    let (admin, conn) = tokio_postgres::connect(&admin_url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {admin_url} is unreachable: {e}"));
    tokio::spawn(conn);
    // 3,000 rows expired long ago, on a few pages; a lap left at page 1 by a sweeper whose cursor
    // last moved in 1970.
    admin
        .execute(
            "INSERT INTO idemdb_requests (ns, tenant, key, fingerprint, created_at, expires_at,
                 fence, attempts, takeovers, state, lease_until)
             SELECT 0, 't'::bytea, convert_to('k' || g, 'UTF8'), 'fp'::bytea, 1, 2, g, 1, 0, 2, 1
             FROM generate_series(1, 3000) g",
            &[],
        )
        .await
        .unwrap();
    admin
        .execute(
            "UPDATE idemdb_sweep SET next_page = 1, moved_at = 0, lap_ended_at = 0",
            &[],
        )
        .await
        .unwrap();
    let store = Config::postgres(&url)
        .sweep_interval(Some(Duration::from_millis(50)))
        .sweep_pages_per_second(1_000_000)
        .open_async()
        .await
        .unwrap();
    let start = Instant::now();
    loop {
        let left: i64 = admin
            .query_one("SELECT count(*) FROM idemdb_requests", &[])
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the lap left at page 1 was never taken over: {left} expired rows remain"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let laps: i64 = admin
        .query_one("SELECT laps FROM idemdb_sweep", &[])
        .await
        .unwrap()
        .get(0);
    assert!(laps >= 1, "the lap was finished and another walked");
    drop(store);
    drop_schema(&schema).await;
}
