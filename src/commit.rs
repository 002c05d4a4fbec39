//! Atomic commits across keys. Invariant: a commit locks every stripe it touches (in stripe order),
//! checks every condition against one consistent read of each key, and then writes everything in
//! one `WriteBatch` or nothing at all; after any crash either all of its writes are there or none.

use crate::core::{add_record, check_holder};
use crate::engine::Cf;
use crate::error::{Error, InvalidInput, Result};
use crate::format;
use crate::format::{entity_key, Kind};
use crate::metrics::Metrics;
use crate::observe::{Op as Traced, OpKind};
use crate::record::{FailKind, Lease, LeaseLost, Response};
use crate::store::Store;
use crate::unique::unique_key;
use crate::versions::{encode_entity, next_version, Expect, Version, Versioned};

/// A set of conditions and writes applied all or nothing. Build it with [`Store::commit`].
#[must_use = "a commit does nothing until `apply` is called"]
pub struct Commit<'s> {
    store: &'s Store,
    ops: Vec<Op>,
    error: Option<Error>,
}

enum Op {
    Entity {
        key: Vec<u8>,
        expect: Expect,
        write: Write,
    },
    Lease {
        rkey: Vec<u8>,
        lease: Lease,
        end: End,
    },
    Reserve {
        key: Vec<u8>,
        owner: Vec<u8>,
    },
}

enum Write {
    None,
    Put(Vec<u8>),
    Delete,
}

enum End {
    Complete(Response),
    Fail(FailKind),
}

/// What a successful commit wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// Per operation, in the order added: the entity's version after the commit (`None` for a
    /// lease operation, or for an entity that is absent afterwards).
    pub versions: Vec<Option<Version>>,
}

/// Why a commit wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum CommitConflict {
    /// The condition of operation `op` (0-based, in the order added) did not hold.
    Condition {
        /// Which operation.
        op: usize,
        /// What is there now.
        current: Option<Versioned>,
    },
    /// The value reserved by operation `op` is held by another owner.
    Taken {
        /// Which operation.
        op: usize,
        /// The current owner.
        owner: Vec<u8>,
    },
    /// The lease of operation `op` is no longer current.
    Lease {
        /// Which operation.
        op: usize,
        /// Why.
        lost: LeaseLost,
    },
}

impl Store {
    /// Starts an atomic commit.
    pub fn commit(&self) -> Commit<'_> {
        Commit {
            store: self,
            ops: Vec::new(),
            error: None,
        }
    }
}

