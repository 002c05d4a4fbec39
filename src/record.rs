//! The public vocabulary of request idempotency (responses, leases, claim outcomes) and the
//! stored record with its state machine. Invariant: a record is in exactly one state; only the
//! holder of the current fencing token may move it out of `Pending`; `Completed` and `Failed` are
//! final until the record expires or is forgotten.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::{InvalidInput, Result};

/// A stored result: the body bytes plus a small metadata map (an HTTP status, a content type, a
/// resource id). Replayed exactly as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The body, byte for byte.
    #[serde(with = "crate::format::bytes")]
    pub body: Vec<u8>,
    /// Small string metadata, such as `status` → `201`.
    pub meta: BTreeMap<String, String>,
}

impl Response {
    /// A response with this body and no metadata.
    pub fn new(body: impl Into<Vec<u8>>) -> Self {
        Self {
            body: body.into(),
            meta: BTreeMap::new(),
        }
    }

    /// Adds a metadata entry.
    #[must_use]
    pub fn with_meta(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.meta.insert(k.into(), v.into());
        self
    }

    /// Sets the `status` metadata entry (an HTTP status code, by convention).
    #[must_use]
    pub fn with_status(self, status: u16) -> Self {
        self.with_meta("status", status.to_string())
    }

    /// The `status` metadata entry, if present and numeric.
    pub fn status(&self) -> Option<u16> {
        self.meta.get("status").and_then(|s| s.parse().ok())
    }

    /// Bytes counted against `max_response_bytes`: what is stored for it, that is the body and
    /// every metadata key and value, each with its length prefix, and the entry count. A response
    /// within the limit always stores and reads back.
    pub fn size(&self) -> usize {
        prefixed(self.body.len()) + meta_size(&self.meta)
    }
}

/// The stored size of a metadata map: its entry count and each key and value with its length
/// prefix (the body of a [`Response`] adds its own length and prefix to this).
pub(crate) fn meta_size(meta: &BTreeMap<String, String>) -> usize {
    varint_len(meta.len())
        + meta
            .iter()
            .map(|(k, v)| prefixed(k.len()) + prefixed(v.len()))
            .sum::<usize>()
}

/// A length-prefixed field of `len` bytes as stored (bincode's varint prefix, then the bytes).
fn prefixed(len: usize) -> usize {
    varint_len(len).saturating_add(len)
}

/// Bytes of bincode's varint encoding of `n`.
fn varint_len(n: usize) -> usize {
    match n {
        0..=250 => 1,
        251..=0xFFFF => 3,
        0x1_0000..=0xFFFF_FFFF => 5,
        _ => 9,
    }
}

/// A recovery point stored by the lease holder; whoever acquires the key next receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The phase reached, for example `"charged"`.
    pub phase: String,
    /// Whatever state the operation needs to resume from that phase.
    #[serde(with = "crate::format::bytes")]
    pub state: Vec<u8>,
}

/// Proof that the caller holds a key and must execute its operation. Pass it to
/// [`crate::Store::complete`], [`crate::Store::fail`], [`crate::Store::renew`] or
/// [`crate::Store::checkpoint`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub(crate) tenant: Vec<u8>,
    pub(crate) key: Vec<u8>,
    pub(crate) fence: u64,
    pub(crate) until: Millis,
    pub(crate) attempt: u32,
    pub(crate) takeover: bool,
    pub(crate) checkpoint: Option<Checkpoint>,
    pub(crate) store_id: u128,
    /// Whether this lease is for a consumer message or a request.
    pub(crate) ns: crate::format::Namespace,
}

impl Claim {
    /// The outcome's name, as spans and metrics label it (docs/operating.md).
    pub(crate) fn outcome(&self) -> &'static str {
        match self {
            Claim::Acquired(l) if l.takeover => "taken_over",
            Claim::Acquired(_) => "acquired",
            Claim::Completed(_) => "replayed",
            Claim::Failed(_) => "replayed_failure",
            Claim::InProgress { .. } => "in_progress",
            Claim::Mismatch => "mismatch",
        }
    }
}

impl Lease {
    pub(crate) fn record_key(&self) -> crate::format::RecordKey {
        crate::format::record_key(self.ns, &self.tenant, &self.key)
    }

