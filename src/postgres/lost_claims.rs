//! Claims whose answer was lost. A claim statement can commit while its answer never reaches
//! the caller: the connection is reset after the commit, the answer comes later than the
//! statement's bound, or the primary is killed after the commit reached a synchronous standby.
//! The caller then reports the claim as unavailable and runs nothing, but the key's row holds a
//! pending lease that nobody will end: once it ran out, the next claim would take it over and be
//! told so (`Lease::is_takeover`), which a caller such as the proxy must read as "the earlier
//! holder may have acted", for an operation that never ran.
//!
//! Invariant: every claim that may acquire carries a nonce (`claim_nonce`, migration 7) that no
//! other claim uses; a claim that failed as unavailable is remembered with its nonce, and its
//! store releases the lease that claim may have taken (`statements::RELEASE_LOST_CLAIM`: only a
//! pending lease carrying that nonce, so never another caller's): at once before the same store
//! claims that key again, and otherwise by one background task per store, which goes through the
//! remembered claims one statement at a time and, while the database does not answer, waits
//! (100 ms, doubling up to 2 s) before trying again, so an outage costs one attempt per pause, not
//! one per lost claim; a claim is given up after [`GIVE_UP_AFTER`]. Released, the key's next claim
//! acquires it as after any release (a new attempt, not a takeover). Only a lease that ran out
//! before its store could release it, and was claimed first by another store, is still taken
//! over.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::rows::ns_code;
use super::statements;
use super::store::PgStore;
use crate::error::Result;
use crate::format::Namespace;

/// How long a store keeps trying to release a lost claim while the database does not answer.
pub(crate) const GIVE_UP_AFTER: Duration = Duration::from_secs(600);

/// The most lost claims a store remembers at once (a long outage with many claims in flight);
/// past it, a lost claim is not released, and its key is taken over after its lease as before.
const REMEMBERED: usize = 65_536;

type KeyId = (i16, Vec<u8>, Vec<u8>);

/// A store's claim nonces and the claims it lost.
pub(crate) struct LostClaims {
    /// The next nonce: a random start, then one more per claim (`& i64::MAX`: never negative).
    next: AtomicI64,
    /// Each remembered claim's nonce, and when it was lost.
    lost: Mutex<HashMap<KeyId, (i64, Instant)>>,
    /// How many there are, written under the lock: a claim reads it without taking the lock
    /// (almost always 0).
    remembered: AtomicUsize,
    /// Whether the background task that releases them runs.
    worker: AtomicBool,
    /// Lost claims whose lease this store released.
    released: AtomicU64,
}

impl Default for LostClaims {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        // 64 bits from the process's random hashing keys and the time: two stores (in one
        // process or many) start their nonces far apart.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        LostClaims {
            next: AtomicI64::new((h.finish() & (i64::MAX as u64)) as i64),
            lost: Mutex::new(HashMap::new()),
            remembered: AtomicUsize::new(0),
            worker: AtomicBool::new(false),
            released: AtomicU64::new(0),
        }
    }
}

impl LostClaims {
    /// A nonce no other claim of any store uses (with overwhelming probability: 63 random bits
    /// per store, then a counter).
    pub(crate) fn nonce(&self) -> i64 {
        self.next.fetch_add(1, Ordering::Relaxed) & i64::MAX
    }

    pub(crate) fn released(&self) -> u64 {
        self.released.load(Ordering::Relaxed)
    }
}

impl PgStore {
    /// Releases what this store's lost claim of the key may hold, before the store claims the
    /// key again: `Ok` once the database has answered (released or not), or its error.
    pub(crate) async fn settle_lost_claim(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
    ) -> Result<()> {
        // The common case, without the lock or building the key's id. A claim lost by this store
        // is remembered before its caller is answered, so a later claim of its key sees it.
        if self.lost_claims.remembered.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let (id, nonce) = {
            let lost = self.lost_claims.lost.lock();
            let id = (ns_code(ns), tenant.to_vec(), key.to_vec());
            match lost.get(&id) {
                Some(&(nonce, _)) => (id, nonce),
                None => return Ok(()),
            }
        };
        self.release_lost(&id, nonce).await
    }

