//! Request records, the part both backends share: what `execute` answers ([`Execution`]) and the
//! argument checks of a claim, a response and a checkpoint (the names, the fingerprint's length,
//! lease and retention, the size limit, no NUL byte where PostgreSQL keeps text). Invariants:
//! each check runs before anything is written or sent, so a refused call changes nothing, and
//! both backends refuse the same calls with the same error.
//! The rules both backends decide by ([`claim_step`], [`lease_lost`], [`names_twice`]) are
//! written here once, without I/O; where SQL restates them (`idemdb_claim`, `idemdb_holder`),
//! `fleet::the_claim_and_holder_rules_are_the_sql_s` feeds the same cases to both.

use std::time::Duration;

use crate::clock::{duration_millis, Millis};
use crate::config::Common;
use crate::error::{InvalidInput, Result};
use crate::record::{
    check_duration, Checkpoint, ClaimOptions, FailKind, LeaseLost, Replay, Response, State,
};

/// A stored request's state as the claim and holder rules read it: each backend maps its own
/// representation (an encoded record, a borrowed view, a row) into it. `R` is what a finished
/// record replays, in whatever form the backend has it at hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen<R> {
    /// Held by a lease until `lease_until` (after which the lease has run out).
    Pending {
        /// When the lease ends.
        lease_until: Millis,
    },
    /// Released by a retryable failure.
    Released,
    /// Completed: replayed.
    Completed(R),
    /// Failed terminally: replayed.
    Failed(R),
}

impl<R> Seen<R> {
    /// The same state, its replay (if any) mapped by `f`.
    pub(crate) fn map<S>(self, f: impl FnOnce(R) -> S) -> Seen<S> {
        match self {
            Seen::Pending { lease_until } => Seen::Pending { lease_until },
            Seen::Released => Seen::Released,
            Seen::Completed(r) => Seen::Completed(f(r)),
            Seen::Failed(r) => Seen::Failed(f(r)),
        }
    }
}

impl<'a> Seen<(&'a Response, Millis)> {
    /// A stored record's state as the rules read it: a finished one with its response and when
    /// it finished.
    pub(crate) fn of(state: &'a State) -> Self {
        match state {
            State::Pending { lease_until } => Seen::Pending {
                lease_until: *lease_until,
            },
            State::Released => Seen::Released,
            State::Completed { response, at } => Seen::Completed((response, *at)),
            State::Failed { response, at } => Seen::Failed((response, *at)),
        }
    }
}

/// A key's stored record, as the claim rule reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Found<'a, R> {
    /// When the record expires (it is then treated as absent).
    pub(crate) expires_at: Millis,
    /// The fingerprint it was claimed with.
    pub(crate) fingerprint: &'a [u8],
    /// Its state.
    pub(crate) state: Seen<R>,
}

/// What a key's record decides for a claim: the claim rule (docs/design.md, "Invariants", "The
/// rules, written once").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimStep<R> {
    /// No record: the claim writes a new one (attempt 1).
    Absent,
    /// An expired record: treated as absent (a new record, attempt 1).
    Expired,
    /// A live record claimed with another fingerprint.
    Mismatch,
    /// A live completed record: replayed.
    Completed(R),
    /// A live terminally failed record: replayed.
    Failed(R),
    /// A live lease: another caller holds the key for `retry_after` more.
    InProgress {
        /// Until the lease ends.
        retry_after: Duration,
    },
    /// Released for a retry, or a lease that ran out (a takeover): the claim acquires the
    /// record, its next attempt.
    Acquire {
        /// Whether a lease was still pending (it ran out): the new holder takes it over.
        takeover: bool,
    },
}

impl<R> ClaimStep<R> {
    /// The same step, its replay (if any) mapped by `f`.
    pub(crate) fn map_replay<S>(self, f: impl FnOnce(R) -> S) -> ClaimStep<S> {
        match self {
            ClaimStep::Absent => ClaimStep::Absent,
            ClaimStep::Expired => ClaimStep::Expired,
            ClaimStep::Mismatch => ClaimStep::Mismatch,
            ClaimStep::Completed(r) => ClaimStep::Completed(f(r)),
            ClaimStep::Failed(r) => ClaimStep::Failed(f(r)),
            ClaimStep::InProgress { retry_after } => ClaimStep::InProgress { retry_after },
            ClaimStep::Acquire { takeover } => ClaimStep::Acquire { takeover },
        }
    }
}

/// The claim rule, in order: no record, or an expired one, is acquired as new; another
/// fingerprint is a mismatch; a finished record replays; a live lease is in progress; a released
/// record, or a lease that ran out, is acquired (the latter as a takeover).
pub(crate) fn claim_step<R>(
    found: Option<Found<'_, R>>,
    fingerprint: &[u8],
    now: Millis,
) -> ClaimStep<R> {
    let Some(found) = found else {
        return ClaimStep::Absent;
    };
    if found.expires_at <= now {
        return ClaimStep::Expired;
    }
    if found.fingerprint != fingerprint {
        return ClaimStep::Mismatch;
    }
    match found.state {
        Seen::Completed(r) => ClaimStep::Completed(r),
        Seen::Failed(r) => ClaimStep::Failed(r),
        Seen::Pending { lease_until } if lease_until > now => ClaimStep::InProgress {
            retry_after: Duration::from_millis(lease_until - now),
        },
        Seen::Pending { .. } => ClaimStep::Acquire { takeover: true },
        Seen::Released => ClaimStep::Acquire { takeover: false },
    }
}

