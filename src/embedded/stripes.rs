//! Lock stripes, and the pending records each stripe remembers. Invariant: a record remembered by
//! a stripe is the record stored for its key, or an expired record whose stored copy a sweep or
//! the compaction filter removed (every reader checks expiry first, and an expired record never
//! becomes live again, so the two read alike). This holds because every write of a record happens
//! under its stripe's lock and replaces or drops what the stripe remembers for that key.
//! Forgetting is always safe: a miss falls back to a read.
//!
//! A stripe also holds the records that exist only in memory (pending or renewed leases whose
//! claim wrote nothing, docs/design.md "In-memory pending records"). These are not a cache: while
//! one is held for a key it *is* that key's record, above whatever is stored; it is never evicted,
//! only replaced or dropped under the stripe's lock, and [`Stripes`] counts them so their number
//! stays under the configured cap.
//!
//! Each stripe also counts how often its lock was released. A reader that notes the count, reads a
//! record without the lock, then takes the lock and finds the count unchanged knows that nothing
//! was written under the stripe in between, so its read is still current.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};

use crate::clock::Millis;
use crate::record::{Record, State};

/// Records remembered per stripe. Leases in flight rarely share a stripe (4096 by default), so two
/// cover nearly all of them; a third evicts the oldest.
const HELD_PER_STRIPE: usize = 2;

/// Longest fingerprint of a remembered record, so the memory a stripe can hold stays small.
const HELD_FINGERPRINT_MAX: usize = 64;

/// The mutexes that serialise decisions per key, one per `hash(key) mod n`.
pub(crate) struct Stripes {
    locks: Box<[Mutex<Stripe>]>,
    /// How many times each lock was released; changed only by its holder, just before releasing.
    /// A dense array apart from the locks, so the note taken before every claim's read touches
    /// little memory.
    releases: Box<[AtomicU64]>,
    /// Per-process random seed of the stripe hash: which keys share a stripe cannot be chosen
    /// from outside.
    seed: u64,
    /// In-memory records held by all stripes together (see [`Stripe::volatile`]).
    volatile: AtomicUsize,
}

/// A stripe's position and its release count, noted before an unlocked read
/// (see [`Stripes::note`]).
#[derive(Clone, Copy)]
pub(crate) struct Noted {
    index: usize,
    releases: u64,
}

/// A held stripe. Dropping it counts a release, then unlocks.
pub(crate) struct StripeGuard<'a> {
    guard: MutexGuard<'a, Stripe>,
    releases: &'a AtomicU64,
    volatile: &'a AtomicUsize,
}

/// A record that exists only in memory, and where the stored record it stands above (if any) has
/// its expiry-index entry, so the write that makes it durable replaces that entry.
#[derive(Debug, Clone)]
pub(crate) struct Volatile {
    pub(crate) rec: Record,
    pub(crate) stored_slot: Option<(Millis, u64)>,
}

impl Deref for StripeGuard<'_> {
    type Target = Stripe;
    fn deref(&self) -> &Stripe {
        &self.guard
    }
}

impl DerefMut for StripeGuard<'_> {
    fn deref_mut(&mut self) -> &mut Stripe {
        &mut self.guard
    }
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        // Only the holder writes the count, so a load and a store suffice. Release: whoever
        // reads the new count also sees every write made under the lock.
        let n = self.releases.load(Ordering::Relaxed);
        self.releases.store(n.wrapping_add(1), Ordering::Release);
    }
}

/// What a stripe's lock protects: the right to decide about every key that maps to it, and the
/// pending records of those keys that this process wrote last (so ending a lease needs no read).
#[derive(Default)]
pub(crate) struct Stripe {
    held: Vec<(Box<[u8]>, Record)>,
    /// Records that exist only in memory, by key (see [`Volatile`]); changed only through the
    /// guard, which keeps the count of all stripes.
    volatile: Vec<(Box<[u8]>, Volatile)>,
}

