//! Minting and deriving idempotency keys and request fingerprints. Invariant: a derived key or
//! fingerprint is a pure function of its inputs (SHA-256 over length-prefixed parts), so the same
//! request always maps to the same key and no two different part lists collide by concatenation.

use std::hash::{BuildHasher, Hasher};

use sha2::{Digest, Sha256};

use crate::clock::Clock;

/// A new random idempotency key: a ULID (time-ordered, 26 characters of Crockford base32), for a
/// caller that creates the operation and will retry it with the same key.
pub fn mint_key(clock: &dyn Clock) -> String {
    ulid::Ulid::from_parts(clock.now_millis(), random_u128()).to_string()
}

/// 128 random bits from the standard library's per-process random hasher keys.
pub(crate) fn random_u128() -> u128 {
    let a = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(a);
    (u128::from(a) << 64) | u128::from(h.finish())
}

/// A stable idempotency key derived from what identifies the operation, for callers that cannot
/// be sent one: for example `derive_key(&[b"refund", order_id, amount, body_hash])`. It is the
/// hex SHA-256 of the length-prefixed parts (64 characters). Include everything that makes two
/// operations different and nothing that changes between retries (timestamps, request ids): a key
/// that differs per attempt deduplicates nothing.
pub fn derive_key(parts: &[&[u8]]) -> String {
    hex(&digest(parts))
}

/// A request fingerprint: the SHA-256 of the length-prefixed parts (method, path, body, ...).
/// The same key with a different fingerprint is reported as a mismatch.
pub fn fingerprint(parts: &[&[u8]]) -> Vec<u8> {
    digest(parts).to_vec()
}

fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    h.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    let digit = |n: u8| char::from_digit(u32::from(n), 16).unwrap_or('0');
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(digit(b >> 4));
        s.push(digit(b & 0x0f));
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn derived_keys_are_stable_and_prefix_free() {
        assert_eq!(derive_key(&[b"a", b"b"]), derive_key(&[b"a", b"b"]));
        assert_ne!(derive_key(&[b"ab", b""]), derive_key(&[b"a", b"b"]));
        assert_eq!(derive_key(&[b"x"]).len(), 64);
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        // Keys derived by earlier versions stay the same (stored keys must keep matching).
        assert_eq!(
            derive_key(&[b"refund", b"order-1"]),
            digest(&[b"refund", b"order-1"])
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
    }

    #[test]
    fn minted_keys_differ() {
        let c = crate::ManualClock::default();
        assert_ne!(mint_key(&c), mint_key(&c));
    }
}
