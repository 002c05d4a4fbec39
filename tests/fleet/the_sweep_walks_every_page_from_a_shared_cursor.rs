//! On PostgreSQL no index orders the rows by expiry (migration 9): the sweep reads the table's
//! pages range by range from a cursor that every instance shares. A sweep that starts anywhere in
//! the table comes round and deletes every expired row it passes, on every range, however many
//! each holds; two instances sweeping at once share the walk and delete each row once between
//! them; a live row is never deleted.

use idemdb::{AsyncStore, Config};

use crate::harness::{admin_in_schema, drop_schema, fresh_schema, in_schema};

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url} is unreachable: {e}"));
    tokio::spawn(conn);
    client
}

async fn count(c: &tokio_postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

/// `n` completed rows of about 500 bytes each, every other one expired long ago (the even keys)
/// and the rest live for centuries: several of the sweep's 1,024-page ranges, each holding many
/// batches of expired rows.
async fn fill(c: &tokio_postgres::Client, n: i64) {
    c.execute(
        "INSERT INTO idemdb_requests (ns, tenant, key, fingerprint, created_at, expires_at, fence,
             attempts, takeovers, state, lease_until, finished_at, response_body)
         SELECT 0, 't'::bytea, convert_to('k' || g, 'UTF8'), 'fp'::bytea, 1,
             CASE WHEN g % 2 = 0 THEN 2 ELSE 9000000000000000 END, g, 1, 0, 2, 1, 1,
             convert_to(repeat('r', 400), 'UTF8')
         FROM generate_series(1, $1::bigint) g",
        &[&n],
    )
    .await
    .unwrap();
}

/// Sweeps in batches of 1,000 until one comes back short; how many it deleted.
async fn sweep_all(s: &AsyncStore) -> usize {
    let mut total = 0;
    loop {
        let n = s.sweep(1_000).await.unwrap();
        total += n;
        if n < 1_000 {
            return total;
        }
    }
}

fn store(url: &str) -> Config<idemdb::OnPostgres> {
    Config::postgres(url).sweep_interval(None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let schema = fresh_schema(module_path!()).await;
    let url = in_schema(&schema);
    let a = store(&url).open_async().await.unwrap();
    let b = store(&url).open_async().await.unwrap();
    let admin = client(&admin_in_schema(&schema)).await;
    fill(&admin, 40_000).await;
    let pages = count(
        &admin,
        "SELECT pg_relation_size('idemdb_requests') / current_setting('block_size')::bigint",
    )
    .await;
    assert!(
        pages > 2 * 1_024,
        "the table spans several ranges: {pages} pages"
    );

    // One instance, starting in the middle of the table: it comes round and passes every page.
    admin
        .execute("UPDATE idemdb_sweep SET next_page = $1", &[&(pages / 2)])
        .await
        .unwrap();
    assert_eq!(sweep_all(&a).await, 20_000, "every expired row, once");
    assert_eq!(
        count(&admin, "SELECT count(*) FROM idemdb_requests").await,
        20_000,
        "the live rows stay"
    );
    assert_eq!(
        count(
            &admin,
            "SELECT count(*) FROM idemdb_requests WHERE expires_at < 1000"
        )
        .await,
        0
    );

    // Two instances at once, on a table filled again: between them every expired row is
    // deleted once, and nothing live.
    admin
        .execute("DELETE FROM idemdb_requests", &[])
        .await
        .unwrap();
    fill(&admin, 40_000).await;
    let (x, y) = tokio::join!(sweep_all(&a), sweep_all(&b));
    assert_eq!(x + y, 20_000, "shared between them: {x} and {y}");
    assert_eq!(
        count(&admin, "SELECT count(*) FROM idemdb_requests").await,
        20_000
    );
    let laps = count(&admin, "SELECT laps FROM idemdb_sweep").await;
    assert!(laps >= 2, "the walk came round: {laps} laps");

    // Nothing expired: a sweep walks once round and deletes nothing.
    assert_eq!(a.sweep(1_000).await.unwrap(), 0);
    drop((a, b));
    drop_schema(&schema).await;
}
