//! The application's transaction on PostgreSQL: the application's own statements and idemdb's
//! commit (a lease completed, a message marked processed, entities written) on one connection in
//! one transaction, so that they commit together or not at all (the transactional inbox).
//! Invariants: a transaction that is dropped without `commit`/`rollback` never goes back to the
//! pool with a transaction open (its connection is closed, which rolls it back); idemdb's
//! operations run after the application's, in a fixed order of tables and keys, each decided by
//! the database under the rows' locks; a conflict rolls back everything, the application's
//! statements included.

use std::error::Error as StdError;
use std::sync::Arc;

use bytes::BytesMut;
use tokio_postgres::types::{IsNull, ToSql, Type};
use tokio_postgres::Row;

use super::commit::run_form;
use super::errors::classify;
use super::send::Session;
use super::store::PgStore;
use super::Postgres;
use crate::commit::{CommitConflict, Committed, Plan};
use crate::error::{Error, Result};

/// A value passed to, or read from, the application's SQL in a [`SqlTransaction`]. Parameters
/// convert to the type PostgreSQL infers for them: an `Int` to `smallint`, `integer` or `bigint`
/// (refused when out of range) or a float; `Text` to `text`, `varchar` or `char`; `Bytes` to
/// `bytea`. Any other column type: cast it in the SQL (`$1::text::uuid`, `total::text`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SqlValue {
    /// SQL `NULL`.
    Null,
    /// `boolean`.
    Bool(bool),
    /// `smallint`, `integer` or `bigint`.
    Int(i64),
    /// `real` or `double precision`.
    Float(f64),
    /// `text`, `varchar`, `char`, `name`.
    Text(String),
    /// `bytea`.
    Bytes(Vec<u8>),
}

impl From<bool> for SqlValue {
    fn from(v: bool) -> Self {
        SqlValue::Bool(v)
    }
}
impl From<i64> for SqlValue {
    fn from(v: i64) -> Self {
        SqlValue::Int(v)
    }
}
impl From<i32> for SqlValue {
    fn from(v: i32) -> Self {
        SqlValue::Int(v.into())
    }
}
impl From<u32> for SqlValue {
    fn from(v: u32) -> Self {
        SqlValue::Int(v.into())
    }
}
impl From<f64> for SqlValue {
    fn from(v: f64) -> Self {
        SqlValue::Float(v)
    }
}
impl From<&str> for SqlValue {
    fn from(v: &str) -> Self {
        SqlValue::Text(v.to_owned())
    }
}
impl From<String> for SqlValue {
    fn from(v: String) -> Self {
        SqlValue::Text(v)
    }
}
impl From<Vec<u8>> for SqlValue {
    fn from(v: Vec<u8>) -> Self {
        SqlValue::Bytes(v)
    }
}
impl From<&[u8]> for SqlValue {
    fn from(v: &[u8]) -> Self {
        SqlValue::Bytes(v.to_vec())
    }
}
impl<T: Into<SqlValue>> From<Option<T>> for SqlValue {
    fn from(v: Option<T>) -> Self {
        v.map_or(SqlValue::Null, Into::into)
    }
}

/// A parameter as the driver sends it: converted to the type the server inferred.
#[derive(Debug)]
struct Param<'a>(&'a SqlValue);

type BoxError = Box<dyn StdError + Sync + Send>;

