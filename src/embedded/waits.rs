//! Waiting for a lease to end, inside the process that holds the store. Invariant: a waiter
//! takes its ticket before it reads the key (its claim), and every lease that ends after that
//! (completed, failed, released) wakes it: while a ticket is out, each end moves a generation
//! forward and wakes every waiter, threads and tasks alike. A wake is only a reason to claim
//! again; a waiter also wakes at the lease's end and at its own bound, so nothing waits forever.
//! The PostgreSQL backend's counterpart, for waiters in other processes, is `postgres/waits.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// The store's one signal of "a lease ended".
#[derive(Default)]
pub(crate) struct Finished {
    /// Tickets out: no one waits while this is 0, and a lease's end costs one atomic load.
    waiters: AtomicUsize,
    generation: Mutex<u64>,
    cv: Condvar,
    #[cfg(feature = "async")]
    notify: std::sync::Arc<tokio::sync::Notify>,
}

impl Finished {
    /// A lease ended: wakes every waiter.
    pub(crate) fn notify(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            *self.generation.lock() += 1;
            self.cv.notify_all();
            #[cfg(feature = "async")]
            self.notify.notify_waiters();
        }
    }

    /// A ticket for a thread, to take before the claim it follows.
    pub(crate) fn ticket(&self) -> Ticket<'_> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let seen = *self.generation.lock();
        Ticket { of: self, seen }
    }

    /// A ticket for a task, to take before the claim it follows.
    #[cfg(feature = "async")]
    pub(crate) fn async_ticket(self: &std::sync::Arc<Self>) -> AsyncTicket {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut woken = Box::pin(self.notify.clone().notified_owned());
        // Registered from here on: an end between now and the first poll is not missed.
        woken.as_mut().enable();
        AsyncTicket {
            of: self.clone(),
            woken,
        }
    }
}

/// A thread's wait for the next lease end.
pub(crate) struct Ticket<'a> {
    of: &'a Finished,
    seen: u64,
}

impl Ticket<'_> {
    /// Blocks until a lease ends after the ticket was taken (`true`), or `at_most` passes
    /// (`false`).
    pub(crate) fn wait(self, at_most: Duration) -> bool {
        let until = Instant::now() + at_most;
        let mut g = self.of.generation.lock();
        while *g == self.seen {
            if self.of.cv.wait_until(&mut g, until).timed_out() {
                return *g != self.seen;
            }
        }
        true
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.of.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A task's wait for the next lease end.
#[cfg(feature = "async")]
pub(crate) struct AsyncTicket {
    of: std::sync::Arc<Finished>,
    woken: std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>,
}

#[cfg(feature = "async")]
impl AsyncTicket {
    /// Until a lease ends after the ticket was taken (`true`), or `until` (`false`).
    pub(crate) async fn wait(mut self, until: tokio::time::Instant) -> bool {
        tokio::time::timeout_at(until, self.woken.as_mut())
            .await
            .is_ok()
    }
}

#[cfg(feature = "async")]
impl Drop for AsyncTicket {
    fn drop(&mut self) {
        self.of.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(feature = "async")]
impl crate::embedded::Store {
    /// A task's ticket for the next lease end in this store, to take before the claim it follows.
    pub(crate) fn lease_end_ticket(&self) -> AsyncTicket {
        self.core.finished.async_ticket()
    }
}
