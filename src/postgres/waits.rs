//! Waiting for a lease to end, anywhere in the fleet: a claim that found the key's lease held
//! waits for its end, woken by `LISTEN/NOTIFY` (migration 6). Invariants:
//! - a waiter registers its key with this process's listener, and the listener is listening,
//!   before its mark ([`statements::MARK_WAITING`]) commits; every change that ends the marked
//!   lease afterwards notifies (it sees the flag on the row it changes, under the row's lock:
//!   `statements::wake_waiters!`), so the
//!   notification reaches it;
//! - a notification, a reconnection of the listener (notifications may have been lost while it
//!   was away) and the listener's loss all wake the waiters concerned: a wake is only a reason
//!   to claim again, never an answer;
//! - every waiter also wakes when the lease it waits for runs out (by the database's clock, as
//!   the mark answered it) and at its own bound, so a crashed holder, a lost connection or a
//!   pooler that drops notifications costs time, never a wait forever;
//! - the decision stays the database's: the mark is one statement, and the answer is the next
//!   claim's.
//!
//! One listening connection per store, outside the pool (the URL of `Config::listen_url`, by
//! default the store's), opened at the first wait and kept while the store lives; it reconnects
//! by itself after a loss, a second apart. A loss is noticed even when nothing closes the socket
//! (a NAT or load balancer that dropped an idle flow, a frozen host): the connection is asked an
//! empty query every [`HEARTBEAT`], and one that does not answer within [`HEARTBEAT_TIMEOUT`] is
//! dropped as lost (its waiters woken); opening one is bounded by [`OPEN_BOUND`]. The listener
//! runs as a task of the runtime of the wait that started it: if that runtime ends, the next wait
//! starts it again. Its state is the gauge `idemdb_postgres_listener_up` (1 listening, 0 not;
//! feature `metrics`), and a warning (feature `tracing`) whenever it is away.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use super::errors::classify;
use super::pool::Dialer;
use super::rows::ns_code;
use super::statements;
use super::store::PgStore;
use crate::error::Result;
use crate::format::Namespace;

/// Payloads are cut to this many bytes (PostgreSQL's limit is 8,000): two keys whose payloads
/// only differ past it wake each other's waiters, who claim again and wait again.
const PAYLOAD_MAX: usize = 7_000;

/// How long a waiter waits for the listener to be listening (it is opened at the first wait)
/// before it waits for the lease's end alone.
const LISTENER_START: Duration = Duration::from_secs(5);

/// Between two attempts to (re)open the listening connection.
const RECONNECT: Duration = Duration::from_secs(1);

/// How often the listening connection is asked an empty query while it listens.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// How long that query's answer may take before the connection counts as lost.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most that opening the listening connection may take (connecting to each host, the
/// channel's name, `LISTEN`).
const OPEN_BOUND: Duration = Duration::from_secs(30);

/// A store's fleet-wide waits.
pub(crate) struct Waits {
    shared: Arc<Shared>,
    /// Dropped with the store: the listener then closes its connection and ends.
    _stop: watch::Sender<()>,
    stopped: watch::Receiver<()>,
}

struct Shared {
    dialer: Dialer,
    state: Mutex<State>,
    /// Whether the listener is listening now.
    listening: watch::Sender<Phase>,
}

/// The listener's state, as waiters see it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Opening its first connection: a waiter waits for it (at most [`LISTENER_START`]).
    Starting,
    Listening,
    /// Its connection failed or was lost; it opens another a second later. Waiters do not wait
    /// for it: their lease's end and their bound wake them.
    Away,
}

#[derive(Default)]
struct State {
    /// Each waited-for key's payload, its signal and how many waiters hold it.
    keys: HashMap<String, (Arc<Notify>, usize)>,
    started: bool,
}

impl Waits {
    pub(crate) fn new(dialer: Dialer) -> Waits {
        let (stop, stopped) = watch::channel(());
        Waits {
            shared: Arc::new(Shared {
                dialer,
                state: Mutex::new(State::default()),
                listening: watch::channel(Phase::Starting).0,
            }),
            _stop: stop,
            stopped,
        }
    }

