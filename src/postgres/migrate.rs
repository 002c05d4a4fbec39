//! Running the migrations of `migrations.rs` against a database: reading the schema version,
//! applying and undoing steps, and listing what was applied. A file of its own, beside the
//! migrations, because `migrations.rs` holds the released steps' text, which never changes, and
//! this is the code that runs them, which may. Invariants: each step runs in its own transaction
//! under the advisory lock of the schema it changes, and records (or, undone, deletes) its
//! version in `idemdb_migrations` in that transaction, so instances that open the store at the
//! same moment apply each step exactly once; the wait for the lock is bounded by the migration
//! lock timeout ([`Error::MigrationTimeout`]); reading the version takes no lock, so a store
//! opening on a current schema waits for no other instance.

use tokio_postgres::error::SqlState;

use super::errors::classify;
use super::migrations;
use super::pool::Conn;
use super::send::Session;
use super::store::PgStore;
use crate::error::{Error, Result};

impl PgStore {
    /// The highest applied schema version (0: none), read without any lock (a store opening on
    /// a current schema waits for no other instance).
    pub(crate) async fn schema_version(&self) -> Result<i32> {
        let c = self.conn().await?;
        self.timed(async move {
            let exists = c
                .one(
                    self.mode,
                    "SELECT to_regclass('idemdb_migrations') IS NOT NULL",
                    &[],
                )
                .await
                .map_err(classify)?
                .is_some_and(|r| r.get::<_, bool>(0));
            let version = if exists {
                c.one(
                    self.mode,
                    "SELECT COALESCE(max(version), 0) FROM idemdb_migrations",
                    &[],
                )
                .await
                .map_err(classify)?
                .map_or(0, |r| r.get::<_, i32>(0))
            } else {
                0
            };
            c.keep();
            Ok(version)
        })
        .await
    }

    /// Applies every migration above the current version, up to `to` (default: all), each in
    /// its own transaction under the schema's advisory lock. Returns the versions applied. When
    /// the schema is already there, no lock is taken.
    pub(crate) async fn migrate_up(&self, to: Option<i32>) -> Result<Vec<i32>> {
        let target = to.unwrap_or_else(migrations::current_version);
        if self.schema_version().await? >= target {
            return Ok(Vec::new());
        }
        let mut c = self.conn().await?;
        let mut applied = Vec::new();
        for m in migrations::MIGRATIONS {
            if m.version > target {
                break;
            }
            if self.run_step(&mut c, m, true).await? {
                applied.push(m.version);
            }
        }
        c.keep();
        Ok(applied)
    }

    /// Undoes the applied migrations above version `to` (0: all of them, dropping every idemdb
    /// table and its data), newest first. Returns the versions undone.
    pub(crate) async fn migrate_down(&self, to: i32) -> Result<Vec<i32>> {
        if self.schema_version().await? <= to {
            return Ok(Vec::new());
        }
        let mut c = self.conn().await?;
        let mut undone = Vec::new();
        for m in migrations::MIGRATIONS.iter().rev() {
            if m.version <= to {
                break;
            }
            if self.run_step(&mut c, m, false).await? {
                undone.push(m.version);
            }
        }
        c.keep();
        Ok(undone)
    }

    /// The applied migrations: (version, name, applied at, as text).
    pub(crate) async fn migration_status(&self) -> Result<Vec<(i32, String, String)>> {
        if self.schema_version().await? == 0 {
            return Ok(Vec::new());
        }
        let c = self.conn().await?;
        let rows = c
            .rows(
                self.mode,
                "SELECT version, name, applied_at::text FROM idemdb_migrations ORDER BY version",
                &[],
            )
            .await
            .map_err(classify)?;
        c.keep();
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    /// Runs one migration step, up or down, in its own transaction under the advisory lock of
    /// the schema it changes (`current_schema()`: stores in other schemas of the server never
    /// wait for each other); whether it ran (not when the bookkeeping says it is already
    /// applied, or not applied). The wait for the lock is bounded by the migration lock timeout
    /// (its own error, [`Error::MigrationTimeout`]), not by the statement timeout, and the
    /// step's statements by nothing but the server.
    async fn run_step(&self, c: &mut Conn, m: &migrations::Migration, up: bool) -> Result<bool> {
        let wait = self.migration_lock_timeout;
        let locked = |e: tokio_postgres::Error| {
            if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
                Error::MigrationTimeout { waited: wait }
            } else {
                classify(e)
            }
        };
        let tx = c.transaction().await.map_err(classify)?;
        tx.batch_execute(&format!(
            "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = {}",
            wait.as_millis().max(1)
        ))
        .await
        .map_err(classify)?;
        tx.changed(self.mode, migrations::LOCK, &[&migrations::LOCK_CLASS])
            .await
            .map_err(locked)?;
        tx.batch_execute(migrations::BOOKKEEPING)
            .await
            .map_err(locked)?;
        let applied = tx
            .one(
                self.mode,
                "SELECT 1 FROM idemdb_migrations WHERE version = $1",
                &[&m.version],
            )
            .await
            .map_err(classify)?
            .is_some();
        let runs = applied != up;
        if runs && up {
            tx.batch_execute(m.up).await.map_err(locked)?;
            tx.changed(
                self.mode,
                "INSERT INTO idemdb_migrations (version, name) VALUES ($1, $2)",
                &[&m.version, &m.name],
            )
            .await
            .map_err(classify)?;
        } else if runs {
            tx.batch_execute(m.down).await.map_err(locked)?;
            tx.changed(
                self.mode,
                "DELETE FROM idemdb_migrations WHERE version = $1",
                &[&m.version],
            )
            .await
            .map_err(classify)?;
        }
        tx.commit().await.map_err(classify)?;
        Ok(runs)
    }
}