    /// The tenant of the key.
    pub fn tenant(&self) -> &[u8] {
        &self.tenant
    }
    /// The idempotency key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
    /// The fencing token: strictly greater than every token this store issued before, for any key,
    /// across restarts. Pass it to downstream systems so they can refuse a stale holder.
    pub fn fence(&self) -> u64 {
        self.fence
    }
    /// When the lease ends (milliseconds since the epoch, by the store's clock); the record itself
    /// lives until its own [`RecordInfo::expires_at`].
    pub fn lease_until(&self) -> Millis {
        self.until
    }
    /// The old name of [`Lease::lease_until`] (it read like the record's expiry).
    #[deprecated(
        since = "0.1.0",
        note = "use `lease_until`: this is when the lease ends"
    )]
    pub fn expires_at(&self) -> Millis {
        self.until
    }
    /// Which attempt this is: 1 for the first, then one more per retryable failure or takeover.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// Whether this lease was taken over from a holder whose lease had expired.
    pub fn is_takeover(&self) -> bool {
        self.takeover
    }
    /// The last recovery point stored by an earlier holder, if any.
    pub fn checkpoint(&self) -> Option<&Checkpoint> {
        self.checkpoint.as_ref()
    }
}

/// A stored result being replayed to a duplicate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// The response exactly as stored.
    pub response: Response,
    /// When it was stored.
    pub finished_at: Millis,
}

/// What a claim found. Only [`Claim::Acquired`] lets the caller run the operation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Claim {
    /// The caller must execute the operation, then complete or fail the lease.
    Acquired(Lease),
    /// The operation already completed: replay this.
    Completed(Replay),
    /// The operation failed terminally: replay this failure.
    Failed(Replay),
    /// Another caller holds a live lease; try again after this long.
    InProgress {
        /// Time until the holder's lease ends.
        retry_after: Duration,
    },
    /// The key was first used with a different request fingerprint (HTTP 422). Nothing changed.
    Mismatch,
}

/// How an operation failed, for [`crate::Store::fail`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailKind {
    /// Release the key so that the next claim acquires it (the attempt counter goes up).
    Retryable,
    /// Store this failure; later claims replay it as [`Claim::Failed`].
    Terminal(Response),
}

/// A lease holder's call that may find its lease lost: `Ok` with what it did, or `Err` with
/// why it changed nothing. An expected outcome, not an error: every holder's call (complete,
/// fail, renew, checkpoint, `fail_message`, a reservation under a lease) answers
/// `Result<LeaseResult<T>>`.
pub type LeaseResult<T = ()> = std::result::Result<T, LeaseLost>;

/// Why a lease holder's call changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum LeaseLost {
    /// The lease expired and another caller took the key over.
    TakenOver {
        /// The current holder's fencing token.
        current_fence: u64,
    },
    /// The key was already completed or failed terminally.
    Finished,
    /// The key was released by a retryable failure and not acquired since.
    Released,
    /// The record expired or was forgotten.
    Gone,
}

/// An operator's view of one record ([`crate::Store::get`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordInfo {
    /// The state, with its payload.
    pub state: RecordState,
    /// The request fingerprint the key is bound to.
    pub fingerprint: Vec<u8>,
    /// When the record was first claimed.
    pub created_at: Millis,
    /// When the record expires and becomes absent.
    pub expires_at: Millis,
    /// The latest fencing token issued for it.
    pub fence: u64,
    /// Attempts so far.
    pub attempts: u32,
    /// Takeovers of expired leases so far.
    pub takeovers: u32,
    /// The last recovery point.
    pub checkpoint: Option<Checkpoint>,
}

/// The state of a record as seen by [`crate::Store::get`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordState {
    /// Leased until this time (it may already be past: then the next claim takes over).
    Pending {
        /// When the lease ends.
        lease_until: Millis,
    },
    /// Released for a retry.
    Released,
    /// Completed with this response.
    Completed(Replay),
    /// Failed terminally with this response.
    Failed(Replay),
}

