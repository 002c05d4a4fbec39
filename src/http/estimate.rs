//! How long handlers take, per route, for the `Retry-After` of a 409. Invariant: memory stays
//! bounded whatever the paths: at most `MAX_ROUTES` routes (a 64-bit hash of method and path) are
//! tracked, and a route that is not answers with the estimate shared by every route; the
//! `Retry-After` derived from an estimate is always whole seconds, at least 1 and at most the
//! remaining lease rounded up.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::time::Duration;

use http::Method;
use parking_lot::Mutex;

/// The most routes with an estimate of their own.
pub(crate) const MAX_ROUTES: usize = 1024;
/// A new duration's weight in the moving average, in 1/DIVISOR parts (a quarter).
const WEIGHT: u64 = 1;
const DIVISOR: u64 = 4;

/// A route: the hash of a request's method and path (a collision only shares an estimate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Route(u64);

/// Exponentially weighted moving averages of handler durations, in microseconds.
pub(crate) struct Durations {
    hasher: RandomState,
    inner: Mutex<Averages>,
}

#[derive(Default)]
struct Averages {
    routes: HashMap<Route, u64>,
    shared: Option<u64>,
}

impl Default for Durations {
    fn default() -> Self {
        Durations {
            hasher: RandomState::new(),
            inner: Mutex::new(Averages::default()),
        }
    }
}

fn mix(avg: Option<u64>, sample: u64) -> u64 {
    match avg {
        None => sample,
        Some(a) => {
            let sum = u128::from(a) * u128::from(DIVISOR - WEIGHT)
                + u128::from(sample) * u128::from(WEIGHT);
            u64::try_from(sum / u128::from(DIVISOR)).unwrap_or(u64::MAX)
        }
    }
}

impl Durations {
    pub(crate) fn route(&self, method: &Method, path: &str) -> Route {
        Route(self.hasher.hash_one((method.as_str(), path)))
    }

    /// Counts a handler of `route` that took `took`.
    pub(crate) fn record(&self, route: Route, took: Duration) {
        let sample = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let mut a = self.inner.lock();
        a.shared = Some(mix(a.shared, sample));
        let tracked = a.routes.len() < MAX_ROUTES || a.routes.contains_key(&route);
        if tracked {
            let avg = a.routes.get(&route).copied();
            a.routes.insert(route, mix(avg, sample));
        }
    }

    /// How long a handler of `route` takes: its own estimate, else the shared one, else `None`
    /// (no handler has finished yet).
    pub(crate) fn estimate(&self, route: Route) -> Option<Duration> {
        let a = self.inner.lock();
        a.routes
            .get(&route)
            .copied()
            .or(a.shared)
            .map(Duration::from_micros)
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.inner.lock().routes.len()
    }
}

/// Seconds to put in `Retry-After` for a duplicate whose key has `remaining` of its lease left:
/// the estimate less the time since the lease was last taken or renewed (`lease - remaining`),
/// rounded up, at least 1 and at most the remaining lease rounded up. With no estimate, 1.
pub(crate) fn retry_after_secs(
    remaining: Duration,
    lease: Duration,
    estimate: Option<Duration>,
) -> u64 {
    let cap = ceil_secs(remaining).max(1);
    let Some(estimate) = estimate else {
        return 1;
    };
    let elapsed = lease.saturating_sub(remaining);
    ceil_secs(estimate.saturating_sub(elapsed)).clamp(1, cap)
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn retry_after_follows_the_estimate_within_bounds() {
        let lease = MS(30_000);
        // A 50 ms handler: 1 s, not the 30 s lease.
        assert_eq!(retry_after_secs(MS(29_990), lease, Some(MS(50))), 1);
        // A 5 s handler that started 1.5 s ago: 3.5 s left, so 4.
        assert_eq!(retry_after_secs(MS(28_500), lease, Some(MS(5_000))), 4);
        // Never past the lease.
        assert_eq!(retry_after_secs(MS(2_100), lease, Some(MS(60_000))), 3);
        // A handler past its estimate, or no estimate yet: 1.
        assert_eq!(retry_after_secs(MS(10_000), lease, Some(MS(5_000))), 1);
        assert_eq!(retry_after_secs(MS(29_000), lease, None), 1);
        assert_eq!(retry_after_secs(Duration::ZERO, lease, Some(MS(9_000))), 1);
    }

    #[test]
    fn averages_move_per_route_and_routes_are_bounded() {
        let d = Durations::default();
        let (a, b) = (d.route(&Method::POST, "/a"), d.route(&Method::POST, "/b"));
        assert_ne!(a, d.route(&Method::PATCH, "/a"));
        assert_eq!(d.estimate(a), None);
        d.record(a, MS(100));
        assert_eq!(d.estimate(a), Some(MS(100)));
        // Not yet seen: the shared estimate.
        assert_eq!(d.estimate(b), Some(MS(100)));
        d.record(a, MS(500));
        assert_eq!(d.estimate(a), Some(MS(200)));
        for i in 0..2 * MAX_ROUTES {
            d.record(d.route(&Method::POST, &format!("/r/{i}")), MS(8));
        }
        assert_eq!(d.tracked(), MAX_ROUTES);
        // A route past the bound uses the shared estimate, which every sample moves.
        let late = d.route(&Method::POST, "/late");
        d.record(late, MS(8));
        assert_eq!(d.estimate(late), d.estimate(b));
        assert!(d.estimate(late) < Some(MS(10)));
        assert_eq!(d.estimate(a), Some(MS(200)));
    }
}
