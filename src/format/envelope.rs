//! Sealed envelopes. Invariant: every stored value outside the engine's own files is sealed as
//! `[format byte][body][crc32 BE of format byte and body]` (a record is the envelope over its
//! expiry and body), and opening one checks length, checksum and format byte before anything is
//! decoded; a merge that cannot read its inputs keeps them whole in an unmerged envelope that no
//! opener accepts.

use crate::error::{corrupted, Result};

/// The only value format this build reads and writes.
pub(crate) const FORMAT: u8 = 1;
/// The trailer: crc32 (u32 BE) of everything before it.
pub(crate) const TRAILER: usize = 4;

/// Seals a body:
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
