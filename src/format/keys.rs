//! Key layouts of every column family. Invariants: a record key encodes (namespace, tenant, key)
//! injectively (length-prefixed parts, the namespace in a free bit of the first length); integers
//! in keys are big-endian so byte order is numeric order; an entity key is one [`Kind`] byte and a
//! record key; an expiry-index key is a ULID of (expiry, fencing token) and a record key, clamped
//! to the ULID's 48-bit time the same way everywhere.

use crate::clock::Millis;

/// Which record namespace a key lives in: request records of a tenant, or messages of a consumer
/// group (a group and a tenant of the same name never share a record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Namespace {
    Requests,
    Consumers,
}

/// The kind byte that opens every key of the `versions` column family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// A versioned entity (`entities.rs`).
    Entity = 1,
    /// A causal entity with siblings (`causal.rs`).
    Causal = 2,
    /// A replica version vector, written only by merge (`causal.rs`).
    ReplicaVector = 3,
    /// An offset window of (group, topic ‖ partition), written only by merge (`offsets.rs`).
    Offsets = 4,
    /// A unique reservation of (index, composite value) (`unique.rs`).
    Unique = 5,
}

impl Kind {
    /// The kind of a `versions` key, from its first byte.
    pub(crate) fn of_key(key: &[u8]) -> Option<Kind> {
        Some(match key.first()? {
            1 => Kind::Entity,
            2 => Kind::Causal,
            3 => Kind::ReplicaVector,
            4 => Kind::Offsets,
            5 => Kind::Unique,
            _ => return None,
        })
    }
}

/// The `versions` key of `(tenant, id)` of this kind: the kind byte, then the record key.
pub(crate) fn entity_key(kind: Kind, tenant: &[u8], id: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + tenant.len() + id.len());
    k.push(kind as u8);
    k.extend_from_slice(&record_key(Namespace::Requests, tenant, id));
    k
}

/// Flag on the first length of a record key that puts it in the consumer namespace: message
/// records of a consumer group never collide with request records of a tenant of the same name.
const CONSUMER_FLAG: u16 = 0x8000;

/// Record keys up to this many bytes are built on the stack (every operation builds one).
const INLINE_KEY: usize = 128;

/// A record key: on the stack when it fits (tenants and keys are usually short), else on the heap.
pub(crate) enum RecordKey {
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    Heap(Vec<u8>),
}

impl std::ops::Deref for RecordKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            RecordKey::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or_default(),
            RecordKey::Heap(v) => v,
        }
    }
}

/// The record key of (tenant, key) in namespace `ns`: `[u16 BE len][tenant][u16 BE len][key]`,
/// with bit 15 of the first length set for [`Namespace::Consumers`]. Lengths are validated
/// (at most 4096) before this is called.
pub(crate) fn record_key(ns: Namespace, tenant: &[u8], key: &[u8]) -> RecordKey {
    let consumer = ns == Namespace::Consumers;
    let total = 4 + tenant.len() + key.len();
    let first_len = |len: usize| {
        let mut b = u16::try_from(len).unwrap_or(u16::MAX).to_be_bytes();
        if consumer {
            b[0] |= (CONSUMER_FLAG >> 8) as u8;
        }
        b
    };
    let second_len = u16::try_from(key.len()).unwrap_or(u16::MAX).to_be_bytes();
    let pieces: [&[u8]; 4] = [&first_len(tenant.len()), tenant, &second_len, key];
    match u8::try_from(total) {
        Ok(len) if total <= INLINE_KEY => {
            let mut bytes = [0u8; INLINE_KEY];
            let mut at = 0;
            for p in pieces {
                if let Some(dst) = bytes.get_mut(at..at + p.len()) {
                    dst.copy_from_slice(p);
                }
                at += p.len();
            }
            RecordKey::Inline { len, bytes }
        }
        _ => RecordKey::Heap(pieces.concat()),
    }
}

/// Unambiguous encoding of a composite value: each part length-prefixed (u16 BE, parts of at most
/// 65535 bytes; longer parts are truncated, so callers validate first).
pub(crate) fn composite(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in parts {
        push_part(&mut out, p);
    }
    out
}

fn push_part(out: &mut Vec<u8>, part: &[u8]) {
    let len = u16::try_from(part.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(part);
}

/// The first bytes of every record key of `tenant` in namespace `ns` (`[u16 BE len][tenant]`,
/// with the namespace's flag): a range scan from it meets that tenant's records, and only them
/// while the keys start with it.
pub(crate) fn record_prefix(ns: Namespace, tenant: &[u8]) -> Vec<u8> {
    let mut len = u16::try_from(tenant.len()).unwrap_or(u16::MAX);
    if ns == Namespace::Consumers {
        len |= CONSUMER_FLAG;
    }
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(tenant);
    out
}

/// Splits a record key into (namespace, tenant, key); `None` if the bytes are not a record key.
pub(crate) fn split_record_key_ns(bytes: &[u8]) -> Option<(Namespace, &[u8], &[u8])> {
    let ns = match bytes.first() {
        Some(b) if u16::from(*b) << 8 & CONSUMER_FLAG != 0 => Namespace::Consumers,
        Some(_) => Namespace::Requests,
        None => return None,
    };
    let (tenant, key) = split_record_key(bytes)?;
    Some((ns, tenant, key))
}

/// Splits a composite value back into its parts; `None` if the bytes are not one.
pub(crate) fn split_composite(mut bytes: &[u8]) -> Option<Vec<&[u8]>> {
    let mut parts = Vec::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_be_bytes(*len));
        if rest.len() < len {
            return None;
        }
        let (part, rest) = rest.split_at(len);
        parts.push(part);
        bytes = rest;
    }
    Some(parts)
}

