//! Every value and key decoder of idemdb, and the merge operators' folds, fed arbitrary bytes:
//! none may panic, and no value decoder may accept bytes whose CRC-32 trailer does not match.
//!
//! Each input is used three ways: as it is (almost never with a valid checksum, so this mostly
//! exercises the envelope checks), sealed with a correct checksum (so the body decoders see
//! arbitrary bodies), and sealed then with single bits flipped (which must always be rejected).
//! The merge folds get the input cut into operands, half of them turned into well-formed values:
//! over well-formed operands they must return the join, whatever the order, however often folded;
//! over operands of which one does not decode they must keep every input whole (never drop one).
#![no_main]

use std::collections::BTreeMap;

use idemdb::__internal as internal;
use idemdb::{OffsetWindow, VersionVector};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    values(data);
    let sealed = internal::seal(data);
    values(&sealed);
    for flip in flips(data, sealed.len()) {
        let mut damaged = sealed.clone();
        if let Some(b) = damaged.get_mut(flip / 8) {
            *b ^= 1 << (flip % 8);
        }
        assert_rejected(&damaged);
    }
    keys(data);
    merges(data);
});

/// Whether the last four bytes are the CRC-32 (big-endian) of the rest, computed independently.
fn crc_ok(b: &[u8]) -> bool {
    match b.split_last_chunk::<4>() {
        Some((payload, crc)) => u32::from_be_bytes(*crc) == crc32fast::hash(payload),
        None => false,
    }
}

/// Every value decoder on `b`: what one accepts carries a matching checksum and the format byte,
/// and re-encodes to a value that decodes to the same thing.
fn values(b: &[u8]) {
    let ok = crc_ok(b) && b.first() == Some(&1);
    if let Ok((info, canonical)) = internal::decode_record(b) {
        assert!(ok, "record accepted with a bad checksum or format: {b:?}");
        assert_eq!(internal::record_expiry(b), Some(info.expires_at));
        let again = internal::decode_record(&canonical).expect("a re-encoded record decodes");
        assert_eq!(again, (info, canonical.clone()));
    }
    if let Some(t) = internal::record_expiry(b) {
        assert!(
            ok && b.len() >= 13,
            "expiry read from a damaged record: {b:?}"
        );
        let header: [u8; 8] = b[1..9].try_into().expect("8 bytes");
        assert_eq!(u64::from_be_bytes(header), t);
    }
    if let Ok((version, value)) = internal::decode_entity(b) {
        assert!(ok, "entity accepted with a bad checksum or format: {b:?}");
        // The entity layout has exactly one encoding per value.
        assert_eq!(internal::encode_entity(version, value.as_deref()), b);
    }
    if internal::decode_siblings(b).is_ok() {
        assert!(
            ok,
            "causal entity accepted with a bad checksum or format: {b:?}"
        );
    }
    if let Ok(vv) = internal::decode_version_vector(b) {
        assert!(
            ok,
            "version vector accepted with a bad checksum or format: {b:?}"
        );
        let again = internal::decode_version_vector(&internal::encode_version_vector(&vv));
        assert_eq!(again.ok(), Some(vv));
    }
    if let Ok(w) = internal::decode_offset_window(b) {
        assert!(
            ok,
            "offset window accepted with a bad checksum or format: {b:?}"
        );
        let again = internal::decode_offset_window(&internal::encode_offset_window(&w));
        assert_eq!(again.ok(), Some(w));
    }
    if internal::decode_reservation(b).is_ok() {
        assert!(
            ok,
            "reservation accepted with a bad checksum or format: {b:?}"
        );
    }
}

/// Every value decoder rejects `b` (a sealed value with one flipped bit).
fn assert_rejected(b: &[u8]) {
    assert!(!crc_ok(b), "CRC-32 missed a single-bit error");
    assert!(internal::decode_record(b).is_err());
    assert!(internal::record_expiry(b).is_none());
    assert!(internal::decode_entity(b).is_err());
    assert!(internal::decode_siblings(b).is_err());
    assert!(internal::decode_version_vector(b).is_err());
    assert!(internal::decode_offset_window(b).is_err());
    assert!(internal::decode_reservation(b).is_err());
}

/// Three bit positions in a value of `len` bytes, derived from the input.
fn flips(data: &[u8], len: usize) -> [usize; 3] {
    let h = crc32fast::hash(data) as usize;
    let bits = len * 8;
    [
        h % bits,
        (h >> 11) % bits,
        bits - 1 - (h >> 21) % bits.min(64),
    ]
}

