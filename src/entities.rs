//! Versioned entities, the vocabulary and rules both backends share: the public types
//! ([`Version`], [`Versioned`], [`Expect`], [`Conflict`], [`UpdateOptions`], the HTTP entity
//! tags), the argument checks of a write, the embedded store's value layout (`encode_entity`, a
//! tombstone keeping its version), and the loop of `update_entity` (`Retries`, `Backoff`), which
//! each backend drives with its own reads, writes and sleeps. Invariants: a condition holds as
//! `Expect::holds` says (`Absent`: no live entity, a tombstone counting as none; `Version(v)`: a
//! live entity at exactly `v`), and on PostgreSQL `idemdb_put_entity` decides the same; the next
//! version is one more than the stored one, tombstone included, so no version is reused; a value
//! over the size limit is refused before anything is written; the loop makes at most
//! `max_attempts` attempts, then gives up with [`Error::Contention`].

use std::time::Duration;

use crate::error::{corrupted, Error, Result};
use crate::format::{self};

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

/// The rule of `update_entity`'s loop, on both backends: which attempt runs next, when it runs
/// with the entity held (after `escalate_after` conflicts), what a conflict leads to (the first
/// is retried at once with the value it carries; later ones back off with full jitter, then read
/// again), and when the loop gives up ([`Error::Contention`] after `max_attempts`). Each backend
/// drives it with its own reads, writes and sleeps.
pub(crate) struct Retries {
    opts: UpdateOptions,
    backoff: Backoff,
    attempt: u32,
}

/// What follows a conflict.
pub(crate) enum AfterConflict {
    /// Write again at once, from what the conflict carried.
    Again(Option<Versioned>),
    /// Sleep this long, then read again and write.
    Wait(Duration),
    /// No attempt is left.
    GiveUp,
}

impl Retries {
    pub(crate) fn new(opts: &UpdateOptions) -> Self {
        Retries {
            opts: *opts,
            backoff: Backoff::new(opts),
            attempt: 0,
        }
    }

    /// Starts the next attempt; `false` when none is left.
    pub(crate) fn next_attempt(&mut self) -> bool {
        self.attempt += 1;
        self.attempt <= self.opts.max_attempts.max(1)
    }

    /// Whether this attempt runs with the entity held.
    pub(crate) fn escalated(&self) -> bool {
        self.opts.escalate_after.is_some_and(|n| self.attempt > n)
    }

    /// What follows a conflict of this attempt.
    pub(crate) fn after(&mut self, conflict: Conflict) -> AfterConflict {
        if self.attempt >= self.opts.max_attempts {
            AfterConflict::GiveUp
        } else if self.attempt == 1 {
            AfterConflict::Again(conflict.current)
        } else {
            AfterConflict::Wait(self.backoff.next_sleep())
        }
    }

    /// The error of a loop that gave up.
    pub(crate) fn contention(&self) -> Error {
        Error::Contention {
            attempts: self.opts.max_attempts.max(1),
        }
    }
}

/// The arguments' check of an entity write on either backend: the names, and the value (`None`:
/// a delete or a condition) against the size limit.
pub(crate) fn check_write(
    cfg: &crate::config::Common,
    tenant: &[u8],
    id: &[u8],
    value: Option<&[u8]>,
) -> Result<()> {
    cfg.check_names(tenant, id)?;
    match value {
        Some(v) => cfg.check_size("value", v.len()),
        None => Ok(()),
    }
}

/// An attempt's proposal: the condition (the version read, or absent) and `f`'s new value,
/// checked against the size limit.
pub(crate) fn propose<F>(
    cfg: &crate::config::Common,
    current: Option<&Versioned>,
    f: &mut F,
) -> Result<(Expect, Option<Vec<u8>>)>
where
    F: FnMut(Option<&[u8]>) -> Option<Vec<u8>>,
{
    let expect = current.map_or(Expect::Absent, |c| Expect::Version(c.version));
    let new = f(current.map(|c| c.value.as_slice()));
    if let Some(v) = &new {
        cfg.check_size("value", v.len())?;
    }
    Ok((expect, new))
}

/// What a write of `new` that produced version `ver` left (`None`: absent).
pub(crate) fn written(new: Option<Vec<u8>>, ver: Option<Version>) -> Option<Versioned> {
    new.zip(ver)
        .map(|(value, version)| Versioned { value, version })
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
    pub(crate) fn entity_values_round_trip_and_reject_damage() {
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
    pub(crate) fn etags_round_trip() {
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