impl Stripes {
    /// `n` stripes (a power of two, validated by the configuration), hashed with `seed`.
    pub(crate) fn new(n: usize, seed: u64) -> Self {
        let n = n.max(1).next_power_of_two();
        Self {
            locks: (0..n).map(|_| Mutex::default()).collect(),
            releases: (0..n).map(|_| AtomicU64::new(0)).collect(),
            seed,
            volatile: AtomicUsize::new(0),
        }
    }

    /// The stripe of `key`: a seeded multiply-rotate hash over 8-byte words (a few nanoseconds
    /// for a typical key, where a CRC of it cost several times that).
    fn index(&self, key: &[u8]) -> usize {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mix = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(K);
        let mut h = mix(self.seed, key.len() as u64);
        let mut words = key.chunks_exact(8);
        for w in &mut words {
            h = mix(
                h,
                u64::from_le_bytes(<[u8; 8]>::try_from(w).unwrap_or_default()),
            );
        }
        let mut tail = [0u8; 8];
        let rest = words.remainder();
        if let Some(t) = tail.get_mut(..rest.len()) {
            t.copy_from_slice(rest);
        }
        h = mix(h, u64::from_le_bytes(tail));
        // Finalise (MurmurHash3's fmix64), so every input bit reaches the low bits kept.
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h as usize & (self.locks.len() - 1)
    }

    fn guard(&self, i: usize) -> StripeGuard<'_> {
        // In bounds: both arrays have a power-of-two length and every index is masked by it.
        #[allow(clippy::indexing_slicing)]
        StripeGuard {
            guard: self.locks[i].lock(),
            releases: &self.releases[i],
            volatile: &self.volatile,
        }
    }

    /// Forgets every remembered pending record and drops every in-memory record (the test hook
    /// that empties a store).
    #[cfg(feature = "__internal")]
    pub(crate) fn clear(&self) {
        for i in 0..self.locks.len() {
            let mut g = self.guard(i);
            g.held.clear();
            let n = g.guard.volatile.len();
            g.guard.volatile.clear();
            self.volatile.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// How many in-memory records all stripes hold.
    pub(crate) fn volatile_count(&self) -> usize {
        self.volatile.load(Ordering::Relaxed)
    }

    /// Drops the in-memory records that expired by `now` (they read as absent already; this
    /// returns their memory and their room under the cap); how many.
    pub(crate) fn drop_expired_volatile(&self, now: Millis) -> usize {
        let mut dropped = 0;
        if self.volatile_count() == 0 {
            return 0;
        }
        for i in 0..self.locks.len() {
            let mut g = self.guard(i);
            let before = g.guard.volatile.len();
            if before == 0 {
                continue;
            }
            g.guard.volatile.retain(|(_, v)| v.rec.expires_at > now);
            let n = before - g.guard.volatile.len();
            self.volatile.fetch_sub(n, Ordering::Relaxed);
            dropped += n;
        }
        dropped
    }

    /// Locks the stripe of `key`.
    pub(crate) fn lock(&self, key: &[u8]) -> StripeGuard<'_> {
        self.guard(self.index(key))
    }

    /// Notes the release count of `key`'s stripe, before reading `key` without the lock.
    pub(crate) fn note(&self, key: &[u8]) -> Noted {
        let index = self.index(key);
        // In bounds: masked by the power-of-two length.
        #[allow(clippy::indexing_slicing)]
        let count = &self.releases[index];
        Noted {
            index,
            // Acquire: pairs with the release in `StripeGuard::drop`, so a read made after this
            // sees every write made before the counted release.
            releases: count.load(Ordering::Acquire),
        }
    }

    /// Locks the noted stripe; `true` with it if no holder released it since it was noted, so a
    /// read made in between is still current.
    pub(crate) fn lock_noted(&self, noted: Noted) -> (StripeGuard<'_>, bool) {
        let guard = self.guard(noted.index);
        // Under the lock: every earlier release is visible.
        let unchanged = guard.releases.load(Ordering::Relaxed) == noted.releases;
        (guard, unchanged)
    }

    /// Locks the stripes of several keys in stripe order (so two callers never deadlock), each
    /// stripe once.
    pub(crate) fn lock_many<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> Locked<'_> {
        let mut idx: Vec<usize> = keys.map(|k| self.index(k)).collect();
        idx.sort_unstable();
        idx.dedup();
        let guards = idx.into_iter().map(|i| (i, self.guard(i))).collect();
        Locked {
            stripes: self,
            guards,
        }
    }
}

