//! Byte layouts of keys and values. Invariants: every decoder is total (it returns an error on any
//! input, never panics, never allocates more than a fixed bound); integers in keys are big-endian
//! so byte order is numeric order; a record key encodes (tenant, key) injectively.

use std::collections::BTreeMap;

use crate::clock::Millis;
use crate::error::{corrupted, encoding, Result};
use crate::record::{Checkpoint, Record, RecordView, ResponseView, StateView};

/// The only record value format this build reads and writes.
pub(crate) const FORMAT: u8 = 1;
/// Header: format byte + expires_at (u64 BE). Trailer: crc32 (u32 BE) of header and body.
const HEADER: usize = 1 + 8;
const TRAILER: usize = 4;
/// Upper bound on what the body decoder may allocate (largest response limit plus slack).
const DECODE_LIMIT: usize = 80 << 20;

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<DECODE_LIMIT>()
}

/// The record key of (tenant, key): `[u16 BE len][tenant][u16 BE len][key]`. Lengths are validated (≤ 4096) before this is called.
pub fn record_key(tenant: &[u8], key: &[u8]) -> Vec<u8> {
    record_key_in(false, tenant, key).to_vec()
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

/// The record key of (tenant, key), in the consumer namespace when `consumer` is set.
pub(crate) fn record_key_in(consumer: bool, tenant: &[u8], key: &[u8]) -> RecordKey {
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

/// Splits a record key back into (tenant, key); `None` if the bytes are not a record key.
pub fn split_record_key(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
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

/// Encodes a record value: header, bincode body, checksum. Fails (writing nothing) when the body
/// does not encode or the value would be larger than any decoder here accepts, so that nothing is
/// ever stored that cannot be read back.
pub(crate) fn encode_record(rec: &Record) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(64 + rec.fingerprint.len());
    out.push(FORMAT);
    out.extend_from_slice(&rec.expires_at.to_be_bytes());
    bincode::serde::encode_into_std_write(rec, &mut out, bincode_config())
        .map_err(|e| encoding("record", e.to_string()))?;
    check_decodable("record", out.len() - HEADER)?;
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Refuses a body of `len` bytes that the decoders would reject for its size.
fn check_decodable(what: &'static str, len: usize) -> Result<()> {
    if len > DECODE_LIMIT {
        return Err(encoding(
            what,
            format!("{len} bytes encoded, over the {DECODE_LIMIT}-byte limit of the decoder"),
        ));
    }
    Ok(())
}

/// Checks format and checksum and returns (expires_at, body).
fn open_envelope(bytes: &[u8]) -> Result<(Millis, &[u8])> {
    let Some((payload, crc)) = bytes.split_last_chunk::<TRAILER>() else {
        return Err(corrupted(
            "record",
            format!("{} bytes is too short", bytes.len()),
        ));
    };
    if payload.len() < HEADER {
        return Err(corrupted(
            "record",
            format!("{} bytes is too short", bytes.len()),
        ));
    }
    let expected = u32::from_be_bytes(*crc);
    let actual = crc32fast::hash(payload);
    if expected != actual {
        return Err(corrupted(
            "record",
            format!("checksum {actual:08x} does not match stored {expected:08x}"),
        ));
    }
    let (head, body) = payload.split_at(HEADER);
    let (fmt, exp) = head.split_at(1);
    if fmt != [FORMAT] {
        return Err(corrupted(
            "record",
            format!("unknown value format {:?}", fmt),
        ));
    }
    let mut e = [0u8; 8];
    e.copy_from_slice(exp);
    Ok((u64::from_be_bytes(e), body))
}

pub(crate) fn decode_record(bytes: &[u8]) -> Result<Record> {
    let (expires_at, body) = open_envelope(bytes)?;
    let mut rec: Record = decode_record_body(body)?;
    rec.expires_at = expires_at;
    Ok(rec)
}

/// Decodes a record value without copying its fingerprint or response body.
pub(crate) fn decode_record_view(bytes: &[u8]) -> Result<RecordView<'_>> {
    let (expires_at, body) = open_envelope(bytes)?;
    let mut rec = decode_view_body(body)?;
    rec.expires_at = expires_at;
    Ok(rec)
}

/// The view of a record body (no envelope), all of it.
fn decode_view_body(body: &[u8]) -> Result<RecordView<'_>> {
    let mut r = Reader { rest: body };
    let rec = r
        .record_view()
        .ok_or_else(|| corrupted("record", "body does not decode"))?;
    if !r.rest.is_empty() {
        return Err(corrupted(
            "record",
            format!("{} trailing bytes after the body", r.rest.len()),
        ));
    }
    Ok(rec)
}

/// Reads the borrowed record view straight from bincode's standard encoding (what
/// `bincode_config` writes: integers as varints, a 0/1 byte before an `Option`'s value, enum
/// variants as varint `u32`, lengths as varint `u64`), without serde's visitors: every claim that
/// finds a record decodes one. Integer widths are as strict as bincode's (a `u32` never takes the
/// 8-byte form). `tests::hand_view_decodes_as_serde_does` holds it to the serde decoder.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (a, rest) = self.rest.split_first_chunk::<N>()?;
        self.rest = rest;
        Some(*a)
    }

    fn byte(&mut self) -> Option<u8> {
        self.array::<1>().map(|[b]| b)
    }

    /// A varint: the value itself below 251, else a tag for the 2-, 4- or (if `wide`) 8-byte
    /// little-endian form that follows.
    fn varint(&mut self, wide: bool) -> Option<u64> {
        Some(match self.byte()? {
            b @ 0..=250 => u64::from(b),
            251 => u64::from(u16::from_le_bytes(self.array()?)),
            252 => u64::from(u32::from_le_bytes(self.array()?)),
            253 if wide => u64::from_le_bytes(self.array()?),
            _ => return None,
        })
    }

    fn u64(&mut self) -> Option<u64> {
        self.varint(true)
    }

    fn u32(&mut self) -> Option<u32> {
        self.varint(false).and_then(|v| u32::try_from(v).ok())
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.u64()?).ok()?;
        if len > self.rest.len() {
            return None;
        }
        let (a, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(a)
    }

    fn string(&mut self) -> Option<String> {
        std::str::from_utf8(self.bytes()?).ok().map(str::to_owned)
    }

    fn record_view(&mut self) -> Option<RecordView<'a>> {
        let fingerprint = self.bytes()?;
        let created_at = self.u64()?;
        let fence = self.u64()?;
        let attempts = self.u32()?;
        let takeovers = self.u32()?;
        let checkpoint = match self.byte()? {
            0 => None,
            1 => Some(Checkpoint {
                phase: self.string()?,
                state: self.bytes()?.to_vec(),
            }),
            _ => return None,
        };
        let state = match self.u32()? {
            0 => StateView::Pending {
                lease_until: self.u64()?,
            },
            1 => StateView::Released,
            2 => {
                let response = self.response()?;
                StateView::Completed {
                    response,
                    at: self.u64()?,
                }
            }
            3 => {
                let response = self.response()?;
                StateView::Failed {
                    response,
                    at: self.u64()?,
                }
            }
            _ => return None,
        };
        Some(RecordView {
            expires_at: 0,
            fingerprint,
            _created_at: created_at,
            fence,
            _attempts: attempts,
            _takeovers: takeovers,
            _checkpoint: checkpoint,
            state,
        })
    }

    fn response(&mut self) -> Option<ResponseView<'a>> {
        let body = self.bytes()?;
        let entries = self.u64()?;
        let mut meta = BTreeMap::new();
        for _ in 0..entries {
            // Each entry takes at least two bytes, so a corrupt count ends at the input's end.
            let k = self.string()?;
            let v = self.string()?;
            meta.insert(k, v);
        }
        Some(ResponseView { body, meta })
    }
}

