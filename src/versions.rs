//! Versioned entities with compare-and-swap. Invariant: an entity's version goes up by exactly one
//! with every write (create, replace, put, delete) and is never reused, because a delete leaves a
//! tombstone that keeps the version; a failed condition writes nothing and reports the current
//! version and value.

use std::time::Duration;

use crate::engine::Cf;
use crate::error::{corrupted, Error, Result};
use crate::format::{self, entity_key, Kind};
use crate::store::Store;

/// An entity version: 1 for the first write, one more for every write after it.
pub type Version = u64;

/// A value with its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The value bytes.
    pub value: Vec<u8>,
    /// Its version.
    pub version: Version,
}

/// A condition that did not hold. Carries what is there now, so the caller can retry without
/// another read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The current value and version, or `None` if the entity is absent (or deleted).
    pub current: Option<Versioned>,
}

/// The condition of a conditional write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The entity must not exist (never written, or deleted).
    Absent,
    /// The entity must exist at exactly this version.
    Version(Version),
    /// No condition.
    Any,
}

/// Retry policy of [`Store::update_entity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateOptions {
    /// Attempts before giving up with [`Error::Contention`]. Default: 64.
    pub max_attempts: u32,
    /// First back-off; doubles per conflict up to `max_backoff`, with full jitter. Default: 50 µs.
    pub base_backoff: Duration,
    /// Longest back-off. Default: 20 ms.
    pub max_backoff: Duration,
    /// After this many conflicts, stop racing and run the closure once more while holding the
    /// entity's lock stripe, which cannot conflict with writers in this process (the only ones:
    /// RocksDB admits one process per directory). `None`: stay optimistic until `max_attempts`.
    /// Default: `Some(4)`. The closure must then not call back into the store.
    pub escalate_after: Option<u32>,
}

impl Default for UpdateOptions {
    fn default() -> Self {
        Self {
            max_attempts: 64,
            base_backoff: Duration::from_micros(50),
            max_backoff: Duration::from_millis(20),
            escalate_after: Some(4),
        }
    }
}

/// The back-off of [`Store::update_entity`] (and of the async store's): exponential from
/// `base_backoff`, doubling per conflict up to `max_backoff`, each sleep drawn uniformly below
/// the current bound (full jitter).
pub(crate) struct Backoff {
    bound: Duration,
    max: Duration,
    rng: u64,
}

impl Backoff {
    pub(crate) fn new(opts: &UpdateOptions) -> Self {
        Backoff {
            bound: opts.base_backoff,
            max: opts.max_backoff,
            rng: crate::keys::random_u128() as u64 | 1,
        }
    }

    /// The next sleep; the bound doubles after it.
    pub(crate) fn next_sleep(&mut self) -> Duration {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let nanos = u64::try_from(self.bound.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        self.bound = (self.bound * 2).min(self.max);
        Duration::from_nanos(self.rng % nanos)
    }
}

/// The stored state of an entity: its version, and its value unless it is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredEntity {
    pub version: Version,
    pub value: Option<Vec<u8>>,
}

impl StoredEntity {
    pub(crate) fn live(&self) -> Option<Versioned> {
        self.value.as_ref().map(|v| Versioned {
            value: v.clone(),
            version: self.version,
        })
    }
}

/// Body: `[version u64 BE][0 = tombstone, 1 = value][value bytes]`, sealed.
pub(crate) fn encode_entity(version: Version, value: Option<&[u8]>) -> Vec<u8> {
    let mut body = Vec::with_capacity(9 + value.map_or(0, <[u8]>::len));
    body.extend_from_slice(&version.to_be_bytes());
    match value {
        Some(v) => {
            body.push(1);
            body.extend_from_slice(v);
        }
        None => body.push(0),
    }
    format::seal(&body)
}

pub(crate) fn decode_entity(bytes: &[u8]) -> Result<StoredEntity> {
    let body = format::unseal("entity", bytes)?;
    let Some((version, rest)) = body.split_first_chunk::<8>() else {
        return Err(corrupted("entity", "too short"));
    };
    let value = match rest.split_first() {
        Some((0, [])) => None,
        Some((1, v)) => Some(v.to_vec()),
        _ => return Err(corrupted("entity", "bad tombstone flag")),
    };
    Ok(StoredEntity {
        version: u64::from_be_bytes(*version),
        value,
    })
}

