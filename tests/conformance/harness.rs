//! Opens a store of each backend for one test.

use std::time::Duration;

use idemdb::{AsyncStore, Config, Durability, ManualClock, OnDisk, OnPostgres};

/// The PostgreSQL server of the suite, as the stores under test reach it (`IDEMDB_TEST_POSTGRES`
/// may add idemdb's options: `?sslmode=verify-full&sslrootcert=...`, `?statement_mode=unnamed`,
/// or point at a pooler).
pub fn pg_url() -> String {
    std::env::var("IDEMDB_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// The same server as the suite's administrator reaches it, plainly (`IDEMDB_TEST_POSTGRES_ADMIN`;
/// default: [`pg_url`]).
pub fn admin_url() -> String {
    std::env::var("IDEMDB_TEST_POSTGRES_ADMIN").unwrap_or_else(|_| pg_url())
}

/// Whether the PostgreSQL stores under test coalesce concurrent calls into one statement
/// (`IDEMDB_TEST_COALESCING=off` turns it off; `./scripts/test` runs the suite's PostgreSQL half
/// both ways).
pub fn coalescing() -> bool {
    std::env::var("IDEMDB_TEST_COALESCING").map_or(true, |v| v != "off")
}

/// Whether the PostgreSQL stores under test buffer new keys' claims (`Config::buffered_claims`;
/// `IDEMDB_TEST_BUFFERED=off` turns it off; `./scripts/test` runs the suite's PostgreSQL half
/// both ways, with coalescing).
pub fn buffered() -> bool {
    std::env::var("IDEMDB_TEST_BUFFERED").map_or(true, |v| v != "off")
}

/// A store under test, its manual clock, and what to remove afterwards.
pub struct Harness {
    pub store: AsyncStore,
    pub clock: ManualClock,
    _dir: Option<tempfile::TempDir>,
    schema: Option<String>,
}

impl Harness {
    /// An embedded store (synced, so that its calls run on the blocking pool as in production).
    pub async fn embedded(settings: fn(Config<OnDisk>) -> Config<OnDisk>) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::default();
        let cfg = settings(
            Config::new(dir.path())
                .clock(clock.clone())
                .durability(Durability::Synced)
                .sweep_interval(None),
        );
        let store = cfg.open_async().await.unwrap();
        Harness {
            store,
            clock,
            _dir: Some(dir),
            schema: None,
        }
    }

    /// A PostgreSQL store in a new schema named after the test (dropped first if a failed run
    /// left it behind).
    pub async fn postgres(
        test: &str,
        settings: fn(Config<OnPostgres>) -> Config<OnPostgres>,
    ) -> Harness {
        let schema = fresh_schema(test).await;
        let clock = ManualClock::default();
        let cfg = settings(pg_config(&schema, &clock));
        let store = cfg.open_async().await.unwrap();
        Harness {
            store,
            clock,
            _dir: None,
            schema: Some(schema),
        }
    }

    /// Another instance of the store under test, as a second process of a fleet would open it:
    /// on PostgreSQL a store of its own (its own pool and listening connection) on the same
    /// schema and test clock; embedded, the same store (one process holds it).
    pub async fn another_instance(&self) -> AsyncStore {
        match &self.schema {
            Some(schema) => pg_config(schema, &self.clock).open_async().await.unwrap(),
            None => self.store.clone(),
        }
    }

    /// The PostgreSQL store's schema (or database: [`database_per_test`]).
    pub fn schema(&self) -> Option<String> {
        self.schema.clone()
    }

    /// Whether the store is on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.schema.is_some()
    }

    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    /// Drops the test's schema (PostgreSQL).
    pub async fn cleanup(self) {
        if let Some(schema) = &self.schema {
            drop(self.store);
            drop_schema(schema).await;
        }
    }
}

/// The configuration of a PostgreSQL store under test in `schema`, on the test clock. Through
/// a pooler in transaction mode (`IDEMDB_TEST_ISOLATION=database`), waiting claims listen on a
/// direct connection (`Config::listen_url`: a pooler cannot carry `LISTEN`).
fn pg_config(schema: &str, clock: &ManualClock) -> Config<OnPostgres> {
    let cfg = Config::postgres(in_schema(schema))
        .postgres_test_clock(clock.clone())
        .pool_size(8)
        .coalescing(coalescing())
        .buffered_claims(buffered());
    if database_per_test() {
        cfg.listen_url(with_database(&admin_url(), schema))
    } else {
        cfg
    }
}

/// Whether each test gets a database of its own instead of a schema
/// (`IDEMDB_TEST_ISOLATION=database`): for a pooler in transaction mode, which drops the startup
/// options that set a schema's `search_path` but routes any database name to the server.
fn database_per_test() -> bool {
    std::env::var("IDEMDB_TEST_ISOLATION").is_ok_and(|v| v == "database")
}

/// A new, empty schema (or database, see [`database_per_test`]) for the test at `module`
/// (dropped first if a failed run left it behind).
pub async fn fresh_schema(module: &str) -> String {
    let schema = schema_name(module);
    if database_per_test() {
        admin(&format!("DROP DATABASE IF EXISTS {schema} WITH (FORCE)")).await;
        admin(&format!("CREATE DATABASE {schema}")).await;
    } else {
        admin(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await;
    }
    schema
}

/// Drops a test's schema (or database) with everything in it.
pub async fn drop_schema(schema: &str) {
    if database_per_test() {
        admin(&format!("DROP DATABASE IF EXISTS {schema} WITH (FORCE)")).await;
    } else {
        admin(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await;
    }
}

/// The schema of a test: its module path, in characters PostgreSQL takes unquoted.
pub fn schema_name(test: &str) -> String {
    let mut s: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    s.truncate(54); // PostgreSQL names are at most 63 bytes
    format!("idemdb_t_{s}")
}

/// The suite's URL with `search_path` set to `schema`.
pub fn in_schema(schema: &str) -> String {
    with_search_path(pg_url(), schema)
}

/// The administrator's URL with `search_path` set to `schema`, for a test's own client.
pub fn admin_in_schema(schema: &str) -> String {
    with_search_path(admin_url(), schema)
}

fn with_search_path(url: String, schema: &str) -> String {
    if database_per_test() {
        return with_database(&url, schema);
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

/// `url` (`postgres://auth@hosts/db?query`) naming the database `db` instead.
fn with_database(url: &str, db: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let authority = before_query.split('/').next().unwrap_or(before_query);
    match query {
        Some(q) => format!("{scheme}://{authority}/{db}?{q}"),
        None => format!("{scheme}://{authority}/{db}"),
    }
}

/// Runs SQL as the suite's administrator; fails the test naming the server if it is down.
pub async fn admin(sql: &str) {
    let url = admin_url();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL at {url} is needed by this test and cannot be reached: {e}")
        });
    let task = tokio::spawn(conn);
    client.batch_execute(sql).await.unwrap();
    drop(client);
    let _ = task.await;
}

/// Defines `embedded` and `postgres` tests that run `check` (an `async fn(&Harness)`) on a
/// store of each backend, opened with `settings` (default: the defaults).
macro_rules! on_both_backends {
    ($check:path) => {
        on_both_backends!($check, |c| c);
    };
    ($check:path, $settings:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn embedded() {
            let h = $crate::harness::Harness::embedded($settings).await;
            $check(&h).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn postgres() {
            let h = $crate::harness::Harness::postgres(module_path!(), $settings).await;
            $check(&h).await;
            h.cleanup().await;
        }
    };
}