impl ToSql for Param<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
        let refused = |what: &str| -> BoxError {
            format!("idemdb: a {what} parameter cannot be sent as {ty}; cast it in the SQL").into()
        };
        match self.0 {
            SqlValue::Null => Ok(IsNull::Yes),
            SqlValue::Bool(b) if *ty == Type::BOOL => b.to_sql(ty, out),
            SqlValue::Int(i) => match *ty {
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT8 => i.to_sql(ty, out),
                #[allow(clippy::cast_precision_loss)]
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                _ => Err(refused("integer")),
            },
            SqlValue::Float(f) => match *ty {
                #[allow(clippy::cast_possible_truncation)]
                Type::FLOAT4 => (*f as f32).to_sql(ty, out),
                Type::FLOAT8 => f.to_sql(ty, out),
                _ => Err(refused("float")),
            },
            SqlValue::Text(s) if <&str as ToSql>::accepts(ty) => s.as_str().to_sql(ty, out),
            SqlValue::Bytes(b) if *ty == Type::BYTEA => b.as_slice().to_sql(ty, out),
            SqlValue::Bool(_) => Err(refused("boolean")),
            SqlValue::Text(_) => Err(refused("text")),
            SqlValue::Bytes(_) => Err(refused("bytes")),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// The type an unnamed statement ([`crate::StatementMode::Unnamed`]) declares for a value: its
/// widest (a `NULL` is sent as `text`: cast it in the SQL where another type is needed).
impl super::send::Param for Param<'_> {
    fn pg_type(&self) -> Type {
        match self.0 {
            SqlValue::Null | SqlValue::Text(_) => Type::TEXT,
            SqlValue::Bool(_) => Type::BOOL,
            SqlValue::Int(_) => Type::INT8,
            SqlValue::Float(_) => Type::FLOAT8,
            SqlValue::Bytes(_) => Type::BYTEA,
        }
    }
}

/// A result row's values, for the column types [`SqlValue`] has.
fn values(row: &Row) -> Result<Vec<SqlValue>> {
    let bad = |i: usize, ty: &Type| {
        Error::misuse(format!(
            "column {i} is of type {ty}, which SqlValue does not hold: cast it in the SQL \
             (for example `col::text`)"
        ))
    };
    let mut out = Vec::with_capacity(row.len());
    for (i, col) in row.columns().iter().enumerate() {
        let ty = col.type_();
        let v = match *ty {
            Type::BOOL => row.try_get::<_, Option<bool>>(i).map(SqlValue::from),
            Type::INT2 => row
                .try_get::<_, Option<i16>>(i)
                .map(|v| v.map(i64::from).into()),
            Type::INT4 => row
                .try_get::<_, Option<i32>>(i)
                .map(|v| v.map(i64::from).into()),
            Type::INT8 => row.try_get::<_, Option<i64>>(i).map(SqlValue::from),
            Type::FLOAT4 => row
                .try_get::<_, Option<f32>>(i)
                .map(|v| v.map(f64::from).into()),
            Type::FLOAT8 => row.try_get::<_, Option<f64>>(i).map(SqlValue::from),
            Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(i).map(SqlValue::from),
            _ if <String as tokio_postgres::types::FromSql>::accepts(ty) => {
                row.try_get::<_, Option<String>>(i).map(SqlValue::from)
            }
            _ => return Err(bad(i, ty)),
        };
        out.push(v.map_err(classify)?);
    }
    Ok(out)
}

/// A transaction the application owns, on a connection of the store's pool (see
/// [`crate::AsyncStore::transaction`]): run the application's statements with
/// [`SqlTransaction::execute`] and [`SqlTransaction::query`], then end it with
/// [`SqlTransaction::commit_with`] (idemdb's operations and the application's commit together,
/// or neither), [`SqlTransaction::commit`] or [`SqlTransaction::rollback`]. Dropped unfinished,
/// it is rolled back (its connection is closed, never returned to the pool mid-transaction).
/// The server's `statement_timeout` bounds each statement; a database that is away is
/// `Error::Unavailable`, after which the outcome of a `commit_with` is unknown only in the way
/// a lost commit always is (all of it or none of it, never a part).
pub struct SqlTransaction {
    client: Option<deadpool_postgres::Object>,
    pg: Arc<PgStore>,
    /// Whether `BEGIN` was sent (a commit applied with no statement of the application's sends
    /// it together with its operations).
    begun: bool,
}

impl std::fmt::Debug for SqlTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlTransaction").finish_non_exhaustive()
    }
}

impl SqlTransaction {
    pub(crate) async fn begin(pg: Arc<PgStore>) -> Result<SqlTransaction> {
        let c = pg.conn().await?;
        let client = pg
            .timed(async move {
                c.batch_execute("BEGIN").await.map_err(classify)?;
                Ok(c.into_object())
            })
            .await?;
        Ok(SqlTransaction {
            client,
            pg,
            begun: true,
        })
    }