/// A key's stored record, as a lease holder's call (complete, fail, renew, checkpoint) finds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holding {
    /// Whether the record has not expired.
    pub(crate) live: bool,
    /// Its state (finished records carry nothing here).
    pub(crate) state: Seen<()>,
    /// Its current fencing token.
    pub(crate) fence: u64,
}

/// The holder rule: why a lease with token `ours` no longer holds the key's record (`found`:
/// `None` when there is none), or `None` when it still does (the pending record of its token).
pub(crate) fn lease_lost(found: Option<Holding>, ours: u64) -> Option<LeaseLost> {
    let Some(h) = found.filter(|h| h.live) else {
        return Some(LeaseLost::Gone);
    };
    match h.state {
        Seen::Completed(()) | Seen::Failed(()) => Some(LeaseLost::Finished),
        Seen::Released => Some(LeaseLost::Released),
        Seen::Pending { .. } if h.fence != ours => Some(LeaseLost::TakenOver {
            current_fence: h.fence,
        }),
        Seen::Pending { .. } => None,
    }
}

/// The refusal of a commit that names one entity, reservation or lease twice (both backends
/// check it before anything is written or sent).
pub(crate) fn names_twice() -> crate::error::Error {
    InvalidInput::NamedTwice.into()
}

/// Longest request fingerprint accepted, in bytes.
pub const MAX_FINGERPRINT_LEN: usize = 1024;

/// What [`Store::execute`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Execution {
    /// This call ran the operation; its result is stored (or, for a retryable failure, the key was
    /// released).
    Ran(std::result::Result<Response, FailKind>),
    /// A stored completion, replayed (as [`Claim::Completed`]).
    Completed(Replay),
    /// A stored terminal failure, replayed (as [`Claim::Failed`]).
    Failed(Replay),
    /// Another caller is running it; try again after this long.
    InProgress {
        /// Time until that caller's lease ends.
        retry_after: Duration,
    },
    /// The key was first used with a different fingerprint.
    Mismatch,
    /// The operation ran but its lease was taken over meanwhile; its result was not stored.
    LeaseLost(LeaseLost),
}

/// Checks a claim's arguments against the configuration (both backends): the names, the
/// fingerprint's length, the lease and retention; returns (lease, retention) in milliseconds.
pub(crate) fn check_claim(
    cfg: &Common,
    tenant: &[u8],
    key: &[u8],
    fingerprint: &[u8],
    opts: ClaimOptions,
) -> Result<(Millis, Millis)> {
    check_names_and_fingerprint(cfg, tenant, key, fingerprint)?;
    let lease_d = opts.lease.unwrap_or(cfg.lease);
    let retention_d = opts.retention.unwrap_or(cfg.retention);
    check_duration("lease", lease_d, cfg.max_lease)?;
    check_duration("retention", retention_d, cfg.max_retention)?;
    if lease_d > retention_d {
        return Err(InvalidInput::Duration {
            what: "lease",
            reason: format!("{lease_d:?} is longer than the retention {retention_d:?}"),
        }
        .into());
    }
    Ok((duration_millis(lease_d), duration_millis(retention_d)))
}

/// Checks the names and the fingerprint's length of a claim or a replay.
pub(crate) fn check_names_and_fingerprint(
    cfg: &Common,
    tenant: &[u8],
    key: &[u8],
    fingerprint: &[u8],
) -> Result<()> {
    cfg.check_names(tenant, key)?;
    if fingerprint.len() > MAX_FINGERPRINT_LEN {
        return Err(InvalidInput::TooLarge {
            what: "fingerprint",
            len: fingerprint.len(),
            max: MAX_FINGERPRINT_LEN,
        }
        .into());
    }
    Ok(())
}

/// Checks a response (`what`: "response" or "failure") against the size limit.
pub(crate) fn check_response(cfg: &Common, what: &'static str, r: &Response) -> Result<()> {
    cfg.check_size(what, r.size())?;
    // PostgreSQL keeps metadata as text, which cannot hold a NUL byte: refused on both backends
    // alike, before anything is written or sent.
    if r.meta
        .iter()
        .any(|(k, v)| k.contains('\0') || v.contains('\0'))
    {
        return Err(InvalidInput::NulByte {
            what: "response metadata",
        }
        .into());
    }
    Ok(())
}

/// Checks a checkpoint against the size limit.
pub(crate) fn check_checkpoint(cfg: &Common, cp: &Checkpoint) -> Result<()> {
    cfg.check_size("checkpoint", cp.phase.len() + cp.state.len())?;
    if cp.phase.contains('\0') {
        return Err(InvalidInput::NulByte {
            what: "checkpoint phase",
        }
        .into());
    }
    Ok(())
}