impl Expect {
    pub(crate) fn holds(self, cur: Option<&StoredEntity>) -> bool {
        let live = cur.filter(|s| s.value.is_some());
        match self {
            Expect::Any => true,
            Expect::Absent => live.is_none(),
            Expect::Version(v) => live.is_some_and(|s| s.version == v),
        }
    }
}

/// The version a write after `cur` gets.
pub(crate) fn next_version(cur: Option<&StoredEntity>) -> Version {
    cur.map_or(0, |s| s.version).saturating_add(1)
}

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
        let mut backoff = Backoff::new(&opts);
        for attempt in 1..=opts.max_attempts.max(1) {
            if opts.escalate_after.is_some_and(|n| attempt > n) {
                return self.update_locked(tenant, id, f);
            }
            let expect = current
                .as_ref()
                .map_or(Expect::Absent, |c| Expect::Version(c.version));
            let new = f(current.as_ref().map(|c| c.value.as_slice()));
            let outcome = self
                .write_entity(tenant, id, expect, new.as_deref())?
                .map(|ver| {
                    new.zip(ver)
                        .map(|(value, version)| Versioned { value, version })
                });
            match outcome {
                Ok(v) => return Ok(v),
                Err(conflict) if attempt < opts.max_attempts => {
                    // The conflict carries what is there now: retry with it at once. After that,
                    // back off (full jitter) and read again, since anything read before the
                    // sleep is stale by the time it ends.
                    if attempt == 1 {
                        current = conflict.current;
                        continue;
                    }
                    std::thread::sleep(backoff.next_sleep());
                    current = self.get_entity(tenant, id)?;
                }
                Err(_) => break,
            }
        }
        Err(Error::Contention {
            attempts: opts.max_attempts.max(1),
        })
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
        self.core.check_names(tenant, id)?;
        if let Some(v) = value {
            self.core.check_size("value", v.len())?;
        }
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

/// The version as a strong HTTP entity tag: `"v42"`.
pub fn etag(version: Version) -> String {
    format!("\"v{version}\"")
}

/// Parses a strong entity tag made by [`etag`]; weak tags (`W/"..."`) and anything else give
/// `None`.
pub fn parse_etag(tag: &str) -> Option<Version> {
    let inner = tag.trim().strip_prefix('"')?.strip_suffix('"')?;
    let digits = inner.strip_prefix('v')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The condition for a write from HTTP preconditions: `If-None-Match: *` means create only
/// (`Expect::Absent`); `If-Match: "v7"` means `Expect::Version(7)`. `None` if `if_match` is
/// present but not a strong tag of ours (answer 412).
pub fn expect_from_headers(if_match: Option<&str>, if_none_match: Option<&str>) -> Option<Expect> {
    match (if_match, if_none_match) {
        (Some(m), _) => parse_etag(m).map(Expect::Version),
        (None, Some(n)) if n.trim() == "*" => Some(Expect::Absent),
        (None, _) => Some(Expect::Any),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn entity_values_round_trip_and_reject_damage() {
        for v in [None, Some(&b""[..]), Some(&b"abc"[..])] {
            let bytes = encode_entity(7, v);
            let s = decode_entity(&bytes).unwrap();
            assert_eq!((s.version, s.value.as_deref()), (7, v));
            for i in 0..bytes.len() * 8 {
                let mut b = bytes.clone();
                if let Some(x) = b.get_mut(i / 8) {
                    *x ^= 1 << (i % 8);
                }
                assert!(decode_entity(&b).is_err());
            }
        }
    }

    #[test]
    fn etags_round_trip() {
        assert_eq!(parse_etag(&etag(42)), Some(42));
        assert_eq!(parse_etag("W/\"v42\""), None);
        assert_eq!(parse_etag("\"v\""), None);
        assert_eq!(parse_etag("\"v+1\""), None);
        assert_eq!(expect_from_headers(None, Some("*")), Some(Expect::Absent));
        assert_eq!(
            expect_from_headers(Some("\"v3\""), None),
            Some(Expect::Version(3))
        );
        assert_eq!(expect_from_headers(Some("junk"), None), None);
    }
}
