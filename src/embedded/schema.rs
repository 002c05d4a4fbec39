//! What each column family holds, as the engine sees it: the merge fold and the compaction
//! filter's test the store hands the engine per column family (see `engine::CfHooks`).
//! Invariant: every hook here is total, deterministic and clock-free, never panics, and never
//! drops or forgets a value it cannot read (a merge keeps it unmerged, a filter keeps it).

use crate::clock::Millis;
use crate::embedded::codec;
use crate::embedded::engine::{Cf, CfHooks};
use crate::format::{self, Kind};

/// The hooks of column family `cf`.
pub(crate) fn hooks(cf: Cf) -> CfHooks {
    match cf {
        // A record's checksummed header carries its expiry: dropped once it passed the cut-off.
        Cf::Records => CfHooks {
            merge: None,
            expired: Some(record_expired),
        },
        // An index entry's ULID carries its expiry.
        Cf::Expiry => CfHooks {
            merge: None,
            expired: Some(index_entry_expired),
        },
        Cf::Versions => CfHooks {
            merge: Some(("idemdb.versions_merge", versions_fold)),
            expired: None,
        },
        // The fence and time high-water marks.
        Cf::Meta => CfHooks {
            merge: Some(("idemdb.max_u64", |_, existing, operands| {
                format::max_u64_fold(existing, operands)
            })),
            expired: None,
        },
        Cf::Default => CfHooks::default(),
    }
}

fn record_expired(_key: &[u8], value: &[u8], cutoff: Millis) -> bool {
    codec::record_expiry(value).is_some_and(|t| t <= cutoff)
}

fn index_entry_expired(key: &[u8], _value: &[u8], cutoff: Millis) -> bool {
    format::split_index_key(key).is_some_and(|(t, _)| t <= cutoff)
}

/// The merge fold of the versions column family, dispatching on the key's kind byte: replica
/// version vectors (`causal::merge_vv_operands`) and offset windows (`offsets::merge_offset_operands`)
/// are joined; any other kind keeps its last operand (or the existing value).
pub(crate) fn versions_fold(key: &[u8], existing: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8> {
    match Kind::of_key(key) {
        Some(Kind::ReplicaVector) => crate::causal::merge_vv_operands(existing, operands),
        Some(Kind::Offsets) => crate::offsets::merge_offset_operands(existing, operands),
        _ => operands
            .last()
            .copied()
            .or(existing)
            .map(<[u8]>::to_vec)
            .unwrap_or_default(),
    }
}
