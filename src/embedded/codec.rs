//! The record codec: a record value is the sealed envelope over its expiry (u64 BE, first, so the
//! compaction filter reads it without decoding the body) and its bincode body. Invariants: every
//! decoder is total (an error on any input, never a panic, never an allocation past the bound);
//! nothing is encoded that would not decode again.

use std::collections::BTreeMap;

use crate::clock::Millis;
use crate::error::{corrupted, encoding, Result};
use crate::format::{bincode_config, check_decodable, unseal, FORMAT};
use crate::record::{Checkpoint, Record, RecordView, ResponseView, StateView};

/// Header: format byte + expires_at (u64 BE).
const HEADER: usize = 1 + 8;

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

/// Checks the envelope (length, checksum, format byte) and returns (expires_at, body).
fn open_envelope(bytes: &[u8]) -> Result<(Millis, &[u8])> {
    let sealed = unseal("record", bytes)?;
    let Some((exp, body)) = sealed.split_first_chunk::<8>() else {
        return Err(corrupted(
            "record",
            format!("{} bytes is too short", bytes.len()),
        ));
    };
    Ok((u64::from_be_bytes(*exp), body))
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
            response: crate::Response::new(vec![0u8; crate::format::DECODE_LIMIT]),
            at: 1,
        };
        assert!(matches!(
            encode_record(&r),
            Err(crate::Error::Encoding { what: "record", .. })
        ));
        r.state = State::Completed {
            response: crate::Response::new(vec![0u8; crate::format::DECODE_LIMIT - 64]),
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
}