/// Several stripes held at once (see [`Stripes::lock_many`]).
pub(crate) struct Locked<'a> {
    stripes: &'a Stripes,
    guards: Vec<(usize, StripeGuard<'a>)>,
}

impl<'a> Locked<'a> {
    /// The held stripe of `key`; `None` if `key` was not among the locked keys.
    pub(crate) fn stripe(&mut self, key: &[u8]) -> Option<&mut StripeGuard<'a>> {
        let i = self.stripes.index(key);
        self.guards
            .iter_mut()
            .find(|(j, _)| *j == i)
            .map(|(_, g)| g)
    }
}

impl StripeGuard<'_> {
    /// The in-memory record of `key`, if it has one.
    pub(crate) fn volatile(&self, key: &[u8]) -> Option<&Volatile> {
        self.guard
            .volatile
            .iter()
            .find(|(k, _)| **k == *key)
            .map(|(_, v)| v)
    }

    /// Makes `v` the in-memory record of `key`, replacing the one it had.
    pub(crate) fn set_volatile(&mut self, key: &[u8], v: Volatile) {
        self.guard.forget(key);
        if let Some((_, old)) = self.guard.volatile.iter_mut().find(|(k, _)| **k == *key) {
            *old = v;
        } else {
            self.guard.volatile.push((key.into(), v));
            self.volatile.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops the in-memory record of `key` (it was written to disk, or forgotten); whether it had
    /// one.
    pub(crate) fn drop_volatile(&mut self, key: &[u8]) -> bool {
        let Some(at) = self.guard.volatile.iter().position(|(k, _)| **k == *key) else {
            return false;
        };
        self.guard.volatile.swap_remove(at);
        self.volatile.fetch_sub(1, Ordering::Relaxed);
        true
    }
}

impl Stripe {
    /// Removes and returns the remembered record of `key`, if any.
    pub(crate) fn take(&mut self, key: &[u8]) -> Option<Record> {
        let at = self.held.iter().position(|(k, _)| **k == *key)?;
        Some(self.held.remove(at).1)
    }

    /// Drops the remembered record of `key`: call before or after any write of `key` that does
    /// not go through [`Stripe::written`].
    pub(crate) fn forget(&mut self, key: &[u8]) {
        self.held.retain(|(k, _)| **k != *key);
    }

    /// Notes that `rec` was just written for `key`: remembers it if it is a pending record worth
    /// keeping (no recovery point, a short fingerprint), and forgets any older one either way.
    pub(crate) fn written(&mut self, key: &[u8], rec: Record) {
        self.forget(key);
        let keep = matches!(rec.state, State::Pending { .. })
            && rec.checkpoint.is_none()
            && rec.fingerprint.len() <= HELD_FINGERPRINT_MAX;
        if keep {
            if self.held.len() >= HELD_PER_STRIPE {
                self.held.remove(0);
            }
            self.held.push((key.into(), rec));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::record::Checkpoint;

    fn pending(fence: u64) -> Record {
        Record {
            expires_at: 10,
            fingerprint: vec![1; 32],
            created_at: 1,
            fence,
            attempts: 1,
            takeovers: 0,
            checkpoint: None,
            state: State::Pending { lease_until: 5 },
        }
    }

    #[test]
    fn remembers_pending_records_only_and_replaces_older_ones() {
        let mut s = Stripe::default();
        s.written(b"a", pending(1));
        s.written(b"a", pending(2));
        assert_eq!(s.held.len(), 1);
        assert_eq!(s.take(b"a").map(|r| r.fence), Some(2));
        assert!(s.take(b"a").is_none(), "take removes");

        s.written(b"b", pending(3));
        let mut done = pending(3);
        done.state = State::Released;
        s.written(b"b", done);
        assert!(
            s.take(b"b").is_none(),
            "a record that is not pending is not kept"
        );

        let mut cp = pending(4);
        cp.checkpoint = Some(Checkpoint {
            phase: "p".into(),
            state: vec![0; 8],
        });
        s.written(b"c", cp);
        let mut long = pending(5);
        long.fingerprint = vec![0; HELD_FINGERPRINT_MAX + 1];
        s.written(b"d", long);
        assert!(
            s.held.is_empty(),
            "checkpoints and long fingerprints are not kept"
        );
    }

    #[test]
    fn in_memory_records_are_counted_replaced_and_dropped() {
        let stripes = Stripes::new(4, 7);
        let v = |fence, expires_at| Volatile {
            rec: Record {
                expires_at,
                ..pending(fence)
            },
            stored_slot: None,
        };
        {
            let mut g = stripes.lock(b"a");
            g.written(b"a", pending(1));
            g.set_volatile(b"a", v(2, 10));
            assert!(g.take(b"a").is_none(), "the read cache lets the key go");
            g.set_volatile(b"a", v(3, 10));
            assert_eq!(g.volatile(b"a").map(|x| x.rec.fence), Some(3), "replaced");
        }
        stripes.lock(b"b").set_volatile(b"b", v(4, 20));
        assert_eq!(
            stripes.volatile_count(),
            2,
            "a replacement is not counted twice"
        );
        assert_eq!(stripes.drop_expired_volatile(10), 1, "a expired at 10");
        assert!(stripes.lock(b"a").volatile(b"a").is_none());
        assert!(stripes.lock(b"b").drop_volatile(b"b"));
        assert!(!stripes.lock(b"b").drop_volatile(b"b"), "only once");
        assert_eq!(stripes.volatile_count(), 0);
    }

    #[test]
    fn a_full_stripe_evicts_its_oldest_record() {
        let mut s = Stripe::default();
        for (i, k) in [b"a", b"b", b"c"].iter().enumerate() {
            s.written(*k, pending(i as u64));
        }
        assert_eq!(s.held.len(), HELD_PER_STRIPE);
        assert!(s.take(b"a").is_none());
        assert_eq!(s.take(b"c").map(|r| r.fence), Some(2));
        s.forget(b"b");
        assert!(s.held.is_empty());
    }

    #[test]
    fn a_release_after_noting_is_seen_by_the_next_holder() {
        let stripes = Stripes::new(8, 1);
        let noted = stripes.note(b"k");
        let (g, unchanged) = stripes.lock_noted(noted);
        assert!(unchanged, "nobody held the stripe in between");
        drop(g);
        let (g, unchanged) = stripes.lock_noted(noted);
        assert!(!unchanged, "the first holder's release is counted");
        drop(g);
        let noted = stripes.note(b"k");
        drop(stripes.lock_many([&b"k"[..]].into_iter()));
        assert!(
            !stripes.lock_noted(noted).1,
            "lock_many counts its releases too"
        );
    }

    #[test]
    fn keys_spread_over_the_stripes() {
        let stripes = Stripes::new(64, 42);
        let mut hits = [0u32; 64];
        for i in 0..64_000 {
            let key = format!("tenant-key-{i}");
            hits[stripes.index(key.as_bytes())] += 1;
        }
        let (lo, hi) = (hits.iter().min().unwrap(), hits.iter().max().unwrap());
        assert!(*lo > 800 && *hi < 1200, "uneven stripes: {lo}..{hi}");
        assert!(Stripes::new(64, 1).index(b"k") < 64);
    }

    #[test]
    fn locked_stripes_are_found_by_key() {
        let stripes = Stripes::new(8, 1);
        let keys: [&[u8]; 3] = [b"x", b"y", b"x"];
        let mut locked = stripes.lock_many(keys.into_iter());
        assert!(locked.stripe(b"x").is_some());
        assert!(locked.stripe(b"y").is_some());
    }
}
