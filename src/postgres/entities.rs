//! Versioned entities on PostgreSQL. Invariant: as on the embedded store, an entity's version
//! goes up by exactly one with every write and is never reused (a delete keeps the version in a
//! tombstone row), and each conditional write is decided by the database under the row's lock
//! (`idemdb_put_entity`, migration 3), never by a read here followed by a write.

use tokio_postgres::Row;

use super::errors::classify;
use super::rows::from_i64;
use super::send::Session;
use super::statements as sql;
use super::store::PgStore;
use super::Postgres;
use crate::entities::{
    check_write, propose, written, AfterConflict, Conflict, Expect, Retries, UpdateOptions,
    Version, Versioned,
};
use crate::error::{InvalidInput, Result};

/// The outcome of a conditional write: the version written (`None`: a delete that found nothing
/// live), or the conflict with what is there now.
pub(crate) type WriteOutcome = std::result::Result<Option<Version>, Conflict>;

/// The live entity of a row (`None`: a tombstone, or no row).
fn live(row: Option<&Row>) -> Result<Option<Versioned>> {
    let Some(row) = row else { return Ok(None) };
    let (version, value): (Option<i64>, Option<Vec<u8>>) = (row.get(0), row.get(1));
    match (version, value) {
        (Some(v), Some(value)) => Ok(Some(Versioned {
            value,
            version: from_i64("entity version", v)?,
        })),
        _ => Ok(None),
    }
}

/// The condition as the function's parameters: its kind and its version (`-1`, which no row
/// has, for a version past the database's `bigint`: such a version was never written).
pub(super) fn condition(expect: Expect) -> (i16, i64) {
    match expect {
        Expect::Any => (0, 0),
        Expect::Absent => (1, 0),
        Expect::Version(v) => (2, i64::try_from(v).unwrap_or(-1)),
    }
}

/// Reads the function's answer.
pub(super) fn outcome(row: &Row) -> Result<WriteOutcome> {
    let applied: bool = row.get(0);
    if applied {
        let version: Option<i64> = row.get(1);
        return Ok(Ok(version
            .map(|v| from_i64("entity version", v))
            .transpose()?));
    }
    let current = match (
        row.get::<_, Option<i64>>(1),
        row.get::<_, Option<Vec<u8>>>(2),
    ) {
        (Some(v), Some(value)) => Some(Versioned {
            value,
            version: from_i64("entity version", v)?,
        }),
        _ => None,
    };
    Ok(Err(Conflict { current }))
}

impl PgStore {
    /// The live entity, or `None` if absent or deleted.
    pub(crate) async fn get_entity(&self, tenant: &[u8], id: &[u8]) -> Result<Option<Versioned>> {
        let row = self.query(sql::ENTITY_GET, &[&tenant, &id]).await?;
        live(row.as_ref())
    }

    /// Writes `value` (a tombstone for `None`) if `expect` holds, in one call the database
    /// decides under the row's lock.
    pub(crate) async fn put_entity(
        &self,
        tenant: &[u8],
        id: &[u8],
        expect: Expect,
        value: Option<&[u8]>,
    ) -> Result<WriteOutcome> {
        let (kind, version) = condition(expect);
        let delete = value.is_none();
        let row = self
            .query(
                sql::ENTITY_PUT,
                &[&tenant, &id, &kind, &version, &value, &delete],
            )
            .await?;
        match row {
            Some(row) => outcome(&row),
            None => Err(crate::error::Error::Engine(
                "PostgreSQL: idemdb_put_entity returned no row".into(),
            )),
        }
    }

