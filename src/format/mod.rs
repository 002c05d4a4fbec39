//! The format floor: byte layouts below the record vocabulary (keys of every column family,
//! sealed envelopes, bounded bincode). Invariant: this layer imports nothing of idemdb but errors
//! and the time unit; every layer above reads and writes bytes only through it.

mod bin;
mod envelope;
mod keys;

#[cfg(test)]
pub(crate) use bin::DECODE_LIMIT;
pub(crate) use bin::{
    bincode_config, bytes, check_decodable, decode_u64, max_u64_fold, merge_sealed, seal_bincode,
    to_bincode, unseal_bincode,
};
pub(crate) use envelope::{seal, unseal, FORMAT};
pub(crate) use keys::{
    composite, entity_key, index_bound, index_key, record_key, record_prefix, split_composite,
    split_index_key, split_record_key, split_record_key_ns, Kind, Namespace, RecordKey,
};
