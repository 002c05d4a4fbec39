//! Version vectors and causal writes, the vocabulary and the code both backends share: the public
//! types ([`VersionVector`], [`Causality`], [`Sibling`], [`Siblings`]), the argument checks, the
//! state a causal write or delete leaves (`put_sibling`, `delete_seen`), the stored encodings with
//! their bound (`seal_causal`, `check_vv_bound`) and the replica-vector merge operator
//! (`merge_vv_operands`). Invariants: merge is a pointwise maximum (commutative, associative,
//! idempotent); a causal write removes exactly the siblings its context has seen and keeps every
//! concurrent one, so no concurrent write is silently lost; a causal entity (all its siblings and
//! context) and a merged replica vector past the store's value limit
//! (`Config::max_response_bytes`) are refused, never stored, so every stored value stays
//! readable; the merge operator is total and deterministic (it keeps what it cannot read, never
//! fails, never reads the clock).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::Common;
use crate::error::Result;
use crate::format::{self};

/// A version vector: for each actor (replica, region, writer), how many of its events are known.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionVector {
    clock: BTreeMap<String, u64>,
}

/// How two version vectors relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Causality {
    /// Both know exactly the same events.
    Equal,
    /// The left one knows everything the right one does, and more.
    Dominates,
    /// The right one knows everything the left one does, and more.
    DominatedBy,
    /// Each knows an event the other does not.
    Concurrent,
}

impl VersionVector {
    /// An empty vector.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counter of `actor` (0 if unknown).
    pub fn get(&self, actor: &str) -> u64 {
        self.clock.get(actor).copied().unwrap_or(0)
    }

    /// Records one more event of `actor` and returns its new counter.
    pub fn increment(&mut self, actor: &str) -> u64 {
        // No allocation for an actor already present (the common case).
        let c = match self.clock.get_mut(actor) {
            Some(c) => c,
            None => self.clock.entry(actor.to_owned()).or_insert(0),
        };
        *c = c.saturating_add(1);
        *c
    }

    /// Sets `actor`'s counter to at least `n`.
    pub fn observe(&mut self, actor: &str, n: u64) {
        match self.clock.get_mut(actor) {
            Some(c) => *c = (*c).max(n),
            None if n > 0 => {
                self.clock.insert(actor.to_owned(), n);
            }
            None => {}
        }
    }

    /// Pointwise maximum with `other`.
    pub fn merge(&mut self, other: &VersionVector) {
        for (a, &n) in &other.clock {
            self.observe(a, n);
        }
    }

    /// The pointwise maximum of two vectors.
    pub fn merged(&self, other: &VersionVector) -> VersionVector {
        let mut m = self.clone();
        m.merge(other);
        m
    }

    /// Whether this vector knows every event `other` knows.
    pub fn descends(&self, other: &VersionVector) -> bool {
        other.clock.iter().all(|(a, &n)| self.get(a) >= n)
    }

    /// How this vector relates to `other`.
    pub fn compare(&self, other: &VersionVector) -> Causality {
        match (self.descends(other), other.descends(self)) {
            (true, true) => Causality::Equal,
            (true, false) => Causality::Dominates,
            (false, true) => Causality::DominatedBy,
            (false, false) => Causality::Concurrent,
        }
    }

    /// The (actor, counter) pairs, in actor order; zero counters are never stored.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.clock.iter().map(|(a, &n)| (a.as_str(), n))
    }
}

impl PartialOrd for VersionVector {
    /// The causal partial order: `a < b` when `b` dominates `a`; concurrent vectors are unordered.
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        match self.compare(other) {
            Causality::Equal => Some(Ordering::Equal),
            Causality::Dominates => Some(Ordering::Greater),
            Causality::DominatedBy => Some(Ordering::Less),
            Causality::Concurrent => None,
        }
    }
}

/// One of the concurrent values of a causal entity, identified by the event (dot) that wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sibling {
    /// The actor that wrote it.
    pub actor: String,
    /// That actor's event counter for this write.
    pub counter: u64,
    /// The value.
    #[serde(with = "crate::format::bytes")]
    pub value: Vec<u8>,
}

/// What a causal read returns: every concurrent value, and one context that covers them all. A
/// write with this context replaces all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Siblings {
    /// The concurrent values (empty if the entity was never written).
    pub values: Vec<Sibling>,
    /// The merged context: pass it to the next write.
    pub context: VersionVector,
}

/// Checks a causal write's arguments (both backends).
pub(crate) fn check_causal_put(
    cfg: &Common,
    tenant: &[u8],
    id: &[u8],
    actor: &str,
    value: &[u8],
) -> Result<()> {
    cfg.check_names(tenant, id)?;
    cfg.check_names(tenant, actor.as_bytes())?;
    cfg.check_size("value", value.len())
}

/// The state after `actor` writes `value` having read `context`: the siblings the context has
/// seen are replaced, concurrent ones kept (both backends compute it with this function).
pub(crate) fn put_sibling(
    mut state: Siblings,
    actor: &str,
    context: &VersionVector,
    value: Vec<u8>,
) -> Siblings {
    state.values.retain(|s| s.counter > context.get(&s.actor));
    state.context.merge(context);
    let counter = state.context.increment(actor);
    state.values.push(Sibling {
        actor: actor.to_owned(),
        counter,
        value,
    });
    state
}

/// What a causal delete with `context` leaves.
pub(crate) fn delete_seen(mut state: Siblings, context: &VersionVector) -> Siblings {
    state.values.retain(|s| s.counter > context.get(&s.actor));
    state
}

/// A causal entity as stored, refused when it would pass the store's value limit.
pub(crate) fn seal_causal(cfg: &Common, state: &Siblings) -> Result<Vec<u8>> {
    let encoded = format::seal_bincode("causal entity", state)?;
    cfg.check_bounded(
        "causal entity with its siblings",
        encoded.len(),
        "read it and write with the merged context (it replaces the siblings), or delete it",
    )?;
    Ok(encoded)
}

/// A stored causal entity (`None`: never written).
pub(crate) fn decode_causal(bytes: Option<&[u8]>) -> Result<Siblings> {
    bytes.map_or_else(
        || Ok(Siblings::default()),
        |b| format::unseal_bincode("causal entity", b),
    )
}

/// A stored replica vector (`None`: never merged).
pub(crate) fn decode_vv(bytes: Option<&[u8]>) -> Result<VersionVector> {
    bytes.map_or_else(
        || Ok(VersionVector::default()),
        |b| format::unseal_bincode("version vector", b),
    )
}

/// Refuses a merged replica vector that would pass the store's value limit.
pub(crate) fn check_vv_bound(cfg: &Common, merged: &VersionVector) -> Result<()> {
    cfg.check_bounded(
        "replica version vector",
        format::to_bincode("version vector", merged)?.len(),
        "use fewer actors (replicas) per vector",
    )
}

pub(crate) fn encode_vv(vv: &VersionVector) -> Result<Vec<u8>> {
    format::seal_bincode("version vector", vv)
}

/// The replica-vector merge operator: the pointwise maximum of the existing value and every
/// operand; if one of them does not decode, every input is kept unmerged (reads report the key
/// as corrupted, see `format::merge_sealed`). Never fails; the result depends on the inputs alone.
pub(crate) fn merge_vv_operands(existing: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8> {
    format::merge_sealed("version vector", existing, operands, VersionVector::merge)
}