    /// Notes a claim of the key with `nonce` that failed as unavailable (the statement may have
    /// committed), for release in the background.
    pub(crate) fn claim_lost(
        self: &Arc<Self>,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        nonce: i64,
    ) {
        let id = (ns_code(ns), tenant.to_vec(), key.to_vec());
        {
            let mut lost = self.lost_claims.lost.lock();
            if lost.len() >= REMEMBERED && !lost.contains_key(&id) {
                return;
            }
            lost.insert(id, (nonce, Instant::now()));
            self.lost_claims
                .remembered
                .store(lost.len(), Ordering::Release);
        }
        if !self.lost_claims.worker.swap(true, Ordering::AcqRel) {
            tokio::spawn(release_in_background(Arc::downgrade(self)));
        }
    }

    /// One try: releases the pending lease carrying `nonce`, if any; forgets the lost claim once
    /// the database answered.
    async fn release_lost(&self, id: &KeyId, nonce: i64) -> Result<()> {
        let (ns, tenant, key) = (&id.0, &id.1[..], &id.2[..]);
        let row = self
            .query(statements::RELEASE_LOST_CLAIM, &[ns, &tenant, &key, &nonce])
            .await?;
        if row.is_some() {
            self.lost_claims.released.fetch_add(1, Ordering::Relaxed);
            #[cfg(feature = "tracing")]
            tracing::info!(target: "idemdb", "PostgreSQL: released the lease of a claim whose \
                answer was lost (its key's next claim is a new attempt, not a takeover)");
        }
        self.forget_lost(id, nonce);
        Ok(())
    }

    fn forget_lost(&self, id: &KeyId, nonce: i64) {
        let mut lost = self.lost_claims.lost.lock();
        if lost.get(id).is_some_and(|&(n, _)| n == nonce) {
            lost.remove(id);
            self.lost_claims
                .remembered
                .store(lost.len(), Ordering::Release);
        }
    }

    /// The remembered claims, oldest first; those lost longer than [`GIVE_UP_AFTER`] ago are
    /// forgotten (with a warning).
    fn lost_now(&self) -> Vec<(KeyId, i64)> {
        let mut lost = self.lost_claims.lost.lock();
        let _before = lost.len();
        lost.retain(|_, (_, at)| at.elapsed() < GIVE_UP_AFTER);
        self.lost_claims
            .remembered
            .store(lost.len(), Ordering::Release);
        #[cfg(feature = "tracing")]
        if lost.len() < _before {
            tracing::warn!(target: "idemdb",
                "PostgreSQL: gave up releasing {} claims whose answer was lost: the database did not answer \
                 for {GIVE_UP_AFTER:?}; their keys are taken over after their leases",
                _before - lost.len());
        }
        let mut all: Vec<(KeyId, i64, Instant)> = lost
            .iter()
            .map(|(id, &(nonce, at))| (id.clone(), nonce, at))
            .collect();
        all.sort_by_key(|c| c.2);
        all.into_iter().map(|(id, nonce, _)| (id, nonce)).collect()
    }
}

/// The store's background release of its lost claims: after a pause (100 ms, doubling up to 2 s
/// while the database does not answer), one statement at a time over the remembered claims; it
/// ends when none is left (or the store is dropped).
async fn release_in_background(store: Weak<PgStore>) {
    let mut pause = Duration::from_millis(100);
    loop {
        tokio::time::sleep(pause).await;
        let Some(pg) = store.upgrade() else {
            return;
        };
        let mut away = false;
        for (id, nonce) in pg.lost_now() {
            match pg.release_lost(&id, nonce).await {
                Ok(()) => {}
                Err(e) if e.is_transient() => {
                    away = true;
                    break;
                }
                Err(_e) => {
                    pg.forget_lost(&id, nonce);
                    #[cfg(feature = "tracing")]
                    tracing::warn!(target: "idemdb",
                        "PostgreSQL: a claim whose answer was lost could not be released ({_e}): \
                         its key is taken over after its lease");
                }
            }
        }
        pause = if away {
            (pause * 2).min(Duration::from_secs(2))
        } else {
            Duration::from_millis(100)
        };
        // Ends only when nothing is left, checked again after saying so: a claim lost meanwhile
        // either sees the flag down and starts a new task, or is seen here.
        if pg.lost_claims.lost.lock().is_empty() {
            pg.lost_claims.worker.store(false, Ordering::Release);
            if pg.lost_claims.lost.lock().is_empty()
                || pg.lost_claims.worker.swap(true, Ordering::AcqRel)
            {
                return;
            }
        }
    }
}
