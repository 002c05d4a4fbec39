//! The local replay tier of a store on PostgreSQL: finished records kept in this instance's
//! memory, so that a retry landing on it is answered without a database round trip.
//! Invariants:
//! - it holds only finished records (completed or terminally failed), filled from the database's
//!   own answer to a claim; such a record cannot change until it expires or is forgotten, so the
//!   answer it gives (the replay, or `Mismatch` for another fingerprint) is the database's;
//! - an entry is never served at or past the record's expiry, by the database's clock as
//!   estimated from the answer that filled it plus this process's monotonic time since (or the
//!   test clock), nor `max_age` or more after it was filled: a record forgotten through another
//!   instance is served here for at most `max_age`; one forgotten through this store, never;
//! - the entries' bytes (keys, fingerprints, responses) stay within `max_bytes`, the oldest
//!   filled leaving first.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::clock::Millis;
use crate::record::Claim;
use crate::requests::{claim_step, ClaimStep, Found, Seen};

/// Fixed cost counted per entry besides its bytes (map slot, queue slot, bookkeeping).
const ENTRY_OVERHEAD: usize = 96;

pub(crate) struct ReplayTier {
    inner: Mutex<Inner>,
    max_bytes: usize,
    max_age: Duration,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Vec<u8>, Entry>,
    /// Keys in the order their entries were filled, with the entry's generation (an entry
    /// replaced later has a newer one, and the older queue slot is skipped).
    order: VecDeque<(Vec<u8>, u64)>,
    bytes: usize,
    next_gen: u64,
}

struct Entry {
    fingerprint: Vec<u8>,
    answer: Claim,
    expires_at: Millis,
    db_now: Millis,
    filled: Instant,
    size: usize,
    generation: u64,
}

/// What the tier holds and how it served, for [`crate::AsyncStore::replay_tier_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayTierStats {
    /// Claims answered from the tier (no database round trip).
    pub hits: u64,
    /// Claims that looked in the tier and went to the database.
    pub misses: u64,
    /// Entries held now.
    pub entries: u64,
    /// Bytes held now (keys, fingerprints, responses, and a fixed cost per entry).
    pub bytes: u64,
}

fn tier_key(ns: u8, tenant: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(3 + tenant.len() + key.len());
    k.push(ns);
    // Tenants are at most 255 bytes by the store's limits; two bytes keep any length apart.
    k.extend_from_slice(
        &u16::try_from(tenant.len())
            .unwrap_or(u16::MAX)
            .to_be_bytes(),
    );
    k.extend_from_slice(tenant);
    k.extend_from_slice(key);
    k
}

fn answer_size(answer: &Claim) -> usize {
    match answer {
        Claim::Completed(r) | Claim::Failed(r) => r.response.size(),
        _ => 0,
    }
}