/// Splits a record key back into (tenant, key); `None` if the bytes are not a record key.
pub(crate) fn split_record_key(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (tenant, rest) = take_part(bytes)?;
    let (key, rest) = take_part(rest)?;
    rest.is_empty().then_some((tenant, key))
}

fn take_part(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = bytes.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_be_bytes(*len) & !CONSUMER_FLAG);
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// The latest time a ULID's 48-bit timestamp holds (year 10889). Index keys and index bounds
/// clamp to it alike (one rule): an expiry past it is indexed at it, so it sorts last and is never
/// wrapped to an early time; the record itself keeps its exact expiry, which the sweep checks.
pub(crate) const MAX_INDEX_TIME: Millis = (1 << 48) - 1;

/// Expiry index key: a ULID whose timestamp is the expiry time (clamped to [`MAX_INDEX_TIME`])
/// and whose random part is the record's fencing token, then the record key. Range scans from the
/// start meet the oldest expiries first.
pub(crate) fn index_key(expires_at: Millis, fence: u64, record_key: &[u8]) -> Vec<u8> {
    let id = ulid::Ulid::from_parts(expires_at.min(MAX_INDEX_TIME), u128::from(fence));
    let mut out = Vec::with_capacity(16 + record_key.len());
    out.extend_from_slice(&id.to_bytes());
    out.extend_from_slice(record_key);
    out
}

/// The smallest index key whose expiry is `t`: every entry below it expired before `t`. Past
/// [`MAX_INDEX_TIME`] every entry is below it (the largest ULID, above every indexed one, whose
/// random part is a token of at most 64 bits).
pub(crate) fn index_bound(t: Millis) -> [u8; 16] {
    if t > MAX_INDEX_TIME {
        return [0xFF; 16];
    }
    ulid::Ulid::from_parts(t, 0).to_bytes()
}

/// Splits an index key into (expiry time, record key).
pub(crate) fn split_index_key(bytes: &[u8]) -> Option<(Millis, &[u8])> {
    let (id, rest) = bytes.split_first_chunk::<16>()?;
    let id = ulid::Ulid::from_bytes(*id);
    split_record_key(rest)?;
    Some((id.timestamp_ms(), rest))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_record_keys_have_one_layout() {
        for n in [0, 10, INLINE_KEY - 4, INLINE_KEY - 3, 300] {
            let key = vec![b'k'; n];
            for consumer in [false, true] {
                let mut expect = Vec::new();
                push_part(&mut expect, b"tenant");
                if consumer {
                    expect[0] |= 0x80;
                }
                push_part(&mut expect, &key);
                let ns = if consumer {
                    Namespace::Consumers
                } else {
                    Namespace::Requests
                };
                let got = record_key(ns, b"tenant", &key);
                assert_eq!(
                    &*got,
                    expect.as_slice(),
                    "key length {n}, consumer {consumer}"
                );
                let inline = matches!(got, RecordKey::Inline { .. });
                assert_eq!(inline, expect.len() <= INLINE_KEY, "key length {n}");
            }
        }
    }

    #[test]
    fn record_keys_are_injective_and_split_back() {
        let a = record_key(Namespace::Requests, b"ab", b"c").to_vec();
        let b = record_key(Namespace::Requests, b"a", b"bc").to_vec();
        assert_ne!(a, b);
        assert_eq!(split_record_key(&a), Some((&b"ab"[..], &b"c"[..])));
        assert_eq!(split_record_key(&a[..a.len() - 1]), None);
    }

    #[test]
    fn expiries_past_the_ulid_range_clamp_like_the_bound() {
        let rkey = record_key(Namespace::Requests, b"t", b"k");
        let past = index_key(MAX_INDEX_TIME + 5, 1, &rkey);
        assert_eq!(split_index_key(&past).map(|(t, _)| t), Some(MAX_INDEX_TIME));
        assert!(past.as_slice() > index_key(MAX_INDEX_TIME - 1, u64::MAX, &rkey).as_slice());
        assert!(past.as_slice() >= index_bound(MAX_INDEX_TIME).as_slice());
        assert!(past.as_slice() < index_bound(MAX_INDEX_TIME + 1).as_slice());
    }

    #[test]
    fn index_keys_sort_by_expiry() {
        let k1 = index_key(1000, u64::MAX, &record_key(Namespace::Requests, b"z", b"z"));
        let k2 = index_key(1001, 0, &record_key(Namespace::Requests, b"a", b"a"));
        assert!(k1 < k2);
        assert!(k1.as_slice() < index_bound(1001).as_slice());
        assert_eq!(split_index_key(&k2).map(|(t, _)| t), Some(1001));
    }
}