/// Per-claim options; unset fields take the store's defaults. Built with `default()` and the
/// setters, passed by value (a reference works too), as [`crate::ConsumerOptions`] is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClaimOptions {
    /// Lease length. Default: [`crate::Config::lease`].
    pub lease: Option<Duration>,
    /// Retention of the record. Default: [`crate::Config::retention`].
    pub retention: Option<Duration>,
    /// Whether the pending record of an acquired lease is written to disk at the claim (`true`)
    /// or kept in memory until the holder completes, fails or checkpoints (`false`, when
    /// [`crate::Config::pending_in_memory`] has room). Durable pending records survive a crash:
    /// the key stays in progress until the lease runs out, then the next acquirer sees the
    /// attempt counted (`Lease::attempt`, `Lease::takeover`). Default: `false` (one durable write
    /// per request). Always `true` on PostgreSQL.
    pub durable_pending: bool,
    /// Whether the pending record of an acquired lease is written at the claim without waiting
    /// for the disk, whatever the store's [`crate::Durability`]: it survives a crash of the
    /// process (kill -9), so the key stays in progress until the lease runs out and the next
    /// acquirer sees the takeover, but not a crash of the machine (the holder's synced
    /// completion makes it durable with its own write). No sync of its own, unlike
    /// `durable_pending`, which it yields to. Default: `false`. On PostgreSQL a pending row is
    /// always written.
    pub written_pending: bool,
    /// How long a claim that finds the key's lease held by another caller waits for that lease
    /// to end before it answers [`crate::Claim::InProgress`]. Waiting, the claim is asked again
    /// when the holder completes, fails or releases (then it answers the replay, the stored
    /// failure, or acquires), and when the lease runs out (then it takes the key over); at this
    /// bound it answers `InProgress` (with the lease's time left) without claiming again. On
    /// the embedded store the holder's call wakes it in-process; on PostgreSQL, in any
    /// instance sharing the store, woken by `LISTEN/NOTIFY` from the statement that ends the lease
    /// (docs/design.md, "Waiting for a lease to end"). Default: `None`, no wait (the claim answers
    /// `InProgress` at once).
    pub wait: Option<Duration>,
}

impl ClaimOptions {
    /// Sets the lease length.
    #[must_use]
    pub fn lease(mut self, d: Duration) -> Self {
        self.lease = Some(d);
        self
    }
    /// Sets the retention.
    #[must_use]
    pub fn retention(mut self, d: Duration) -> Self {
        self.retention = Some(d);
        self
    }
    /// Asks for a pending record written without a sync (see the field `written_pending`).
    #[must_use]
    pub fn written_pending(mut self, yes: bool) -> Self {
        self.written_pending = yes;
        self
    }
    /// Waits up to `d` for a lease held by another caller to end (see the field `wait`).
    #[must_use]
    pub fn wait(mut self, d: Duration) -> Self {
        self.wait = Some(d);
        self
    }
    /// Asks for a durable pending record (see the field `durable_pending`).
    #[must_use]
    pub fn durable_pending(mut self, yes: bool) -> Self {
        self.durable_pending = yes;
        self
    }
}

/// The stored form of a record. `expires_at` lives in the value header (see `codec`), so the
/// compaction filter can read it without decoding the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    #[serde(skip)]
    pub expires_at: Millis,
    #[serde(with = "crate::format::bytes")]
    pub fingerprint: Vec<u8>,
    pub created_at: Millis,
    pub fence: u64,
    pub attempts: u32,
    pub takeovers: u32,
    pub checkpoint: Option<Checkpoint>,
    pub state: State,
}

/// A stored result seen in place, without copying it: what [`crate::Store::replay_with`] hands
/// its closure. The body borrows the store's bytes for the closure's duration.
#[derive(Debug, Clone, Copy)]
pub struct ReplayView<'a> {
    pub(crate) body: &'a [u8],
    pub(crate) meta: &'a BTreeMap<String, String>,
    pub(crate) finished_at: Millis,
    pub(crate) failed: bool,
}

impl<'a> ReplayView<'a> {
    /// The stored response's body.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// A metadata entry of the stored response.
    pub fn meta(&self, key: &str) -> Option<&'a str> {
        self.meta.get(key).map(String::as_str)
    }

    /// The `status` metadata entry, if present and numeric (as [`Response::status`]).
    pub fn status(&self) -> Option<u16> {
        self.meta("status").and_then(|s| s.parse().ok())
    }

    /// When the operation finished (store time, milliseconds since the epoch).
    pub fn finished_at(&self) -> Millis {
        self.finished_at
    }

    /// Whether it is a stored terminal failure ([`Claim::Failed`]) rather than a completion.
    pub fn is_failure(&self) -> bool {
        self.failed
    }

    /// The owned replay, as a claim would give it.
    pub fn to_replay(&self) -> Replay {
        Replay {
            response: Response {
                body: self.body.to_vec(),
                meta: self.meta.clone(),
            },
            finished_at: self.finished_at,
        }
    }
}

