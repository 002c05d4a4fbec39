//! A record's values as its row stores them, both ways: the state and namespace codes, integers
//! as the database's signed ones, response metadata as a flat text array, and a holder's change
//! as its statement's values ([`HolderCall`]); and back from a row: replays, checkpoints, the
//! shared rules' [`Seen`], and why a lease was lost. Invariant: nothing read from a row is
//! trusted: a negative time or counter, an odd metadata array or an unknown state code is a
//! damaged row ([`crate::error::corrupted`]), never read as some value; a value that does not
//! fit its column is refused before the statement is sent.

use std::collections::BTreeMap;

use tokio_postgres::Row;

use super::send::Param;
use super::statements;
use crate::clock::Millis;
use crate::error::Result;
use crate::format::Namespace;
use crate::record::{Checkpoint, LeaseLost, Replay, Response};
use crate::requests::{lease_lost, Holding, Seen};

/// Record states as stored in `idemdb_requests.state`.
pub(super) const PENDING: i16 = 0;
pub(super) const RELEASED: i16 = 1;
pub(super) const COMPLETED: i16 = 2;
pub(super) const FAILED: i16 = 3;

pub(super) fn ns_code(ns: Namespace) -> i16 {
    match ns {
        Namespace::Requests => 0,
        Namespace::Consumers => 1,
    }
}

pub(super) fn to_i64(what: &'static str, v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| {
        crate::error::InvalidInput::Duration {
            what,
            reason: format!("{v} ms does not fit the database's bigint"),
        }
        .into()
    })
}

/// A database integer that must be a time or a counter: negative values are damage.
pub(super) fn from_i64(what: &'static str, v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| crate::error::corrupted(what, format!("negative value {v}")))
}

pub(super) fn from_i32(what: &'static str, v: i32) -> Result<u32> {
    u32::try_from(v).map_err(|_| crate::error::corrupted(what, format!("negative value {v}")))
}

pub(super) fn encode_meta(meta: &BTreeMap<String, String>) -> Vec<String> {
    meta.iter()
        .flat_map(|(k, v)| [k.clone(), v.clone()])
        .collect()
}

fn decode_meta(flat: Option<Vec<String>>) -> Result<BTreeMap<String, String>> {
    let flat = flat.unwrap_or_default();
    if !flat.len().is_multiple_of(2) {
        return Err(crate::error::corrupted(
            "response metadata",
            "an odd number of key/value entries",
        ));
    }
    let mut it = flat.into_iter();
    let mut meta = BTreeMap::new();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        meta.insert(k, v);
    }
    Ok(meta)
}

fn response(body: Option<Vec<u8>>, meta: Option<Vec<String>>) -> Result<Response> {
    Ok(Response {
        body: body.unwrap_or_default(),
        meta: decode_meta(meta)?,
    })
}

/// The stored response of a finished row and when it was stored.
pub(super) fn replay(row: &Row) -> Result<Replay> {
    Ok(Replay {
        response: response(row.get("response_body"), row.get("response_meta"))?,
        finished_at: from_i64(
            "finished_at",
            row.get::<_, Option<i64>>("finished_at").unwrap_or(0),
        )?,
    })
}

pub(super) fn checkpoint(phase: Option<String>, state: Option<Vec<u8>>) -> Option<Checkpoint> {
    phase.map(|phase| Checkpoint {
        phase,
        state: state.unwrap_or_default(),
    })
}

/// [`lost_lease`] from a row that answers `state`, `fence` and `expired` (`HOLDER_WHY`,
/// `idemdb_holder`).
pub(super) fn lost_from_row(row: &Row, ours: i64) -> Result<Option<LeaseLost>> {
    lost_lease(row.get("state"), row.get("fence"), row.get("expired"), ours)
}