    /// A transaction whose `BEGIN` is sent with the first operations of `commit_with` (one round
    /// trip less): for [`crate::AsyncCommit::apply`], which runs no statement of its own first.
    pub(crate) async fn deferred(pg: Arc<PgStore>) -> Result<SqlTransaction> {
        let client = pg.conn().await?.into_object();
        Ok(SqlTransaction {
            client,
            pg,
            begun: false,
        })
    }

    fn client(&self) -> Result<&deadpool_postgres::Object> {
        self.client
            .as_ref()
            .ok_or_else(|| Error::misuse("the transaction has ended (committed or rolled back)"))
    }

    /// Runs one of the application's statements; how many rows it changed.
    pub async fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64> {
        let c = self.client()?;
        let params: Vec<Param<'_>> = params.iter().map(Param).collect();
        let refs: Vec<&dyn super::send::Param> = params
            .iter()
            .map(|p| p as &dyn super::send::Param)
            .collect();
        self.pg
            .timed(async { c.changed(self.pg.mode, sql, &refs).await.map_err(classify) })
            .await
    }

    /// Runs one of the application's queries; its rows, each a list of column values.
    pub async fn query(&mut self, sql: &str, params: &[SqlValue]) -> Result<Vec<Vec<SqlValue>>> {
        let c = self.client()?;
        let params: Vec<Param<'_>> = params.iter().map(Param).collect();
        let refs: Vec<&dyn super::send::Param> = params
            .iter()
            .map(|p| p as &dyn super::send::Param)
            .collect();
        let rows = self
            .pg
            .timed(async { c.rows(self.pg.mode, sql, &refs).await.map_err(classify) })
            .await?;
        rows.iter().map(values).collect()
    }

    /// Applies a commit's plan inside this transaction and commits it (see
    /// `SqlTransaction::commit_with`, in the async layer); a plan of another store is refused.
    pub(crate) async fn commit_plan(
        mut self,
        pg: &Postgres,
        plan: Plan,
    ) -> Result<std::result::Result<Committed, CommitConflict>> {
        if !Arc::ptr_eq(&pg.sql, &self.pg) {
            return Err(Error::misuse(
                "the commit was built on another store than the transaction's",
            ));
        }
        let (ops, ends) = run_form(plan, pg.metrics())?;
        let begin = !self.begun;
        let outcome = {
            let c = self.client()?;
            self.pg.apply_ops(c, ops, begin).await
        };
        self.begun = true;
        match outcome {
            Ok(Ok(versions)) => {
                self.finish("COMMIT").await?;
                ends.committed();
                Ok(Ok(Committed { versions }))
            }
            Ok(Err(conflict)) => {
                self.finish("ROLLBACK").await?;
                ends.refused(&conflict);
                Ok(Err(conflict))
            }
            Err(e) => {
                // Dropping closes the connection, which rolls the transaction back.
                drop(self.client.take().map(deadpool_postgres::Object::take));
                Err(e)
            }
        }
    }

    /// Commits the application's statements (with no idemdb operation).
    pub async fn commit(mut self) -> Result<()> {
        self.finish("COMMIT").await
    }

    /// Rolls everything back.
    pub async fn rollback(mut self) -> Result<()> {
        self.finish("ROLLBACK").await
    }

    async fn finish(&mut self, sql: &str) -> Result<()> {
        let Some(c) = self.client.take() else {
            return Err(Error::misuse(
                "the transaction has ended (committed or rolled back)",
            ));
        };
        let r = self
            .pg
            .timed(async { c.batch_execute(sql).await.map_err(classify) })
            .await;
        if r.is_err() {
            // Never back into the pool in an unknown transaction state.
            drop(deadpool_postgres::Object::take(c));
        }
        r
    }
}

impl Drop for SqlTransaction {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            // Unfinished: close the connection (the server rolls the transaction back) rather
            // than hand the pool a connection inside a transaction.
            drop(deadpool_postgres::Object::take(c));
        }
    }
}
