//! Idempotent event consumers, the vocabulary and the rules both backends share: the public
//! [`ConsumerOptions`], [`Begin`] and [`MessageFailed`]; a delivery's claim options
//! (`claim_options`: durable from the claim on, so that the attempts of crashed workers count);
//! what a delivery's claim means (`begin_step`); how a failed attempt ends its lease
//! (`message_failure`); the poison marker. Invariants: a delivery is a claim of (group, message
//! id) in the consumer namespace, so it has the request lifecycle (leases, fencing, takeover,
//! expiry); a message acquired past `max_attempts` (its workers kept crashing), or failing its
//! `max_attempts`-th attempt, is stored as a terminal "poisoned" failure and answered
//! `Begin::Poisoned`, never handed out again until it expires.

use std::time::Duration;

use crate::record::{Claim, ClaimOptions, FailKind, Lease, Replay, Response};

/// Metadata key marking a stored failure as a poisoned message.
const POISONED: &str = "idemdb.poisoned";

/// Per-group consumer settings, built like [`crate::ClaimOptions`]: `ConsumerOptions::default()`
/// and setters, passed by value (a reference works too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerOptions {
    /// Attempts (failures, or crashed workers whose lease was taken over) before a message is
    /// poisoned. Default: 5.
    pub max_attempts: u32,
    /// Lease per delivery. Default: the store's [`crate::Config::lease`].
    pub lease: Option<Duration>,
    /// How long a processed message id is remembered. Default: the store's retention.
    pub retention: Option<Duration>,
}

impl ConsumerOptions {
    /// Sets how many attempts a message gets before it is poisoned. Default: 5.
    #[must_use]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }
    /// Sets the lease per delivery. Default: the store's [`crate::Config::lease`].
    #[must_use]
    pub fn lease(mut self, d: Duration) -> Self {
        self.lease = Some(d);
        self
    }
    /// Sets how long a processed message id is remembered. Default: the store's retention.
    #[must_use]
    pub fn retention(mut self, d: Duration) -> Self {
        self.retention = Some(d);
        self
    }
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            lease: None,
            retention: None,
        }
    }
}

/// What [`Store::begin`] found for a delivered message. The names are the claim's
/// ([`crate::Claim`]): one name per outcome across the crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Begin {
    /// Process it, then [`Store::complete`] (or commit) or [`Store::fail_message`].
    Process(Lease),
    /// Already processed (a duplicate delivery): acknowledge it to the broker, and reply with the
    /// stored outcome if there is one to give.
    Completed(Replay),
    /// Already ended with a stored terminal failure that is not poison (one stored with
    /// [`Store::fail`] or a commit): acknowledge it, as a duplicate.
    Failed(Replay),
    /// Another worker holds a live lease on it.
    InProgress {
        /// Time until that lease ends.
        retry_after: Duration,
    },
    /// Failed `max_attempts` times: it belongs in a dead-letter queue.
    Poisoned {
        /// Attempts made.
        attempts: u32,
    },
}

/// What [`Store::fail_message`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum MessageFailed {
    /// Released for another attempt.
    WillRetry {
        /// Attempts so far.
        attempts: u32,
    },
    /// This was the last allowed attempt: the message is now poisoned.
    Poisoned {
        /// Attempts made.
        attempts: u32,
    },
}

pub(crate) fn poison_marker(attempts: u32) -> Response {
    Response::new(Vec::new())
        .with_meta(POISONED, "true")
        .with_meta("attempts", attempts.to_string())
}

fn poisoned_attempts(r: &Replay) -> Option<u32> {
    r.response.meta.get(POISONED)?;
    r.response.meta.get("attempts").and_then(|a| a.parse().ok())
}

/// The claim options of a delivery: durable from the claim on, because poison detection counts
/// the attempts of workers that crashed, so each attempt must survive the crash.
pub(crate) fn claim_options(opts: &ConsumerOptions) -> ClaimOptions {
    ClaimOptions {
        lease: opts.lease,
        retention: opts.retention,
        durable_pending: true,
        written_pending: false,
        wait: None,
    }
}

/// What a delivery's claim means (both backends decide it with this code).
pub(crate) enum BeginStep {
    /// The answer.
    Answer(Begin),
    /// Acquired past `max_attempts` (its workers kept crashing): poison it with this lease
    /// instead of handing it out again; the answer is then `Begin::Poisoned`.
    Poison { lease: Lease, attempts: u32 },
}

pub(crate) fn begin_step(claim: Claim, opts: &ConsumerOptions) -> BeginStep {
    BeginStep::Answer(match claim {
        Claim::Acquired(lease) if lease.attempt() > opts.max_attempts.max(1) => {
            let attempts = lease.attempt() - 1;
            return BeginStep::Poison { lease, attempts };
        }
        Claim::Acquired(lease) => Begin::Process(lease),
        Claim::Completed(r) => Begin::Completed(r),
        Claim::Failed(r) => match poisoned_attempts(&r) {
            Some(attempts) => Begin::Poisoned { attempts },
            None => Begin::Failed(r),
        },
        Claim::InProgress { retry_after } => Begin::InProgress { retry_after },
        Claim::Mismatch => Begin::InProgress {
            retry_after: Duration::ZERO,
        },
    })
}

/// How a failed processing attempt ends the lease, and what it answers: released for another
/// attempt, or poisoned once `max_attempts` attempts were made.
pub(crate) fn message_failure(lease: &Lease, opts: &ConsumerOptions) -> (FailKind, MessageFailed) {
    let attempts = lease.attempt();
    if attempts >= opts.max_attempts.max(1) {
        (
            FailKind::Terminal(poison_marker(attempts)),
            MessageFailed::Poisoned { attempts },
        )
    } else {
        (FailKind::Retryable, MessageFailed::WillRetry { attempts })
    }
}