/// Why a lease with fence `ours` is no longer held, from its row as read (`state`, `fence`,
/// `expired`; `NULL` when there is no row): `None` when the row says it still is (the caller
/// asks again).
pub(super) fn lost_lease(
    state: Option<i16>,
    fence: Option<i64>,
    expired: Option<bool>,
    ours: i64,
) -> Result<Option<LeaseLost>> {
    let holding = match state {
        None => None,
        Some(_) => Some(Holding {
            live: expired != Some(true),
            state: seen_state(state, 0)?,
            fence: from_i64("fence", fence.unwrap_or(0))?,
        }),
    };
    Ok(lease_lost(holding, from_i64("fence", ours)?))
}

/// A row's `state` code (with its lease's end) as the shared rules read it; a code that is none
/// of the four is a damaged row.
pub(super) fn seen_state(code: Option<i16>, lease_until: Millis) -> Result<Seen<()>> {
    Ok(match code {
        Some(PENDING) => Seen::Pending { lease_until },
        Some(RELEASED) => Seen::Released,
        Some(COMPLETED) => Seen::Completed(()),
        Some(FAILED) => Seen::Failed(()),
        other => {
            return Err(crate::error::corrupted(
                "request row",
                format!("unknown state {other:?}"),
            ))
        }
    })
}

/// What a holder's call (complete, fail, renew, checkpoint) asks the row to become.
pub(crate) enum HolderChange {
    Complete(Response),
    FailTerminal(Response),
    Release,
    Renew(Millis),
    Checkpoint(Checkpoint),
}

/// A holder's call as its statement and the values of its own (the change's values move into
/// them: no copy of a response), shared by the holder's calls and a commit's lease endings.
pub(crate) struct HolderCall {
    pub(crate) sql: &'static str,
    bytes: Option<Vec<u8>>,
    meta: Option<Vec<String>>,
    ms: Option<i64>,
    text: Option<String>,
    /// The change as `idemdb_holder`'s `p_op` (1 complete, 2 fail, 3 release, 4 renew,
    /// 5 checkpoint), for the unnamed statement mode.
    op: i16,
}

impl HolderCall {
    pub(crate) fn new(change: HolderChange) -> Result<HolderCall> {
        let call = |(sql, op), bytes, meta, ms, text| HolderCall {
            sql,
            bytes,
            meta,
            ms,
            text,
            op,
        };
        Ok(match change {
            HolderChange::Complete(r) => call(
                (statements::COMPLETE, 1),
                Some(r.body),
                Some(encode_meta(&r.meta)),
                None,
                None,
            ),
            HolderChange::FailTerminal(r) => call(
                (statements::FAIL, 2),
                Some(r.body),
                Some(encode_meta(&r.meta)),
                None,
                None,
            ),
            HolderChange::Release => call((statements::RELEASE, 3), None, None, None, None),
            HolderChange::Renew(extra) => call(
                (statements::RENEW, 4),
                None,
                None,
                Some(to_i64("renewal", extra)?),
                None,
            ),
            HolderChange::Checkpoint(cp) => call(
                (statements::CHECKPOINT, 5),
                Some(cp.state),
                None,
                None,
                Some(cp.phase),
            ),
        })
    }

    /// The statement's parameters: the five every holder's statement shares (namespace, tenant,
    /// key, fence, test clock), then its own.
    pub(crate) fn params<'a>(&'a self, head: [&'a dyn Param; 5]) -> Vec<&'a dyn Param> {
        let own: Vec<&dyn Param> = match (&self.bytes, &self.meta, &self.ms, &self.text) {
            (Some(b), Some(m), _, _) => vec![b, m],
            (Some(b), None, _, Some(t)) => vec![t, b],
            (_, _, Some(ms), _) => vec![ms],
            _ => Vec::new(),
        };
        head.into_iter().chain(own).collect()
    }

    /// `idemdb_holder`'s parameters ([`statements::HOLDER_FN`]): the five shared ones, the
    /// change, and its values (`NULL` where the change has none).
    pub(crate) fn function_params<'a>(&'a self, head: [&'a dyn Param; 5]) -> Vec<&'a dyn Param> {
        let own: [&dyn Param; 5] = [&self.op, &self.bytes, &self.meta, &self.ms, &self.text];
        head.into_iter().chain(own).collect()
    }
}