/// A borrowed view of a stored record, for the paths that only answer from it (a replay, a
/// mismatch, an in-progress claim): the fingerprint and the response body point into the stored
/// bytes, so no body is copied before the answer is known (the small metadata map and a
/// checkpoint, if any, are copied as they are read). Field for field the serde shape of
/// [`Record`]; `codec` reads it by hand from those bytes, and its tests hold that reader to this
/// type's serde decoder (`hand_view_decodes_as_serde_does`).
#[derive(Debug, Deserialize)]
pub(crate) struct RecordView<'a> {
    #[serde(skip)]
    pub expires_at: Millis,
    pub fingerprint: &'a [u8],
    pub _created_at: Millis,
    pub fence: u64,
    pub _attempts: u32,
    pub _takeovers: u32,
    pub _checkpoint: Option<Checkpoint>,
    #[serde(borrow)]
    pub state: StateView<'a>,
}

/// [`State`], borrowed.
#[derive(Debug, Deserialize)]
pub(crate) enum StateView<'a> {
    Pending {
        lease_until: Millis,
    },
    Released,
    Completed {
        #[serde(borrow)]
        response: ResponseView<'a>,
        at: Millis,
    },
    Failed {
        #[serde(borrow)]
        response: ResponseView<'a>,
        at: Millis,
    },
}

/// [`Response`], with the body borrowed.
#[derive(Debug, Deserialize)]
pub(crate) struct ResponseView<'a> {
    pub body: &'a [u8],
    pub meta: BTreeMap<String, String>,
}

impl ResponseView<'_> {
    pub(crate) fn into_response(self) -> Response {
        Response {
            body: self.body.to_vec(),
            meta: self.meta,
        }
    }
}

impl RecordView<'_> {
    /// Where this record's expiry-index entry is: (expiry time, fencing token).
    pub(crate) fn index_slot(&self) -> (Millis, u64) {
        (self.expires_at, self.fence)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum State {
    Pending { lease_until: Millis },
    Released,
    Completed { response: Response, at: Millis },
    Failed { response: Response, at: Millis },
}

impl Record {
    /// Where this record's expiry-index entry is: (expiry time, fencing token).
    pub(crate) fn index_slot(&self) -> (Millis, u64) {
        (self.expires_at, self.fence)
    }

    /// Moves the record to `Completed`; the recovery point is no longer needed.
    pub(crate) fn complete(&mut self, response: Response, at: Millis) {
        self.checkpoint = None;
        self.state = State::Completed { response, at };
    }

    /// Releases the record for a retry (keeping its recovery point) or moves it to `Failed`.
    pub(crate) fn fail(&mut self, kind: FailKind, at: Millis) {
        match kind {
            FailKind::Retryable => self.state = State::Released,
            FailKind::Terminal(response) => {
                self.checkpoint = None;
                self.state = State::Failed { response, at };
            }
        }
    }

    pub(crate) fn info(&self) -> RecordInfo {
        let state = match &self.state {
            State::Pending { lease_until } => RecordState::Pending {
                lease_until: *lease_until,
            },
            State::Released => RecordState::Released,
            State::Completed { response, at } => RecordState::Completed(Replay {
                response: response.clone(),
                finished_at: *at,
            }),
            State::Failed { response, at } => RecordState::Failed(Replay {
                response: response.clone(),
                finished_at: *at,
            }),
        };
        RecordInfo {
            state,
            fingerprint: self.fingerprint.clone(),
            created_at: self.created_at,
            expires_at: self.expires_at,
            fence: self.fence,
            attempts: self.attempts,
            takeovers: self.takeovers,
            checkpoint: self.checkpoint.clone(),
        }
    }
}

pub(crate) fn check_duration(what: &'static str, d: Duration, max: Duration) -> Result<()> {
    if d.is_zero() {
        return Err(InvalidInput::Duration {
            what,
            reason: "must be positive".into(),
        }
        .into());
    }
    if d > max {
        return Err(InvalidInput::Duration {
            what,
            reason: format!("{d:?} is over the configured maximum of {max:?}"),
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn response_size_is_its_stored_size() {
        let lens = [0usize, 1, 250, 251, 65_535, 65_536];
        for body in lens {
            for entries in [0usize, 1, 3, 251] {
                let mut r = Response::new(vec![7u8; body]);
                for i in 0..entries {
                    let v = "v".repeat(lens[i % 4]);
                    r.meta.insert(format!("k{i}"), v);
                }
                let stored = crate::format::to_bincode("response", &r).unwrap();
                assert_eq!(r.size(), stored.len(), "body {body}, {entries} entries");
            }
        }
    }
}