    /// Registers a waiter for `key`'s lease, and returns once the listener is listening (or
    /// could not start in time, or by `until`: then only the lease's end and the bound wake it).
    async fn ticket(&self, payload: String, until: Instant) -> Ticket {
        let (notify, start) = {
            let mut st = self.shared.state.lock();
            let entry = st
                .keys
                .entry(payload.clone())
                .or_insert_with(|| (Arc::new(Notify::new()), 0));
            entry.1 += 1;
            let notify = entry.0.clone();
            let start = !std::mem::replace(&mut st.started, true);
            (notify, start)
        };
        let mut woken = Box::pin(notify.notified_owned());
        woken.as_mut().enable();
        let ticket = Ticket {
            shared: self.shared.clone(),
            payload,
            woken,
        };
        if start {
            tokio::spawn(listen(Arc::downgrade(&self.shared), self.stopped.clone()));
        }
        let mut listening = self.shared.listening.subscribe();
        let by = until.min(Instant::now() + LISTENER_START);
        let _ = tokio::time::timeout_at(by, listening.wait_for(|p| *p != Phase::Starting)).await;
        ticket
    }
}

/// One waiter's registration: woken by a notification for its key or by the listener's
/// (re)connection and loss.
struct Ticket {
    shared: Arc<Shared>,
    payload: String,
    woken: std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        if let Some(entry) = st.keys.get_mut(&self.payload) {
            entry.1 -= 1;
            if entry.1 == 0 {
                st.keys.remove(&self.payload);
            }
        }
    }
}

impl Shared {
    fn wake(&self, payload: &str) {
        if let Some((n, _)) = self.state.lock().keys.get(payload) {
            n.notify_waiters();
        }
    }

    fn wake_all(&self) {
        for (n, _) in self.state.lock().keys.values() {
            n.notify_waiters();
        }
    }

    /// Says the listener's phase to waiters and in the gauge.
    fn set_phase(&self, phase: Phase) {
        self.listening.send_replace(phase);
        #[cfg(feature = "metrics")]
        metrics::gauge!("idemdb_postgres_listener_up").set(if phase == Phase::Listening {
            1.0
        } else {
            0.0
        });
    }
}

/// Held by the listener's task: when the task ends for any reason (its runtime shut down, the
/// store dropped), the next wait starts a new one, and the waiters of this one are woken.
struct Running(Weak<Shared>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.0.upgrade() {
            s.state.lock().started = false;
            s.set_phase(Phase::Away);
            s.wake_all();
        }
    }
}

/// The listener: opens its connection, listens on the schema's channel, and wakes the waiters
/// of each notification's key; after a loss, wakes everyone and opens again.
async fn listen(shared: Weak<Shared>, mut stopped: watch::Receiver<()>) {
    let _running = Running(shared.clone());
    loop {
        let Some(s) = shared.upgrade() else { return };
        let session = match tokio::time::timeout(OPEN_BOUND, open(&s)).await {
            Ok(session) => session,
            Err(_) => Err(crate::error::Error::unavailable(format!(
                "PostgreSQL: the listening connection did not open within {OPEN_BOUND:?}"
            ))),
        };
        drop(s);
        #[cfg(feature = "tracing")]
        if let Err(e) = &session {
            tracing::warn!(
                target: "idemdb",
                error = %e,
                "PostgreSQL: the listening connection for waiting claims cannot be opened (check \
                 Config::listen_url); waiting claims end at their lease's end or bound until it \
                 can, retrying every second"
            );
        }
        if let Ok((client, mut notes)) = session {
            if let Some(s) = shared.upgrade() {
                s.set_phase(Phase::Listening);
                // Anything sent while no one listened is lost: everyone claims again.
                s.wake_all();
            }
            let mut beat = tokio::time::interval_at(Instant::now() + HEARTBEAT, HEARTBEAT);
            beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    note = notes.recv() => match note {
                        Some(payload) => match shared.upgrade() {
                            Some(s) => s.wake(&payload),
                            None => return,
                        },
                        None => break,
                    },
                    _ = beat.tick() => {
                        // Notifications that arrive meanwhile wait in the channel.
                        let answer =
                            tokio::time::timeout(HEARTBEAT_TIMEOUT, client.simple_query("")).await;
                        if !matches!(answer, Ok(Ok(_))) {
                            break;
                        }
                    }
                    _ = stopped.changed() => return,
                }
            }
            drop(client);
            #[cfg(feature = "tracing")]
            tracing::warn!(
                target: "idemdb",
                "PostgreSQL: the listening connection for waiting claims was lost (closed, or no \
                 answer to its heartbeat within {HEARTBEAT_TIMEOUT:?}); its waiters claim again, \
                 and it reopens a second later"
            );
            if let Some(s) = shared.upgrade() {
                s.set_phase(Phase::Away);
                s.wake_all();
            }
        } else if let Some(s) = shared.upgrade() {
            s.set_phase(Phase::Away);
            s.wake_all();
        }
        tokio::select! {
            () = tokio::time::sleep(RECONNECT) => {}
            _ = stopped.changed() => return,
        }
    }
}

