//! The claim/CAS invariants, checked over what a store reports and nothing else: they hold
//! whatever the model says.

use std::collections::BTreeMap;

use idemdb::{RecordInfo, RecordState};

/// The claim/CAS invariants, asserted over what the store reports, independently of the model:
/// at most one live lease per key (a claim never acquires over a live lease or a finished record),
/// fencing tokens and entity versions only increase, a completed or failed record never changes
/// until it expires or is forgotten, and an expired record is never returned.
#[derive(Default)]
pub struct Watch {
    /// The largest fencing token any claim or delivery returned.
    max_fence: u64,
    /// Per request key: the largest fence `get` reported.
    fences: BTreeMap<(usize, usize), u64>,
    /// Per entity: the largest version a write or `get_entity` reported.
    versions: BTreeMap<(usize, usize), u64>,
    /// Per request key: the completed or failed record as first seen, until it expires or is
    /// forgotten.
    finished: BTreeMap<(usize, usize), RecordInfo>,
}

impl Watch {
    /// A claim or delivery acquired a lease: its token is above every token issued before.
    pub fn acquired(&mut self, fence: u64, ctx: &str) {
        assert!(
            fence > self.max_fence,
            "{ctx}: fencing token {fence} is not above the largest issued, {}",
            self.max_fence
        );
        self.max_fence = fence;
    }

    /// A claim acquired at `now` where `get` reported `before` just before: there was no live
    /// lease and no finished record.
    pub fn acquired_over(&self, before: Option<&RecordInfo>, now: u64, ctx: &str) {
        if let Some(b) = before {
            match b.state {
                RecordState::Released => {}
                RecordState::Pending { lease_until } => assert!(
                    lease_until <= now,
                    "{ctx}: acquired while a lease was live until {lease_until} (now {now})"
                ),
                _ => panic!("{ctx}: acquired over a finished record {b:?}"),
            }
        }
    }

    /// An entity write returned version `v`: above every version reported before.
    pub fn wrote(&mut self, id: (usize, usize), v: u64, ctx: &str) {
        let last = self.versions.entry(id).or_default();
        assert!(v > *last, "{ctx}: entity version {v} is not above {last}");
        *last = v;
    }

    /// `get_entity` reported version `v` (if live): never below what was reported before.
    pub fn entity(&mut self, id: (usize, usize), v: Option<u64>, ctx: &str) {
        if let Some(v) = v {
            let last = self.versions.entry(id).or_default();
            assert!(
                v >= *last,
                "{ctx}: entity version went back from {last} to {v}"
            );
            *last = v;
        }
    }

    /// The record of `id` was forgotten: a finished record may change from here on.
    pub fn forgotten(&mut self, id: (usize, usize)) {
        self.finished.remove(&id);
    }

    /// A reopen dropped the in-memory record of request key `id`: the stored record below it,
    /// with an older fence, is current again (tokens issued stay above it: `acquired` still
    /// holds).
    pub fn reverted(&mut self, id: (usize, usize)) {
        self.fences.remove(&id);
    }

    /// `get` reported `got` for request key `id` at `now`.
    pub fn record(&mut self, id: (usize, usize), got: Option<&RecordInfo>, now: u64, ctx: &str) {
        if let Some(snap) = self.finished.get(&id) {
            if snap.expires_at > now {
                assert_eq!(
                    got,
                    Some(snap),
                    "{ctx}: a finished record changed before it expired"
                );
            } else {
                self.finished.remove(&id);
            }
        }
        let Some(info) = got else { return };
        assert!(
            info.expires_at > now,
            "{ctx}: an expired record was returned (expires_at {}, now {now})",
            info.expires_at
        );
        let last = self.fences.entry(id).or_default();
        assert!(
            info.fence >= *last && info.fence <= self.max_fence,
            "{ctx}: record fence {} is below {last} or above every issued token {}",
            info.fence,
            self.max_fence
        );
        *last = info.fence;
        match info.state {
            RecordState::Pending { lease_until } => assert!(
                lease_until <= info.expires_at,
                "{ctx}: the lease ({lease_until}) outlasts its record ({})",
                info.expires_at
            ),
            RecordState::Completed(_) | RecordState::Failed(_) => {
                self.finished.entry(id).or_insert_with(|| info.clone());
            }
            RecordState::Released => {}
            ref other => panic!("{ctx}: unknown record state {other:?}"),
        }
    }
}
