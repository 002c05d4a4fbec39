//! Bincode with bounds, and the helpers every sealed value uses. Invariants: every decoder is
//! total (an error on any input, never a panic, never an allocation past [`DECODE_LIMIT`]) and
//! requires every byte to be used; nothing is encoded that would not decode again; merge folds
//! never drop an input they cannot read.

use super::envelope::{keep_unmerged, seal, unseal};
use crate::error::{corrupted, encoding, Result};

/// Upper bound on what a decoder may allocate (largest response limit plus slack).
pub(crate) const DECODE_LIMIT: usize = 80 << 20;

pub(crate) fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<DECODE_LIMIT>()
}

/// Refuses a body of `len` bytes that the decoders would reject for its size.
pub(crate) fn check_decodable(what: &'static str, len: usize) -> Result<()> {
    if len > DECODE_LIMIT {
        return Err(encoding(
            what,
            format!("{len} bytes encoded, over the {DECODE_LIMIT}-byte limit of the decoder"),
        ));
    }
    Ok(())
}

/// Seals the bincode encoding of `v`; fails when it does not encode or would not decode again.
pub(crate) fn seal_bincode<T: serde::Serialize>(what: &'static str, v: &T) -> Result<Vec<u8>> {
    Ok(seal(&to_bincode(what, v)?))
}

/// Unseals and decodes a value written by [`seal_bincode`].
pub(crate) fn unseal_bincode<T: serde::de::DeserializeOwned>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T> {
    from_bincode(what, unseal(what, bytes)?)
}

/// The body of a merge operator over sealed bincode values of a join-semilattice `T`: the join of
/// the existing value and every operand, sealed again. Total and deterministic, and it never
/// drops what it cannot read: if the existing value or an operand does not unseal and decode (or
/// the join would not encode), the inputs are kept whole in an *unmerged* envelope (see
/// [`keep_unmerged`]) that every read reports as corrupted, instead of a result that silently
/// forgets them (a failed merge would make RocksDB read-only, so failing is not an option).
pub(crate) fn merge_sealed<'a, T>(
    what: &'static str,
    existing: Option<&'a [u8]>,
    operands: &[&'a [u8]],
    join: impl Fn(&mut T, &T),
) -> Vec<u8>
where
    T: Default + serde::Serialize + serde::de::DeserializeOwned,
{
    let mut acc = T::default();
    for &v in existing.iter().chain(operands) {
        match unseal_bincode::<T>(what, v) {
            Ok(v) => join(&mut acc, &v),
            Err(_) => return keep_unmerged(existing, operands),
        }
    }
    match seal_bincode(what, &acc) {
        Ok(sealed) => sealed,
        Err(_) => keep_unmerged(existing, operands),
    }
}

/// Serialises with the bounded bincode configuration; fails when `v` does not encode or its
/// encoding is larger than the decoder accepts.
pub(crate) fn to_bincode<T: serde::Serialize>(what: &'static str, v: &T) -> Result<Vec<u8>> {
    let out = bincode::serde::encode_to_vec(v, bincode_config())
        .map_err(|e| encoding(what, e.to_string()))?;
    check_decodable(what, out.len())?;
    Ok(out)
}

/// Deserialises with the bounded bincode configuration, requiring every byte to be used.
pub(crate) fn from_bincode<T: serde::de::DeserializeOwned>(
    what: &'static str,
    b: &[u8],
) -> Result<T> {
    let (v, used): (T, usize) = bincode::serde::decode_from_slice(b, bincode_config())
        .map_err(|e| corrupted(what, format!("does not decode: {e}")))?;
    if used != b.len() {
        return Err(corrupted(what, "trailing bytes"));
    }
    Ok(v)
}

/// `#[serde(with = "crate::format::bytes")]` for `Vec<u8>` fields: serialised as one byte string
/// (length, then the bytes) and read back with one copy, instead of element by element (which
/// profiling showed as the largest cost of a replay).
pub(crate) mod bytes {
    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::Serializer;

    pub(crate) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct Bytes;
        impl<'de> Visitor<'de> for Bytes {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = seq.next_element()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_byte_buf(Bytes)
    }
}

/// The fold of monotone u64 marks (the fence and time high-water marks): the largest input, each
/// an 8-byte big-endian integer. An input of any other shape is not dropped (that could lower a
/// mark): every input is kept whole, unmerged, and the store refuses to open on that value as
/// corrupted. Total, deterministic, clock-free, no panic.
pub(crate) fn max_u64_fold(existing: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8> {
    let mut max = 0;
    for &input in existing.iter().chain(operands) {
        match decode_u64(input) {
            Some(v) => max = max.max(v),
            None => return keep_unmerged(existing, operands),
        }
    }
    max.to_be_bytes().to_vec()
}

/// A u64 stored big-endian in exactly 8 bytes.
pub(crate) fn decode_u64(bytes: &[u8]) -> Option<u64> {
    let arr: [u8; 8] = bytes.try_into().ok()?;
    Some(u64::from_be_bytes(arr))
}
