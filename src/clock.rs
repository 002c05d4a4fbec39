//! Time source. Invariant: this is the only module that reads the system clock; everything else
//! asks a [`Clock`], so tests drive time with a [`ManualClock`] and a merge operator or compaction
//! filter never reads time at all (the filter takes its cut-off from an atomic the store updates).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch. All expiry and lease times in idemdb use this unit.
pub type Millis = u64;

/// A source of wall-clock time in milliseconds since the Unix epoch.
///
/// The store never trusts a clock to be monotonic: its time ([`crate::Store::now`]) is the
/// largest reading it has used, so a clock stepping backwards (an NTP correction, a restored VM
/// snapshot) cannot resurrect an expired record or a lease that ran out. This holds across
/// restarts too: before its time passes a mark, the store writes the mark (one second ahead of
/// the reading, with the store's durability) to its `meta` column family, and a reopened store
/// starts at the mark. After a clean close (or drop of the last handle) the mark is the last time
/// used exactly; after a crash the store's time may resume up to one second ahead of the last time
/// it used. While the clock reads earlier than the store's time, the store's time stands still.
/// If the mark cannot be written (a failing disk), the store's time waits at the previous mark.
pub trait Clock: Send + Sync + 'static {
    /// The current time in milliseconds since the Unix epoch.
    fn now_millis(&self) -> Millis;
}

/// The operating system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A manual clock starting at `start` milliseconds since the epoch.
    pub fn new(start: Millis) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(start)),
        }
    }

    /// Moves the clock forward by `d` (saturating).
    pub fn advance(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(ms))
            });
    }

    /// Sets the clock to `t`, which may be earlier than now (to test clocks that step back).
    pub fn set(&self, t: Millis) {
        self.now.store(t, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    /// Starts at 2026-01-01T00:00:00Z so that expiry ULIDs look realistic.
    fn default() -> Self {
        Self::new(1_767_225_600_000)
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }
}

/// Converts a duration to whole milliseconds, rounding up so that a positive duration never
/// becomes zero.
pub(crate) fn duration_millis(d: Duration) -> u64 {
    let ms = d.as_millis();
    let ms = if !d.as_nanos().is_multiple_of(1_000_000) {
        ms + 1
    } else {
        ms
    };
    u64::try_from(ms).unwrap_or(u64::MAX)
}
