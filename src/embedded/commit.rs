//! Atomic commits across keys. Invariant: a commit locks every stripe it touches (in stripe order),
//! checks every condition against one consistent read of each key, and then writes everything in
//! one `WriteBatch` or nothing at all; after any crash either all of its writes are there or none.

use crate::commit::{plan_builder, CommitConflict, Committed, EntityWrite, LeaseEnd, Plan, PlanOp};
use crate::config::Common;
use crate::embedded::core::{add_record, check_holder};
use crate::embedded::engine::Cf;
use crate::embedded::Store;
use crate::entities::{encode_entity, next_version, Expect};
use crate::error::Result;
use crate::format::{entity_key, Kind};
use crate::record::{FailKind, Lease};
use crate::telemetry::counters::Metrics;
use crate::telemetry::spans::{Op as Traced, OpKind};
use crate::unique::unique_key;

/// A set of conditions and writes applied all or nothing. Build it with [`Store::commit`].
#[must_use = "a commit does nothing until `apply` is called"]
pub struct Commit<'s> {
    store: &'s Store,
    plan: Plan,
}

impl<'s> Commit<'s> {
    /// A commit of `plan` on `store` (the async API's commit on the embedded store).
    pub(crate) fn of_plan(store: &'s Store, plan: Plan) -> Self {
        Commit { store, plan }
    }
}

/// An operation as this store runs it: the plan's, with its keys.
enum Op {
    Entity {
        key: Vec<u8>,
        expect: Expect,
        write: EntityWrite,
    },
    Lease {
        rkey: Vec<u8>,
        lease: Lease,
        end: LeaseEnd,
    },
    Reserve {
        key: Vec<u8>,
        owner: Vec<u8>,
    },
}

impl Store {
    /// Starts an atomic commit.
    pub fn commit(&self) -> Commit<'_> {
        Commit::of_plan(self, Plan::default())
    }
}

impl<'s> Commit<'s> {
    fn common(&self) -> &'s Common {
        &self.store.config().common
    }

    plan_builder!();

    /// Checks every condition and applies every write, or writes nothing.
    pub fn apply(self) -> Result<std::result::Result<Committed, CommitConflict>> {
        let op = Traced::unkeyed(OpKind::Commit);
        op.count(self.plan.len() as u64);
        let r = self.apply_in();
        op.end_with(r, |r| if r.is_ok() { "committed" } else { "conflict" })
    }

    fn apply_in(self) -> Result<std::result::Result<Committed, CommitConflict>> {
        let store = self.store;
        let ops = self
            .plan
            .into_ops()?
            .into_iter()
            .map(|op| keyed(store, op))
            .collect::<Result<Vec<Op>>>()?;
        // (column family, key): an entity or reservation key and a lease's record key live in
        // different column families, so equal bytes there are different keys.
        let keys: Vec<(Cf, &[u8])> = ops
            .iter()
            .map(|op| match op {
                Op::Entity { key, .. } | Op::Reserve { key, .. } => (Cf::Versions, key.as_slice()),
                Op::Lease { rkey, .. } => (Cf::Records, rkey.as_slice()),
            })
            .collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w.first() == w.get(1)) {
            return Err(crate::requests::names_twice());
        }
        let mut locked = store.core.lock_many(keys.iter().map(|(_, k)| *k));
        let now = store.now();
        let engine = store.core.engine();
        let mut batch = engine.batch();
        let mut versions = Vec::with_capacity(ops.len());
        let mut ends = Vec::new();
        // Leases whose record was in memory: the batch writes it, so memory lets it go after.
        let mut written_from_memory = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Entity { key, expect, write } => {
                    let cur = store.load_entity(&key)?;
                    if !expect.holds(cur.as_ref()) {
                        return Ok(Err(CommitConflict::Condition {
                            op: i,
                            current: cur.and_then(|s| s.live()),
                        }));
                    }
                    let live_version = cur
                        .as_ref()
                        .filter(|s| s.value.is_some())
                        .map(|s| s.version);
                    versions.push(match write {
                        EntityWrite::Check => live_version,
                        EntityWrite::Put(v) => {
                            let ver = next_version(cur.as_ref());
                            batch.put(Cf::Versions, &key, &encode_entity(ver, Some(&v)));
                            Some(ver)
                        }
                        EntityWrite::Delete => {
                            if live_version.is_some() {
                                let ver = next_version(cur.as_ref());
                                batch.put(Cf::Versions, &key, &encode_entity(ver, None));
                            }
                            None
                        }
                    });
                }
                Op::Reserve { key, owner } => {
                    let stored = crate::unique::StoredReservation::plain(owner);
                    if let Some(cur) = store.live_reservation(&key)? {
                        if !cur.same_owner(&stored) {
                            return Ok(Err(CommitConflict::Taken {
                                op: i,
                                owner: cur.owner,
                            }));
                        }
                    }
                    batch.put(Cf::Versions, &key, &stored.encode()?);
                    versions.push(None);
                }
                Op::Lease { rkey, lease, end } => {
                    // The stripe is held (its key was locked above): the record is in memory
                    // there, or remembered there and taken out (the batch writes it), or read.
                    let cur = match locked.stripe(&rkey) {
                        Some(stripe) => store.core.current(stripe, &rkey)?,
                        None => crate::embedded::core::Current::stored(store.core.load(&rkey)?),
                    };
                    let mut rec = match check_holder(cur.rec, &lease, now) {
                        Ok(r) => r,
                        Err(lost) => {
                            Metrics::bump(&store.core.metrics().lease_lost);
                            return Ok(Err(CommitConflict::Lease { op: i, lost }));
                        }
                    };
                    let slot = cur.stored_slot;
                    let m = store.core.metrics();
                    ends.push(match end {
                        LeaseEnd::Complete(resp) => {
                            rec.complete(resp, now);
                            &m.completed
                        }
                        LeaseEnd::Fail(kind) => {
                            let counter = match kind {
                                FailKind::Retryable => &m.failed_retryable,
                                FailKind::Terminal(_) => &m.failed_terminal,
                            };
                            rec.fail(kind, now);
                            counter
                        }
                    });
                    add_record(&mut batch, &rkey, slot, &rec)?;
                    if cur.volatile {
                        written_from_memory.push(rkey);
                    }
                    versions.push(None);
                }
            }
        }
        engine.write(batch)?;
        for rkey in &written_from_memory {
            if let Some(stripe) = locked.stripe(rkey) {
                stripe.drop_volatile(rkey);
            }
        }
        for counter in &ends {
            Metrics::bump(counter);
        }
        drop(locked);
        if !ends.is_empty() {
            store.core.finished.notify();
        }
        Ok(Ok(Committed { versions }))
    }
}

/// A plan's operation with this store's keys; a lease of another store is refused.
fn keyed(store: &Store, op: PlanOp) -> Result<Op> {
    Ok(match op {
        PlanOp::Entity {
            tenant,
            id,
            expect,
            write,
        } => Op::Entity {
            key: entity_key(Kind::Entity, &tenant, &id),
            expect,
            write,
        },
        PlanOp::Lease { lease, end } => {
            store.core.check_lease_store(&lease)?;
            Op::Lease {
                rkey: lease.record_key().to_vec(),
                lease,
                end,
            }
        }
        PlanOp::Reserve {
            index,
            value,
            owner,
        } => {
            let parts: Vec<&[u8]> = value.iter().map(Vec::as_slice).collect();
            Op::Reserve {
                key: unique_key(&index, &parts),
                owner,
            }
        }
    })
}
