//! What the fleet benchmarks (`src/bin/fleet.rs`, `src/bin/fleet_ops.rs`) share: the PostgreSQL
//! server they use, its error messages and connection, a quantile, and the `main` that runs an
//! async benchmark and turns its outcome into an exit status.

use std::time::Duration;

use tokio_postgres::NoTls;

pub type R<T> = Result<T, String>;

/// The PostgreSQL server the benchmarks use: `IDEMDB_BENCH_PG_URL` when set (a `pg-lab pair`'s
/// primary, say), else the local server at 127.0.0.1:5432, database `test`. A URL with no `?`
/// (the benchmarks append their options after one).
pub static PG_URL: PgUrl = PgUrl(std::sync::LazyLock::new(|| {
    std::env::var("IDEMDB_BENCH_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}));

/// [`PG_URL`]'s type: the URL, read from the environment once.
pub struct PgUrl(std::sync::LazyLock<String>);

impl std::fmt::Display for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A PostgreSQL error with the server's SQLSTATE and message.
pub fn pg_err(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!(
            "PostgreSQL at {PG_URL}: {}: {}",
            db.code().code(),
            db.message()
        ),
        None => format!("PostgreSQL at {PG_URL}: {e}"),
    }
}

/// A plain connection to the server (with `search_path` set to `schema` if given); a server
/// that does not answer within 2 s fails the run, naming it.
pub async fn pg_client(schema: Option<&str>) -> R<tokio_postgres::Client> {
    let url = match schema {
        Some(s) => format!("{PG_URL}?options=-c%20search_path%3D{s}"),
        None => PG_URL.to_string(),
    };
    let (client, conn) =
        tokio::time::timeout(Duration::from_secs(2), tokio_postgres::connect(&url, NoTls))
            .await
            .map_err(|_| format!("PostgreSQL at {PG_URL} did not answer within 2 s"))?
            .map_err(|e| format!("cannot connect to PostgreSQL at {PG_URL}: {e}"))?;
    tokio::spawn(conn);
    Ok(client)
}

/// The `p` quantile (0 to 1) of sorted samples, nearest rank.
pub fn quantile(sorted: &[u64], p: f64) -> u64 {
    match sorted.len() {
        0 => 0,
        n => sorted[((n - 1) as f64 * p).round() as usize],
    }
}

/// Parses the arguments and runs the benchmark on a multi-threaded runtime: exit status 2 for
/// bad arguments, 1 for a failed run, each with the message on stderr under `name`.
pub fn run_main<S, F>(
    name: &str,
    parse: impl FnOnce() -> R<S>,
    run: impl FnOnce(S) -> F,
) -> std::process::ExitCode
where
    F: std::future::Future<Output = R<()>>,
{
    let s = match parse() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{name}: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match rt.block_on(run(s)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