fn decode_record_body<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> Result<T> {
    let (rec, used): (T, usize) = bincode::serde::borrow_decode_from_slice(body, bincode_config())
        .map_err(|e| corrupted("record", format!("body does not decode: {e}")))?;
    if used != body.len() {
        return Err(corrupted(
            "record",
            format!("{} trailing bytes after the body", body.len() - used),
        ));
    }
    Ok(rec)
}

/// The expiry of a record value, for the compaction filter: `None` unless the checksum holds.
pub(crate) fn record_expiry(bytes: &[u8]) -> Option<Millis> {
    open_envelope(bytes).ok().map(|(e, _)| e)
}

/// Seals a body in the generic envelope used outside the records CF:
/// `[format byte][body][crc32 BE of format byte and body]`.
pub(crate) fn seal(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(FORMAT);
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// Opens a sealed envelope: checks the checksum and format byte and returns the body.
pub(crate) fn unseal<'a>(what: &'static str, bytes: &'a [u8]) -> Result<&'a [u8]> {
    let Some((payload, crc)) = bytes.split_last_chunk::<TRAILER>() else {
        return Err(corrupted(
            what,
            format!("{} bytes is too short", bytes.len()),
        ));
    };
    if u32::from_be_bytes(*crc) != crc32fast::hash(payload) {
        return Err(corrupted(what, "checksum does not match"));
    }
    match payload.split_first() {
        Some((&FORMAT, body)) => Ok(body),
        Some((&UNMERGED, _)) => Err(corrupted(
            what,
            "a merge met an input it could not decode and kept every input unmerged",
        )),
        Some((f, _)) => Err(corrupted(what, format!("unknown value format {f}"))),
        None => Err(corrupted(what, "empty")),
    }
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

/// Format byte of an unmerged envelope: `[UNMERGED][u32 BE len][input]...[crc32 BE]`, the
/// existing value (if any) and then every operand, each whole. No decoder accepts it (its format
/// byte is not [`FORMAT`]), so reads report the value as corrupted and `idemdb inspect` shows it;
/// a later merge over it keeps it whole again, inside a new envelope.
pub(crate) const UNMERGED: u8 = 0xFE;

/// The unmerged envelope of a merge's inputs (see [`UNMERGED`]).
pub(crate) fn keep_unmerged(existing: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8> {
    let mut out = vec![UNMERGED];
    for &input in existing.iter().chain(operands) {
        let len = u32::try_from(input.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(input.get(..len as usize).unwrap_or(input));
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
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

/// `#[serde(with = "crate::codec::bytes")]` for `Vec<u8>` fields: serialised as one byte string
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

/// A u64 stored big-endian in exactly 8 bytes.
pub(crate) fn decode_u64(bytes: &[u8]) -> Option<u64> {
    let arr: [u8; 8] = bytes.try_into().ok()?;
    Some(u64::from_be_bytes(arr))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::record::State;

    fn sample() -> Record {
        Record {
            expires_at: 42,
            fingerprint: vec![1, 2, 3],
            created_at: 7,
            fence: 9,
            attempts: 1,
            takeovers: 0,
            checkpoint: None,
            state: State::Pending { lease_until: 11 },
        }
    }

    #[test]
    fn a_record_past_the_decoder_bound_is_an_error_not_a_truncation() {
        let mut r = sample();
        r.state = State::Completed {
            response: crate::Response::new(vec![0u8; DECODE_LIMIT]),
            at: 1,
        };
        assert!(matches!(
            encode_record(&r),
            Err(crate::Error::Encoding { what: "record", .. })
        ));
        r.state = State::Completed {
            response: crate::Response::new(vec![0u8; DECODE_LIMIT - 64]),
            at: 1,
        };
        let bytes = encode_record(&r).unwrap();
        assert_eq!(decode_record(&bytes).unwrap(), r);
    }

    #[test]
    fn record_round_trips() {
        let r = sample();
        assert_eq!(decode_record(&encode_record(&r).unwrap()).unwrap(), r);
    }

    /// Both decoders on one body: `Some(debug form)` when it decodes, with nothing left over.
    fn both_views(body: &[u8]) -> (Option<String>, Option<String>) {
        let hand = decode_view_body(body).ok().map(|v| format!("{v:?}"));
        let serde = decode_record_body::<RecordView<'_>>(body)
            .ok()
            .map(|v| format!("{v:?}"));
        (hand, serde)
    }

    #[test]
    fn hand_view_decodes_as_serde_does() {
        let mut response = crate::Response::new(vec![7; 300]).with_status(201);
        response
            .meta
            .insert("content-type".into(), "text/plain".into());
        let checkpoint = crate::Checkpoint {
            phase: "charged".into(),
            state: vec![1, 2, 3],
        };
        let shapes = [
            (None, State::Pending { lease_until: 11 }),
            (
                Some(checkpoint.clone()),
                State::Pending {
                    lease_until: u64::MAX,
                },
            ),
            (Some(checkpoint), State::Released),
            (
                None,
                State::Completed {
                    response: response.clone(),
                    at: 1 << 40,
                },
            ),
            (
                None,
                State::Failed {
                    response: crate::Response::new(Vec::new()),
                    at: 6,
                },
            ),
        ];
        for (checkpoint, state) in shapes {
            for (fence, attempts) in [(0, 0), (250, 251), (70_000, u32::MAX), (u64::MAX, 65_536)] {
                let rec = Record {
                    checkpoint: checkpoint.clone(),
                    state: state.clone(),
                    fence,
                    attempts,
                    takeovers: attempts / 2,
                    ..sample()
                };
                let bytes = encode_record(&rec).unwrap();
                let (_, body) = open_envelope(&bytes).unwrap();
                let (hand, serde) = both_views(body);
                assert!(hand.is_some(), "{rec:?}");
                assert_eq!(hand, serde);
                // Every truncation, and single-byte corruptions at every position: the two
                // decoders accept and reject the same bodies, and agree on what they accept.
                for cut in 0..body.len() {
                    assert_eq!(both_views(&body[..cut]), (None, None));
                }
                for at in 0..body.len() {
                    for flip in [0x01u8, 0x80, 0xff] {
                        let mut bad = body.to_vec();
                        bad[at] ^= flip;
                        let (hand, serde) = both_views(&bad);
                        assert_eq!(hand, serde, "byte {at} ^ {flip:#x} of {rec:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn hand_varints_take_the_forms_bincode_takes() {
        let cfg = bincode::config::standard();
        let forms: [&[u8]; 8] = [
            &[7],
            &[250],
            &[251, 1, 0],
            &[252, 1, 0, 0, 0],
            &[253, 1, 0, 0, 0, 0, 0, 0, 0],
            &[254, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            &[255],
            &[252, 1, 0],
        ];
        for f in forms {
            let u32_ok = bincode::decode_from_slice::<u32, _>(f, cfg)
                .ok()
                .map(|x| x.0);
            let u64_ok = bincode::decode_from_slice::<u64, _>(f, cfg)
                .ok()
                .map(|x| x.0);
            assert_eq!(Reader { rest: f }.u32(), u32_ok, "u32 from {f:?}");
            assert_eq!(Reader { rest: f }.u64(), u64_ok, "u64 from {f:?}");
        }
    }

    #[test]
    fn view_reads_every_record_shape() {
        let response = crate::Response::new(vec![7; 300]).with_status(201);
        let checkpoint = crate::Checkpoint {
            phase: "charged".into(),
            state: vec![1, 2],
        };
        for (checkpoint, state) in [
            (None, State::Pending { lease_until: 11 }),
            (Some(checkpoint), State::Released),
            (
                None,
                State::Completed {
                    response: response.clone(),
                    at: 5,
                },
            ),
            (
                None,
                State::Failed {
                    response: response.clone(),
                    at: 6,
                },
            ),
        ] {
            let rec = Record {
                checkpoint,
                state,
                ..sample()
            };
            let bytes = encode_record(&rec).unwrap();
            let view = decode_record_view(&bytes).unwrap();
            assert_eq!(view.index_slot(), rec.index_slot());
            assert_eq!(view.fingerprint, &rec.fingerprint[..]);
            use crate::record::StateView as V;
            match (view.state, &rec.state) {
                (V::Pending { lease_until: a }, State::Pending { lease_until: b }) => {
                    assert_eq!(a, *b)
                }
                (V::Released, State::Released) => {}
                (V::Completed { response: a, at }, State::Completed { response: b, at: t })
                | (V::Failed { response: a, at }, State::Failed { response: b, at: t }) => {
                    assert_eq!((a.into_response(), at), (b.clone(), *t));
                }
                (v, r) => panic!("view {v:?} of {r:?}"),
            }
            assert!(decode_record_view(&bytes[..bytes.len() - 1]).is_err());
        }
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let bytes = encode_record(&sample()).unwrap();
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(decode_record(&b).is_err(), "flip of bit {i} accepted");
        }
    }

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
                let got = record_key_in(consumer, b"tenant", &key);
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
        let a = record_key(b"ab", b"c");
        let b = record_key(b"a", b"bc");
        assert_ne!(a, b);
        assert_eq!(split_record_key(&a), Some((&b"ab"[..], &b"c"[..])));
        assert_eq!(split_record_key(&a[..a.len() - 1]), None);
    }

    #[test]
    fn expiries_past_the_ulid_range_clamp_like_the_bound() {
        let rkey = record_key(b"t", b"k");
        let past = index_key(MAX_INDEX_TIME + 5, 1, &rkey);
        assert_eq!(split_index_key(&past).map(|(t, _)| t), Some(MAX_INDEX_TIME));
        assert!(past.as_slice() > index_key(MAX_INDEX_TIME - 1, u64::MAX, &rkey).as_slice());
        assert!(past.as_slice() >= index_bound(MAX_INDEX_TIME).as_slice());
        assert!(past.as_slice() < index_bound(MAX_INDEX_TIME + 1).as_slice());
    }

    #[test]
    fn index_keys_sort_by_expiry() {
        let k1 = index_key(1000, u64::MAX, &record_key(b"z", b"z"));
        let k2 = index_key(1001, 0, &record_key(b"a", b"a"));
        assert!(k1 < k2);
        assert!(k1.as_slice() < index_bound(1001).as_slice());
        assert_eq!(split_index_key(&k2).map(|(t, _)| t), Some(1001));
    }
}