/// A listening session: its client (dropping it closes the connection) and the payloads of
/// the notifications it receives, in order; the channel ends when the connection does.
async fn open(s: &Shared) -> Result<(tokio_postgres::Client, mpsc::UnboundedReceiver<String>)> {
    let (client, mut connection) = s.dialer.dial().await?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                    if tx.send(n.payload().to_owned()).is_err() {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            }
        }
    });
    let row = client
        .query_one("SELECT idemdb_wait_channel()", &[])
        .await
        .map_err(classify)?;
    let channel: String = row.get(0);
    // The channel is `idemdb_wait_` and hex digits (migration 6): a plain identifier.
    client
        .batch_execute(&format!("LISTEN {channel}"))
        .await
        .map_err(classify)?;
    Ok((client, rx))
}

/// The payload `idemdb_wake_waiters` (migration 10) sends for a key: its namespace, tenant and
/// key in hex, cut as it cuts it.
fn payload(ns: Namespace, tenant: &[u8], key: &[u8]) -> String {
    use std::fmt::Write;
    let mut p = String::with_capacity(8 + 2 * (tenant.len() + key.len()));
    let _ = write!(p, "{}:", ns_code(ns));
    for b in tenant {
        let _ = write!(p, "{b:02x}");
    }
    p.push(':');
    for b in key {
        let _ = write!(p, "{b:02x}");
    }
    p.truncate(PAYLOAD_MAX);
    p
}

/// How a wait for a lease's end ended.
pub(crate) enum Waited {
    /// The lease may have ended: a notification for the key, the listener's (re)connection or
    /// loss, or the lease ran out by the database's clock (its holder may have crashed). Claim
    /// again.
    Ended,
    /// The waiter's bound passed first.
    Bound,
    /// There was no live lease to wait for (it ended after the claim read it): claim again.
    NoLease,
}

impl PgStore {
    /// Waits, at most until `deadline`, for the live lease of the key to end.
    pub(crate) async fn wait_for_end(
        &self,
        ns: Namespace,
        tenant: &[u8],
        key: &[u8],
        deadline: Instant,
    ) -> Result<Waited> {
        let mut ticket = self.waits.ticket(payload(ns, tenant, key), deadline).await;
        let row = self
            .query(
                statements::MARK_WAITING,
                &[&ns_code(ns), &tenant, &key, &self.now_param()],
            )
            .await?;
        let Some(row) = row else {
            return Ok(Waited::NoLease);
        };
        let left: i64 = row.get(0);
        let lease_end = Instant::now() + Duration::from_millis(u64::try_from(left).unwrap_or(0));
        Ok(
            match tokio::time::timeout_at(deadline.min(lease_end), ticket.woken.as_mut()).await {
                Err(_) if deadline < lease_end => Waited::Bound,
                _ => Waited::Ended,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_names_the_key_as_the_database_does() {
        assert_eq!(payload(Namespace::Requests, b"t\x01", b"K"), "0:7401:4b");
        let long = payload(Namespace::Requests, &[0xab; 4000], b"k");
        assert_eq!(long.len(), PAYLOAD_MAX);
    }
}