/// Record keys and expiry index keys: splitting never panics, and what splits re-encodes to the
/// same bytes (consumer-namespace flags aside).
fn keys(b: &[u8]) {
    if let Some((tenant, key)) = internal::split_record_key(b) {
        assert_eq!(tenant.len() + key.len() + 4, b.len());
        let mut unflagged = b.to_vec();
        for i in [0, 2 + tenant.len()] {
            if let Some(x) = unflagged.get_mut(i) {
                *x &= 0x7f;
            }
        }
        assert_eq!(internal::record_key(tenant, key), unflagged);
    }
    if let Some((t, rk)) = internal::split_index_key(b) {
        let (id, rest) = b
            .split_first_chunk::<16>()
            .expect("an index key has a ULID");
        assert_eq!(rk, rest);
        assert!(internal::split_record_key(rk).is_some());
        let mut ms = [0u8; 8];
        ms[2..].copy_from_slice(&id[..6]);
        assert_eq!(t, u64::from_be_bytes(ms));
        if id[6..8] == [0, 0] {
            let fence = u64::from_be_bytes(id[8..].try_into().expect("8 bytes"));
            assert_eq!(internal::index_key(t, fence, rk), b);
        }
    }
    // Any two byte strings (cut at the first byte's position) encode to a key that splits back.
    let cut = usize::from(b.first().copied().unwrap_or(0)).min(b.len());
    let (tenant, key) = b.split_at(cut);
    if key.len() >= 0x8000 {
        return; // lengths are validated to at most 4096 before a key is ever encoded
    }
    let rk = internal::record_key(tenant, key);
    assert_eq!(internal::split_record_key(&rk), Some((tenant, key)));
    let ik = internal::index_key(u64::from(cut as u32) << 20, 7, &rk);
    assert_eq!(
        internal::split_index_key(&ik),
        Some((u64::from(cut as u32) << 20, &rk[..]))
    );
}

/// The input cut into operands: each starts with a length byte; an operand whose length byte is
/// odd is turned into a well-formed value of the kind at hand by `wellformed`.
fn operands(b: &[u8], wellformed: impl Fn(&[u8]) -> Vec<u8>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = b;
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len >> 1).min(tail.len());
        let (chunk, tail) = tail.split_at(n);
        out.push(if len & 1 == 1 {
            wellformed(chunk)
        } else {
            chunk.to_vec()
        });
        rest = tail;
        if out.len() == 16 {
            break;
        }
    }
    out
}

/// A version vector from bytes: the chunk itself sealed if it is a bincode version vector (any
/// counter, up to `u64::MAX`), else pairs of (actor, counter).
fn vv_from(chunk: &[u8]) -> Vec<u8> {
    let sealed = internal::seal(chunk);
    if internal::decode_version_vector(&sealed).is_ok() {
        return sealed;
    }
    let mut vv = VersionVector::new();
    for pair in chunk.chunks(2) {
        let actor = ["a", "b", "c", "d"][usize::from(pair[0] % 4)];
        vv.observe(actor, u64::from(pair.get(1).copied().unwrap_or(0)));
    }
    internal::encode_version_vector(&vv)
}

/// An offset window from bytes: the chunk itself sealed if it is a bincode offset window (any
/// offsets, up to `u64::MAX`), else built from the bytes (`next`, then the set) with every number
/// under 251 so that each is one varint byte.
fn window_from(chunk: &[u8]) -> Vec<u8> {
    let sealed = internal::seal(chunk);
    if internal::decode_offset_window(&sealed).is_ok() {
        return sealed;
    }
    let (next, set) = chunk.split_first().unwrap_or((&0, &[]));
    let set = &set[..set.len().min(8)];
    let mut body = vec![next % 251, set.len() as u8];
    body.extend(set.iter().map(|o| o % 251));
    internal::seal(&body)
}

/// Folds `ops` with the versions merge operator under kind byte `kind`: (in order, reversed,
/// folded again onto its own result, folded in two halves).
fn fold_ways(kind: u8, ops: &[Vec<u8>]) -> Vec<u8> {
    let refs: Vec<&[u8]> = ops.iter().map(Vec::as_slice).collect();
    let key = [kind, 0, 1, b'x', 0, 1, b'y'];
    let (existing, rest) = match refs.split_first() {
        Some((e, r)) => (Some(*e), r),
        None => (None, &[][..]),
    };
    let merged = internal::versions_merge(&key, existing, rest);
    let mut reversed = refs.clone();
    reversed.reverse();
    assert_eq!(
        internal::versions_merge(&key, None, &reversed),
        merged,
        "the fold depends on operand order"
    );
    assert_eq!(
        internal::versions_merge(&key, Some(&merged), &refs),
        merged,
        "folding again changed the result"
    );
    let (a, b) = refs.split_at(refs.len() / 2);
    let halves = [
        internal::versions_merge(&key, None, a),
        internal::versions_merge(&key, None, b),
    ];
    let halves: Vec<&[u8]> = halves.iter().map(Vec::as_slice).collect();
    assert_eq!(
        internal::versions_merge(&key, None, &halves),
        merged,
        "folding in two halves differs"
    );
    merged
}

