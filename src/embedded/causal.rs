//! Causal writes and replica version vectors on the embedded store: a write or delete is read,
//! computed by the shared code (`src/causal.rs`) and written under the key's lock stripe; a replica
//! vector is a RocksDB merge, folded by `causal::merge_vv_operands`. Invariants: merge is a
//! pointwise maximum (commutative, associative, idempotent); a causal write removes exactly the
//! siblings its context has seen and keeps every concurrent one, so no concurrent write is silently
//! lost; a causal entity (all its siblings and context) and a merged replica vector never grow past
//! the store's value limit (`Config::max_response_bytes`): the write that would pass it is refused,
//! so every stored value stays readable; the merge operator for replica vectors is total and
//! deterministic (it keeps what it cannot read, never fails, never reads the clock).

use crate::causal::{
    check_causal_put, check_vv_bound, delete_seen, encode_vv, put_sibling, seal_causal, Siblings,
    VersionVector,
};
use crate::embedded::engine::Cf;
use crate::embedded::Store;
use crate::error::Result;
use crate::format::{self, entity_key, Kind};

impl Store {
    /// Reads a causal entity: all concurrent values and the context that covers them.
    pub fn causal_get(&self, tenant: impl AsRef<[u8]>, id: impl AsRef<[u8]>) -> Result<Siblings> {
        let (tenant, id) = (tenant.as_ref(), id.as_ref());
        self.core.check_names(tenant, id)?;
        self.load_causal(&entity_key(Kind::Causal, tenant, id))
    }

    /// Writes `value` as `actor`, having read `context`. Siblings the context has seen are
    /// replaced; concurrent ones (written by events the context does not know) are kept beside the
    /// new value. Returns the entity's state after the write. Refused with
    /// [`crate::InvalidInput::LimitReached`] (nothing written) when the entity with every sibling it
    /// keeps would be larger than `Config::max_response_bytes`: read it and write with the merged
    /// context (which replaces the siblings), or delete it with [`Store::causal_delete`].
    pub fn causal_put(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        actor: &str,
        context: &VersionVector,
        value: impl Into<Vec<u8>>,
    ) -> Result<Siblings> {
        let (tenant, id, value) = (tenant.as_ref(), id.as_ref(), value.into());
        check_causal_put(&self.config().common, tenant, id, actor, &value)?;
        let key = entity_key(Kind::Causal, tenant, id);
        let _g = self.core.lock(&key);
        let state = put_sibling(self.load_causal(&key)?, actor, context, value);
        let encoded = seal_causal(&self.config().common, &state)?;
        let mut b = self.core.engine().batch();
        b.put(Cf::Versions, &key, &encoded);
        self.core.engine().write(b)?;
        Ok(state)
    }

    /// Deletes the siblings of `(tenant, id)` that `context` has seen (a causal delete: values
    /// written concurrently, by events the context does not know, stay). Once no sibling is
    /// left, the entity is removed from storage (a later write starts from its writer's context).
    /// An entity that does not decode is removed whatever the context, so that damaged data can
    /// always be cleared. Returns what is left.
    pub fn causal_delete(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        context: &VersionVector,
    ) -> Result<Siblings> {
        let (tenant, id) = (tenant.as_ref(), id.as_ref());
        self.core.check_names(tenant, id)?;
        let key = entity_key(Kind::Causal, tenant, id);
        let _g = self.core.lock(&key);
        let mut b = self.core.engine().batch();
        let left = match self.load_causal(&key) {
            Err(crate::Error::Corrupted { .. }) => Siblings::default(),
            Err(e) => return Err(e),
            Ok(state) => delete_seen(state, context),
        };
        if left.values.is_empty() {
            b.delete(Cf::Versions, &key);
            self.core.engine().write(b)?;
            return Ok(Siblings::default());
        }
        b.put(
            Cf::Versions,
            &key,
            &format::seal_bincode("causal entity", &left)?,
        );
        self.core.engine().write(b)?;
        Ok(left)
    }

    /// Merges a replica's version vector into the one stored for `(tenant, id)`: a commutative,
    /// idempotent update applied by a RocksDB merge operator. It reads the stored vector first
    /// (under the key's lock stripe) only to refuse, with [`crate::InvalidInput::LimitReached`], a merge
    /// whose result would be larger than `Config::max_response_bytes`.
    pub fn merge_replica_vector(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        vv: &VersionVector,
    ) -> Result<()> {
        let (tenant, id) = (tenant.as_ref(), id.as_ref());
        self.core.check_names(tenant, id)?;
        let key = entity_key(Kind::ReplicaVector, tenant, id);
        let operand = encode_vv(vv)?;
        let _g = self.core.lock(&key);
        let merged = self
            .core
            .load_sealed::<VersionVector>("version vector", &key)?
            .merged(vv);
        check_vv_bound(&self.config().common, &merged)?;
        let mut b = self.core.engine().batch();
        b.merge(Cf::Versions, &key, &operand);
        self.core.engine().write(b)
    }

    /// The merged replica vector of `(tenant, id)` (empty if none was merged).
    pub fn replica_vector(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
    ) -> Result<VersionVector> {
        let (tenant, id) = (tenant.as_ref(), id.as_ref());
        self.core.check_names(tenant, id)?;
        let key = entity_key(Kind::ReplicaVector, tenant, id);
        self.core.load_sealed("version vector", &key)
    }

    fn load_causal(&self, key: &[u8]) -> Result<Siblings> {
        self.core.load_sealed("causal entity", key)
    }
}