impl Commit<'_> {
    fn entity(&mut self, tenant: &[u8], id: &[u8], expect: Expect, write: Write) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = self.store.core.check_names(tenant, id) {
            self.error = Some(e);
            return;
        }
        if let Write::Put(v) = &write {
            if let Err(e) = self.store.core.check_size("value", v.len()) {
                self.error = Some(e);
                return;
            }
        }
        self.ops.push(Op::Entity {
            key: entity_key(Kind::Entity, tenant, id),
            expect,
            write,
        });
    }

    /// A condition on an entity, with no write.
    pub fn check(mut self, tenant: impl AsRef<[u8]>, id: impl AsRef<[u8]>, expect: Expect) -> Self {
        self.entity(tenant.as_ref(), id.as_ref(), expect, Write::None);
        self
    }

    /// Writes `value` to an entity if `expect` holds.
    pub fn put(
        mut self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        expect: Expect,
        value: impl Into<Vec<u8>>,
    ) -> Self {
        self.entity(
            tenant.as_ref(),
            id.as_ref(),
            expect,
            Write::Put(value.into()),
        );
        self
    }

    /// Deletes an entity (leaving its version in a tombstone) if `expect` holds.
    pub fn delete(
        mut self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        expect: Expect,
    ) -> Self {
        self.entity(tenant.as_ref(), id.as_ref(), expect, Write::Delete);
        self
    }

    fn lease(&mut self, lease: &Lease, end: End) {
        if self.error.is_some() {
            return;
        }
        let size = match &end {
            End::Complete(r) | End::Fail(FailKind::Terminal(r)) => r.size(),
            End::Fail(FailKind::Retryable) => 0,
        };
        if let Err(e) = self
            .store
            .core
            .check_lease_store(lease)
            .and_then(|()| self.store.core.check_size("response", size))
        {
            self.error = Some(e);
            return;
        }
        self.ops.push(Op::Lease {
            rkey: lease.record_key().to_vec(),
            lease: lease.clone(),
            end,
        });
    }

    /// Completes an idempotency lease in the same commit (only if it is still current).
    pub fn complete(mut self, lease: &Lease, response: Response) -> Self {
        self.lease(lease, End::Complete(response));
        self
    }

    /// Fails an idempotency lease in the same commit (only if it is still current).
    pub fn fail(mut self, lease: &Lease, kind: FailKind) -> Self {
        self.lease(lease, End::Fail(kind));
        self
    }

    /// Reserves `value` in unique index `index` for `owner`, as part of the commit.
    pub fn reserve(
        mut self,
        index: impl AsRef<[u8]>,
        value: &[&[u8]],
        owner: impl AsRef<[u8]>,
    ) -> Self {
        if self.error.is_none() {
            let (index, owner) = (index.as_ref(), owner.as_ref());
            let encoded = format::composite(value);
            match self
                .store
                .core
                .check_names(index, &encoded)
                .and_then(|()| self.store.core.check_names(index, owner))
            {
                Ok(()) => self.ops.push(Op::Reserve {
                    key: unique_key(index, value),
                    owner: owner.to_vec(),
                }),
                Err(e) => self.error = Some(e),
            }
        }
        self
    }

    /// Checks every condition and applies every write, or writes nothing.
    pub fn apply(self) -> Result<std::result::Result<Committed, CommitConflict>> {
        let op = Traced::unkeyed(OpKind::Commit);
        op.count(self.ops.len() as u64);
        let r = self.apply_in();
        op.end_with(r, |r| if r.is_ok() { "committed" } else { "conflict" })
    }

    fn apply_in(self) -> Result<std::result::Result<Committed, CommitConflict>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        // (column family, key): an entity or reservation key and a lease's record key live in
        // different column families, so equal bytes there are different keys.
        let keys: Vec<(Cf, &[u8])> = self
            .ops
            .iter()
            .map(|op| match op {
                Op::Entity { key, .. } | Op::Reserve { key, .. } => (Cf::Versions, key.as_slice()),
                Op::Lease { rkey, .. } => (Cf::Records, rkey.as_slice()),
            })
            .collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w.first() == w.get(1)) {
            return Err(InvalidInput::Config(
                "a commit names the same entity or lease twice".into(),
            )
            .into());
        }
        let store = self.store;
        let mut locked = store.core.lock_many(keys.iter().map(|(_, k)| *k));
        let now = store.now();
        let engine = store.core.engine();
        let mut batch = engine.batch();
        let mut versions = Vec::with_capacity(self.ops.len());
        let mut ends = Vec::new();
        // Leases whose record was in memory: the batch writes it, so memory lets it go after.
        let mut written_from_memory = Vec::new();
        for (i, op) in self.ops.into_iter().enumerate() {
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
                        Write::None => live_version,
                        Write::Put(v) => {
                            let ver = next_version(cur.as_ref());
                            batch.put(Cf::Versions, &key, &encode_entity(ver, Some(&v)));
                            Some(ver)
                        }
                        Write::Delete => {
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
                        None => crate::core::Current::stored(store.core.load(&rkey)?),
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
                        End::Complete(resp) => {
                            rec.complete(resp, now);
                            &m.completed
                        }
                        End::Fail(kind) => {
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
            store.core.notify_finished();
        }
        Ok(Ok(Committed { versions }))
    }
}