    /// Reads the entity under its row lock, applies `f` and writes the result (refused over
    /// `max_value` bytes), in one transaction: no other writer can change the entity in between. `None` when a concurrent
    /// first write of the entity won the insert (there was no row to lock): the caller tries again.
    pub(crate) async fn update_locked<F>(
        &self,
        tenant: &[u8],
        id: &[u8],
        max_value: usize,
        f: &mut F,
    ) -> Result<Option<Option<Versioned>>>
    where
        F: FnMut(Option<&[u8]>) -> Option<Vec<u8>> + Send,
    {
        let mut c = self.conn().await?;
        self.timed(async move {
            let tx = c.transaction().await.map_err(classify)?;
            let cur = live(
                tx.one(self.mode, sql::ENTITY_LOCK, &[&tenant, &id])
                    .await
                    .map_err(classify)?
                    .as_ref(),
            )?;
            let new = f(cur.as_ref().map(|c| c.value.as_slice()));
            if let Some(v) = new.as_ref().filter(|v| v.len() > max_value) {
                return Err(InvalidInput::TooLarge {
                    what: "value",
                    len: v.len(),
                    max: max_value,
                }
                .into());
            }
            let expect = cur
                .as_ref()
                .map_or(Expect::Absent, |c| Expect::Version(c.version));
            let (kind, version) = condition(expect);
            let delete = new.is_none();
            let row = tx
                .one(
                    self.mode,
                    sql::ENTITY_PUT,
                    &[&tenant, &id, &kind, &version, &new, &delete],
                )
                .await
                .map_err(classify)?
                .ok_or_else(|| crate::error::corrupted("idemdb_put_entity", "no row"))?;
            let written = match outcome(&row)? {
                Ok(v) => v,
                Err(_) => {
                    // Rolled back on drop (tokio-postgres sends the ROLLBACK): the connection
                    // stays usable.
                    drop(tx);
                    c.keep();
                    return Ok(None);
                }
            };
            tx.commit().await.map_err(classify)?;
            c.keep();
            Ok(Some(
                new.zip(written)
                    .map(|(value, version)| Versioned { value, version }),
            ))
        })
        .await
    }
}

/// What each call on an entity means, as on the embedded store (the same checks and outcomes).
impl Postgres {
    /// The current value and version, or `None` if absent or deleted.
    pub(crate) async fn get_entity(&self, tenant: &[u8], id: &[u8]) -> Result<Option<Versioned>> {
        self.cfg.common.check_names(tenant, id)?;
        self.sql.get_entity(tenant, id).await
    }

    /// Writes `value` (`None`: a tombstone) if `expect` holds: the new version, or the conflict.
    pub(crate) async fn write_entity(
        &self,
        tenant: &[u8],
        id: &[u8],
        expect: Expect,
        value: Option<&[u8]>,
    ) -> Result<std::result::Result<Option<Version>, Conflict>> {
        check_write(&self.cfg.common, tenant, id, value)?;
        self.sql.put_entity(tenant, id, expect, value).await
    }

    /// An entity updated by `f`, as the embedded store's `update_entity`: its loop, with each write
    /// one conditional call and the escalation a transaction holding the row.
    pub(crate) async fn update_entity<F>(
        &self,
        tenant: &[u8],
        id: &[u8],
        opts: UpdateOptions,
        mut f: F,
    ) -> Result<Option<Versioned>>
    where
        F: FnMut(Option<&[u8]>) -> Option<Vec<u8>> + Send + 'static,
    {
        self.cfg.common.check_names(tenant, id)?;
        let mut current = self.sql.get_entity(tenant, id).await?;
        let mut retries = Retries::new(&opts);
        let max = self.cfg.common.max_response_bytes;
        while retries.next_attempt() {
            if retries.escalated() {
                match self.sql.update_locked(tenant, id, max, &mut f).await? {
                    Some(done) => return Ok(done),
                    // A first write of the entity won the insert: a conflict like any other.
                    None => continue,
                }
            }
            let (expect, new) = propose(&self.cfg.common, current.as_ref(), &mut f)?;
            match self
                .sql
                .put_entity(tenant, id, expect, new.as_deref())
                .await?
            {
                Ok(ver) => return Ok(written(new, ver)),
                Err(conflict) => match retries.after(conflict) {
                    AfterConflict::Again(now) => current = now,
                    AfterConflict::Wait(d) => {
                        tokio::time::sleep(d).await;
                        current = self.sql.get_entity(tenant, id).await?;
                    }
                    AfterConflict::GiveUp => break,
                },
            }
        }
        Err(retries.contention())
    }
}