/// A fold over inputs of which at least one does not decode keeps them all, whole, in the
/// unmerged envelope (`[0xFE]`, each input length-prefixed, CRC-32), which no decoder accepts.
fn assert_kept_unmerged(merged: &[u8], existing: Option<&[u8]>, rest: &[&[u8]]) {
    let mut want = vec![0xFE];
    for input in existing.into_iter().chain(rest.iter().copied()) {
        want.extend_from_slice(&(input.len() as u32).to_be_bytes());
        want.extend_from_slice(input);
    }
    want.extend_from_slice(&crc32fast::hash(&want).to_be_bytes());
    assert_eq!(
        merged, want,
        "a fold over an unreadable input did not keep it"
    );
    assert!(internal::decode_version_vector(merged).is_err());
    assert!(internal::decode_offset_window(merged).is_err());
}

/// Folds `ops` with kind `kind` when one of them does not decode (`decodes` says which do): the
/// fold must keep every input instead of skipping the bad ones.
fn check_unreadable_kept(kind: u8, ops: &[Vec<u8>], decodes: impl Fn(&[u8]) -> bool) {
    if ops.iter().all(|o| decodes(o)) {
        return;
    }
    let refs: Vec<&[u8]> = ops.iter().map(Vec::as_slice).collect();
    let key = [kind, 0, 1, b'x', 0, 1, b'y'];
    let (existing, rest) = match refs.split_first() {
        Some((e, r)) => (Some(*e), r),
        None => (None, &[][..]),
    };
    assert_kept_unmerged(
        &internal::versions_merge(&key, existing, rest),
        existing,
        rest,
    );
}

fn merges(b: &[u8]) {
    // Replica version vectors (kind 3): the pointwise maximum of the operands when all decode.
    let all = operands(b, vv_from);
    check_unreadable_kept(3, &all, |o| internal::decode_version_vector(o).is_ok());
    let ops: Vec<Vec<u8>> = all
        .into_iter()
        .filter(|o| internal::decode_version_vector(o).is_ok())
        .collect();
    let merged = fold_ways(3, &ops);
    let got = internal::decode_version_vector(&merged).expect("the fold's result decodes");
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for vv in ops
        .iter()
        .filter_map(|o| internal::decode_version_vector(o).ok())
    {
        for (a, n) in vv.iter() {
            let e = want.entry(a.to_string()).or_default();
            *e = (*e).max(n);
        }
    }
    let got: BTreeMap<String, u64> = got
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(a, n)| (a.to_string(), n))
        .collect();
    want.retain(|_, n| *n > 0);
    assert_eq!(
        got, want,
        "version vector fold is not the pointwise maximum"
    );

    // Offset windows (kind 4): an offset is processed in the result iff in some operand.
    let all = operands(b, window_from);
    check_unreadable_kept(4, &all, |o| internal::decode_offset_window(o).is_ok());
    let ops: Vec<Vec<u8>> = all
        .iter()
        .filter(|o| internal::decode_offset_window(o).is_ok())
        .cloned()
        .collect();
    let merged = fold_ways(4, &ops);
    let got = internal::decode_offset_window(&merged).expect("the fold's result decodes");
    let inputs: Vec<OffsetWindow> = ops
        .iter()
        .filter_map(|o| internal::decode_offset_window(o).ok())
        .collect();
    let edges = [u64::MAX - 1, u64::MAX];
    for o in (0..260)
        .chain(edges)
        .chain(inputs.iter().filter_map(|w| w.watermark()))
    {
        assert_eq!(
            got.contains(o),
            inputs.iter().any(|w| w.contains(o)),
            "offset {o}: the fold is not the union"
        );
    }
    let next = got.watermark().map_or(0, |w| w + 1);
    // Normalised: `next` is the first unprocessed offset (it cannot count past u64::MAX).
    assert!(
        next == u64::MAX || !got.contains(next),
        "the folded window is not normalised"
    );
    let ops = all;

    // Any other kind keeps the last operand (or the existing value).
    let refs: Vec<&[u8]> = ops.iter().map(Vec::as_slice).collect();
    let last = refs.last().copied();
    assert_eq!(
        internal::versions_merge(&[1], Some(b"old"), &refs),
        last.unwrap_or(b"old")
    );

    // The fence high-water mark: the largest well-formed 8-byte operand.
    let ops = operands(b, |c| {
        let mut x = [0u8; 8];
        let n = c.len().min(8);
        x[8 - n..].copy_from_slice(&c[..n]);
        x.to_vec()
    });
    let refs: Vec<&[u8]> = ops.iter().map(Vec::as_slice).collect();
    let merged = internal::max_u64_merge(None, &refs);
    if refs.iter().all(|o| o.len() == 8) {
        let want = refs
            .iter()
            .filter_map(|o| <[u8; 8]>::try_from(*o).ok().map(u64::from_be_bytes))
            .max()
            .unwrap_or(0);
        assert_eq!(merged, want.to_be_bytes());
    } else {
        assert_kept_unmerged(&merged, None, &refs);
    }
}