impl ReplayTier {
    pub(crate) fn new(max_bytes: usize, max_age: Duration) -> Self {
        ReplayTier {
            inner: Mutex::new(Inner::default()),
            max_bytes,
            max_age,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The answer the database would give a claim of this key with `fingerprint`, if the tier
    /// holds the finished record; `test_now` replaces the estimated database time (tests).
    pub(crate) fn get(
        &self,
        ns: u8,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        test_now: Option<Millis>,
    ) -> Option<Claim> {
        let k = tier_key(ns, tenant, key);
        let mut inner = self.inner.lock();
        let answer = match inner.map.get(&k) {
            None => None,
            Some(e) => {
                let age = e.filled.elapsed();
                let elapsed = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
                let now = test_now.unwrap_or_else(|| e.db_now.saturating_add(elapsed));
                // The claim rule (`crate::requests::claim_step`) on the finished record held
                // (which entry's answer it is, `Completed` or `Failed`, does not change it).
                let found = Found {
                    expires_at: e.expires_at,
                    fingerprint: &e.fingerprint,
                    state: Seen::Completed(()),
                };
                let step = (age < self.max_age).then(|| claim_step(Some(found), fingerprint, now));
                match step {
                    Some(ClaimStep::Completed(())) => Some(e.answer.clone()),
                    Some(ClaimStep::Mismatch) => Some(Claim::Mismatch),
                    _ => {
                        let size = e.size;
                        inner.map.remove(&k);
                        inner.bytes -= size;
                        None
                    }
                }
            }
        };
        drop(inner);
        let counter = if answer.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        answer
    }

    /// Keeps the database's `answer` to a claim of this key with `fingerprint`, if it is a
    /// finished record (`expires_at` and `db_now` by the database's clock, from the same answer).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put(
        &self,
        ns: u8,
        tenant: &[u8],
        key: &[u8],
        fingerprint: &[u8],
        answer: &Claim,
        expires_at: Millis,
        db_now: Millis,
    ) {
        if !matches!(answer, Claim::Completed(_) | Claim::Failed(_)) || expires_at <= db_now {
            return;
        }
        let k = tier_key(ns, tenant, key);
        let size = ENTRY_OVERHEAD + 2 * k.len() + fingerprint.len() + answer_size(answer);
        if size > self.max_bytes {
            return;
        }
        let mut inner = self.inner.lock();
        let generation = inner.next_gen;
        inner.next_gen += 1;
        let entry = Entry {
            fingerprint: fingerprint.to_vec(),
            answer: answer.clone(),
            expires_at,
            db_now,
            filled: Instant::now(),
            size,
            generation,
        };
        if let Some(old) = inner.map.insert(k.clone(), entry) {
            inner.bytes -= old.size;
        }
        inner.bytes += size;
        inner.order.push_back((k, generation));
        while inner.bytes > self.max_bytes {
            let Some((old_key, old_gen)) = inner.order.pop_front() else {
                break;
            };
            if inner
                .map
                .get(&old_key)
                .is_some_and(|e| e.generation == old_gen)
            {
                if let Some(e) = inner.map.remove(&old_key) {
                    inner.bytes -= e.size;
                }
            }
        }
        // Queue slots of replaced or removed entries are dropped once they outnumber the live
        // ones, so the queue stays bounded too.
        if inner.order.len() > 2 * inner.map.len() + 64 {
            let Inner { map, order, .. } = &mut *inner;
            order.retain(|(k, g)| map.get(k).is_some_and(|e| e.generation == *g));
        }
    }

    /// Drops this key's entry (the record was forgotten through this store).
    pub(crate) fn remove(&self, ns: u8, tenant: &[u8], key: &[u8]) {
        let mut inner = self.inner.lock();
        if let Some(e) = inner.map.remove(&tier_key(ns, tenant, key)) {
            inner.bytes -= e.size;
        }
    }

    pub(crate) fn stats(&self) -> ReplayTierStats {
        let inner = self.inner.lock();
        ReplayTierStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: inner.map.len() as u64,
            bytes: inner.bytes as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Replay, Response};

    fn done(body: &[u8]) -> Claim {
        Claim::Completed(Replay {
            response: Response::new(body.to_vec()),
            finished_at: 1,
        })
    }

    #[test]
    fn serves_finished_records_until_expiry_and_keeps_its_budget() {
        let tier = ReplayTier::new(1_000, Duration::from_secs(60));
        tier.put(0, b"t", b"k", b"fp", &done(b"r"), 2_000, 1_000);
        assert_eq!(
            tier.get(0, b"t", b"k", b"fp", Some(1_500)),
            Some(done(b"r"))
        );
        assert_eq!(
            tier.get(0, b"t", b"k", b"other", Some(1_500)),
            Some(Claim::Mismatch)
        );
        assert_eq!(tier.get(0, b"t", b"k", b"fp", Some(2_000)), None, "expired");
        assert_eq!(tier.stats().entries, 0);
        let pending = Claim::InProgress {
            retry_after: Duration::from_secs(1),
        };
        tier.put(0, b"t", b"p", b"fp", &pending, 2_000, 1_000);
        assert_eq!(
            tier.get(0, b"t", b"p", b"fp", Some(1_500)),
            None,
            "never pending"
        );
        for i in 0..100u32 {
            tier.put(
                0,
                b"t",
                &i.to_be_bytes(),
                b"fp",
                &done(&[7; 50]),
                9_000,
                1_000,
            );
            assert!(tier.stats().bytes <= 1_000);
        }
        assert!(tier
            .get(0, b"t", &99u32.to_be_bytes(), b"fp", Some(1_500))
            .is_some());
        assert!(tier
            .get(0, b"t", &0u32.to_be_bytes(), b"fp", Some(1_500))
            .is_none());
        tier.remove(0, b"t", &99u32.to_be_bytes());
        assert!(tier
            .get(0, b"t", &99u32.to_be_bytes(), b"fp", Some(1_500))
            .is_none());
        let zero_age = ReplayTier::new(1_000, Duration::ZERO);
        zero_age.put(0, b"t", b"k", b"fp", &done(b"r"), 2_000, 1_000);
        assert_eq!(
            zero_age.get(0, b"t", b"k", b"fp", Some(1_500)),
            None,
            "max age"
        );
    }
}
