//! Request idempotency records: claim, complete, fail, renew, checkpoint, execute, and the
//! operator's get and forget. Invariants: a claim that acquires writes a pending record with a new
//! fencing token under the key's stripe, and of any number of concurrent claimers exactly one
//! acquires; an answer that writes nothing (a replay, a mismatch, in progress) is given from one
//! read, with or without the stripe; only the holder of the current token leaves `Pending`.

use std::time::Duration;

use crate::clock::{duration_millis, Millis};
use crate::config::Config;
use crate::error::{InvalidInput, Result};
use crate::record::{
    check_duration, Checkpoint, ClaimOptions, FailKind, LeaseLost, Replay, Response,
};

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
    cfg: &Config,
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
    cfg: &Config,
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
pub(crate) fn check_response(cfg: &Config, what: &'static str, r: &Response) -> Result<()> {
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
pub(crate) fn check_checkpoint(cfg: &Config, cp: &Checkpoint) -> Result<()> {
    cfg.check_size("checkpoint", cp.phase.len() + cp.state.len())?;
    if cp.phase.contains('\0') {
        return Err(InvalidInput::NulByte {
            what: "checkpoint phase",
        }
        .into());
    }
    Ok(())
}
