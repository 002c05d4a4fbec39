//! Versioned entities with compare-and-swap on the embedded store, each write decided under the
//! entity's lock stripe and written in one batch. Invariant: an entity's version goes up by exactly
//! one with every write (create, replace, put, delete) and is never reused, because a delete leaves
//! a tombstone that keeps the version; a failed condition writes nothing and reports the current
//! version and value.

use crate::embedded::engine::Cf;
use crate::embedded::Store;
use crate::entities::{
    check_write, decode_entity, encode_entity, next_version, propose, written, AfterConflict,
    Conflict, Expect, Retries, StoredEntity, UpdateOptions, Version, Versioned,
};
use crate::error::Result;
use crate::format::{entity_key, Kind};

impl Store {
    /// The current value and version of an entity, or `None` if absent or deleted.
    pub fn get_entity(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
    ) -> Result<Option<Versioned>> {
        let (tenant, id) = (tenant.as_ref(), id.as_ref());
        self.core.check_names(tenant, id)?;
        Ok(self
            .load_entity(&entity_key(Kind::Entity, tenant, id))?
            .and_then(|s| s.live()))
    }

    /// Writes `value` if `expect` holds; returns the new version, or the conflict with what is
    /// there now. `Expect::Absent` creates, `Expect::Version` replaces, `Expect::Any` puts
    /// unconditionally.
    pub fn put_entity(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        expect: Expect,
        value: impl Into<Vec<u8>>,
    ) -> Result<std::result::Result<Version, Conflict>> {
        let value = value.into();
        let r = self.write_entity(tenant.as_ref(), id.as_ref(), expect, Some(&value))?;
        // A put always writes a version when its condition holds.
        Ok(r.map(|v| v.unwrap_or_default()))
    }

    /// Deletes the entity if `expect` holds, leaving a tombstone that keeps its version so that a
    /// re-created entity continues from it. Returns the tombstone's version (`None` if there was
    /// nothing to delete).
    pub fn delete_entity(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        expect: Expect,
    ) -> Result<std::result::Result<Option<Version>, Conflict>> {
        self.write_entity(tenant.as_ref(), id.as_ref(), expect, None)
    }

    /// Read, apply `f`, write if unchanged; on a conflict retry with exponential back-off and
    /// jitter. `f` gets the current value (or `None`) and returns the new one (or `None` to
    /// delete). Fails with [`Error::Contention`] after `opts.max_attempts` conflicts.
    pub fn update_entity<F>(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        opts: UpdateOptions,
        mut f: F,
    ) -> Result<Option<Versioned>>
    where
        F: FnMut(Option<&[u8]>) -> Option<Vec<u8>>,
    {
        let (tenant, id) = (tenant.as_ref(), id.as_ref());
        let mut current = self.get_entity(tenant, id)?;
        let mut retries = Retries::new(&opts);
        while retries.next_attempt() {
            if retries.escalated() {
                return self.update_locked(tenant, id, f);
            }
            let (expect, new) = propose(&self.config().common, current.as_ref(), &mut f)?;
            match self.write_entity(tenant, id, expect, new.as_deref())? {
                Ok(ver) => return Ok(written(new, ver)),
                Err(conflict) => match retries.after(conflict) {
                    AfterConflict::Again(now) => current = now,
                    AfterConflict::Wait(d) => {
                        // Anything read before the sleep is stale by the time it ends.
                        std::thread::sleep(d);
                        current = self.get_entity(tenant, id)?;
                    }
                    AfterConflict::GiveUp => break,
                },
            }
        }
        Err(retries.contention())
    }

    /// Read, apply `f`, write, all under the entity's stripe lock.
    fn update_locked<F>(&self, tenant: &[u8], id: &[u8], mut f: F) -> Result<Option<Versioned>>
    where
        F: FnMut(Option<&[u8]>) -> Option<Vec<u8>>,
    {
        let key = entity_key(Kind::Entity, tenant, id);
        let _g = self.core.lock(&key);
        let cur = self.load_entity(&key)?;
        let new = f(cur.as_ref().and_then(|s| s.value.as_deref()));
        if let Some(v) = &new {
            self.core.check_size("value", v.len())?;
        }
        let live = cur.as_ref().is_some_and(|s| s.value.is_some());
        if new.is_none() && !live {
            return Ok(None);
        }
        let version = next_version(cur.as_ref());
        let mut b = self.core.engine().batch();
        b.put(Cf::Versions, &key, &encode_entity(version, new.as_deref()));
        self.core.engine().write(b)?;
        Ok(new.map(|value| Versioned { value, version }))
    }

    /// Writes `value` (or, for `None`, a tombstone) if `expect` holds, under the entity's stripe.
    /// Deleting an absent entity writes nothing and returns `Ok(None)`.
    fn write_entity(
        &self,
        tenant: &[u8],
        id: &[u8],
        expect: Expect,
        value: Option<&[u8]>,
    ) -> Result<std::result::Result<Option<Version>, Conflict>> {
        check_write(&self.config().common, tenant, id, value)?;
        let key = entity_key(Kind::Entity, tenant, id);
        let _g = self.core.lock(&key);
        let cur = self.load_entity(&key)?;
        if !expect.holds(cur.as_ref()) {
            return Ok(Err(Conflict {
                current: cur.and_then(|s| s.live()),
            }));
        }
        if value.is_none() && cur.as_ref().is_none_or(|s| s.value.is_none()) {
            return Ok(Ok(None));
        }
        let v = next_version(cur.as_ref());
        let mut b = self.core.engine().batch();
        b.put(Cf::Versions, &key, &encode_entity(v, value));
        self.core.engine().write(b)?;
        Ok(Ok(Some(v)))
    }

    pub(crate) fn load_entity(&self, key: &[u8]) -> Result<Option<StoredEntity>> {
        self.core
            .engine()
            .get_with(Cf::Versions, key, |v| v.map(decode_entity).transpose())?
    }
}
