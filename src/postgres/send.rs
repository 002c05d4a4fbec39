//! How a statement travels: as a named prepared statement, prepared once per connection and
//! cached ([`StatementMode::Prepared`]), or unnamed with its parameters' types
//! ([`StatementMode::Unnamed`]), which leaves nothing on the server connection that a pooler in
//! transaction mode could hand to another client. Invariants:
//! - both modes send the same SQL with the same values and read the same rows: the mode changes
//!   only the protocol messages (an unnamed statement is parsed on every call, in the same round
//!   trip as its execution);
//! - every parameter states the PostgreSQL type it is sent as ([`Param`]): the type the server
//!   infers for it in the prepared mode, so the two modes accept the same statements.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error as PgError, Row};

use crate::config::fleet::StatementMode;

/// A statement parameter, with the type it is sent as.
pub(crate) trait Param: ToSql + Sync {
    fn pg_type(&self) -> Type;
}

/// A Rust type's PostgreSQL type (the one its `ToSql` accepts first).
pub(crate) trait Typed {
    const TYPE: Type;
}

impl<T: Typed + ToSql + Sync> Param for T {
    fn pg_type(&self) -> Type {
        T::TYPE
    }
}

macro_rules! typed {
    ($($t:ty => $pg:ident),* $(,)?) => {
        $(impl Typed for $t { const TYPE: Type = Type::$pg; })*
    };
}

typed!(
    bool => BOOL,
    i16 => INT2,
    i32 => INT4,
    i64 => INT8,
    f64 => FLOAT8,
    String => TEXT,
    &str => TEXT,
    Vec<u8> => BYTEA,
    &[u8] => BYTEA,
    Vec<String> => TEXT_ARRAY,
    &[String] => TEXT_ARRAY,
    Vec<i16> => INT2_ARRAY,
    Vec<i32> => INT4_ARRAY,
    Vec<i64> => INT8_ARRAY,
    Vec<Option<i64>> => INT8_ARRAY,
    Vec<&str> => TEXT_ARRAY,
    Vec<&[u8]> => BYTEA_ARRAY,
    Vec<Option<&[u8]>> => BYTEA_ARRAY,
);

impl<T: Typed> Typed for Option<T> {
    const TYPE: Type = T::TYPE;
}

/// The parameters as the prepared path takes them.
fn plain<'a>(params: &[&'a dyn Param]) -> Vec<&'a (dyn ToSql + Sync)> {
    params.iter().map(|p| *p as &(dyn ToSql + Sync)).collect()
}

/// The parameters with their types, as the unnamed path takes them.
fn typed<'a>(params: &[&'a dyn Param]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params
        .iter()
        .map(|p| (*p as &(dyn ToSql + Sync), p.pg_type()))
        .collect()
}

/// A pooled connection or a transaction on one, which sends statements in either mode.
pub(crate) trait Session: Sync {
    /// At most one row.
    async fn one(
        &self,
        mode: StatementMode,
        sql: &str,
        params: &[&dyn Param],
    ) -> Result<Option<Row>, PgError>;
    /// Every row.
    async fn rows(
        &self,
        mode: StatementMode,
        sql: &str,
        params: &[&dyn Param],
    ) -> Result<Vec<Row>, PgError>;
    /// How many rows the statement changed.
    async fn changed(
        &self,
        mode: StatementMode,
        sql: &str,
        params: &[&dyn Param],
    ) -> Result<u64, PgError>;
    /// Prepares `sql` on this connection ahead of its execution (the prepared mode; nothing
    /// in the unnamed mode, whose statements are parsed with their execution).
    async fn ready(&self, mode: StatementMode, sql: &str) -> Result<(), PgError>;
}

macro_rules! session {
    ($t:ty) => {
        impl Session for $t {
            async fn one(
                &self,
                mode: StatementMode,
                sql: &str,
                params: &[&dyn Param],
            ) -> Result<Option<Row>, PgError> {
                match mode {
                    StatementMode::Prepared => {
                        let st = self.prepare_cached(sql).await?;
                        self.query_opt(&st, &plain(params)).await
                    }
                    StatementMode::Unnamed => self.query_typed_opt(sql, &typed(params)).await,
                }
            }

            async fn rows(
                &self,
                mode: StatementMode,
                sql: &str,
                params: &[&dyn Param],
            ) -> Result<Vec<Row>, PgError> {
                match mode {
                    StatementMode::Prepared => {
                        let st = self.prepare_cached(sql).await?;
                        self.query(&st, &plain(params)).await
                    }
                    StatementMode::Unnamed => self.query_typed(sql, &typed(params)).await,
                }
            }

            async fn changed(
                &self,
                mode: StatementMode,
                sql: &str,
                params: &[&dyn Param],
            ) -> Result<u64, PgError> {
                match mode {
                    StatementMode::Prepared => {
                        let st = self.prepare_cached(sql).await?;
                        self.execute(&st, &plain(params)).await
                    }
                    StatementMode::Unnamed => self.execute_typed(sql, &typed(params)).await,
                }
            }

            async fn ready(&self, mode: StatementMode, sql: &str) -> Result<(), PgError> {
                match mode {
                    StatementMode::Prepared => self.prepare_cached(sql).await.map(drop),
                    StatementMode::Unnamed => Ok(()),
                }
            }
        }
    };
}

session!(deadpool_postgres::ClientWrapper);
session!(deadpool_postgres::Transaction<'_>);
