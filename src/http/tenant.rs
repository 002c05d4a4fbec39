//! How a principal, or a webhook endpoint, becomes the store's tenant. Invariant: the mapping is
//! injective and its forms never meet: a literal tenant is `p` followed by the principal, a
//! hashed tenant is `h` followed by hex digits of the principal's SHA-256, a webhook endpoint's
//! tenant is `w` followed by its scheme and name (`w` + hex digits when that is too long), so no
//! principal, whatever its bytes, is ever stored under another principal's or an endpoint's
//! tenant; every tenant it returns fits the store's limit.

use crate::keys::derive_key;

/// The first byte of a tenant holding the principal itself.
const LITERAL: char = 'p';
/// The first byte of a tenant holding hex digits of the principal's SHA-256.
const HASHED: char = 'h';
/// The first byte of a webhook endpoint's tenant (`webhook.rs`): no principal's tenant starts
/// with it, so no caller of an [`super::IdempotencyLayer`] can spell an endpoint's events.
const WEBHOOK: char = 'w';
/// The fewest hex digits a hashed tenant may keep (128 bits); a store whose tenant limit leaves
/// less room than that cannot hold a long principal safely.
pub(crate) const MIN_HASH_DIGITS: usize = 32;

/// Why a principal has no tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoTenant {
    /// The principal is empty (the caller is unknown).
    Empty,
    /// The principal does not fit the store's tenant limit literally, and the limit leaves no
    /// room for `MIN_HASH_DIGITS` hex digits after the tag.
    LimitTooSmall { max_tenant_len: usize },
}

/// The tenant under which `principal`'s keys are stored, for a store whose tenants are at most
/// `max_tenant_len` bytes: `p` + the principal when that fits; otherwise `h` + the first
/// `min(64, max_tenant_len - 1)` hex digits of `derive_key(&[principal])`.
pub(crate) fn tenant_of(principal: &str, max_tenant_len: usize) -> Result<String, NoTenant> {
    if principal.is_empty() {
        return Err(NoTenant::Empty);
    }
    let room = max_tenant_len.saturating_sub(1);
    if principal.len() <= room {
        let mut t = String::with_capacity(principal.len() + 1);
        t.push(LITERAL);
        t.push_str(principal);
        return Ok(t);
    }
    if room < MIN_HASH_DIGITS {
        return Err(NoTenant::LimitTooSmall { max_tenant_len });
    }
    // Hex digits are ASCII, so any length is a character boundary.
    let mut digits = derive_key(&[principal.as_bytes()]);
    digits.truncate(room);
    Ok(format!("{HASHED}{digits}"))
}

/// The tenant of a webhook endpoint's events: `w` + `scheme:name` when that fits the store's
/// `max_tenant_len`, otherwise `w#` + hex digits of its SHA-256 (a scheme's name never holds `#`,
/// so the two forms never meet); `None` when the limit leaves no room for 32 digits.
pub(crate) fn webhook_tenant(scheme: &str, name: &str, max_tenant_len: usize) -> Option<String> {
    let scope = format!("{scheme}:{name}");
    if scope.len() < max_tenant_len {
        return Some(format!("{WEBHOOK}{scope}"));
    }
    let room = max_tenant_len.saturating_sub(2);
    if room < MIN_HASH_DIGITS {
        return None;
    }
    let mut digits = derive_key(&[b"webhook", scope.as_bytes()]);
    digits.truncate(room);
    Some(format!("{WEBHOOK}#{digits}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn literal_principals_are_tagged_and_fit() {
        assert_eq!(tenant_of("alice", 64).unwrap(), "palice");
        let p63 = "a".repeat(63);
        assert_eq!(tenant_of(&p63, 64).unwrap(), format!("p{p63}"));
        assert_eq!(tenant_of("", 64), Err(NoTenant::Empty));
    }

    #[test]
    fn long_principals_are_hashed_within_the_limit() {
        let p64 = "a".repeat(64);
        let t = tenant_of(&p64, 64).unwrap();
        assert_eq!(t.len(), 64);
        assert!(t.starts_with('h'));
        assert_eq!(&t[1..], &derive_key(&[p64.as_bytes()])[..63]);
        // A roomy store keeps the whole digest, no more.
        let long = "b".repeat(5000);
        assert_eq!(
            tenant_of(&long[..500], 4096).unwrap(),
            format!("p{}", &long[..500])
        );
        let t = tenant_of(&long, 4096).unwrap();
        assert_eq!(t, format!("h{}", derive_key(&[long.as_bytes()])));
        // The smallest store that can hash, and one that cannot.
        assert_eq!(tenant_of(&long, 33).unwrap().len(), 33);
        assert_eq!(
            tenant_of(&long, 32),
            Err(NoTenant::LimitTooSmall { max_tenant_len: 32 })
        );
        assert_eq!(tenant_of("x", 2).unwrap(), "px");
        assert!(tenant_of("xy", 2).is_err());
    }

    #[test]
    fn no_literal_principal_meets_a_hashed_one() {
        let long = "org-".repeat(20);
        let hashed = tenant_of(&long, 64).unwrap();
        // The old scheme's tenant for `long`, and the new one, used as principals.
        for spelled in [
            derive_key(&[long.as_bytes()]),
            hashed.clone(),
            hashed[1..].into(),
        ] {
            let t = tenant_of(&spelled, 64).unwrap();
            assert_ne!(t, hashed, "principal {spelled:?}");
        }
        // Distinct principals, short and long, get distinct tenants.
        let mut seen = std::collections::HashSet::new();
        for n in 1..=70 {
            for c in ['a', 'h', 'p'] {
                assert!(seen.insert(tenant_of(&c.to_string().repeat(n), 64).unwrap()));
            }
        }
    }

    #[test]
    fn webhook_endpoints_never_share_a_principals_tenant() {
        assert_eq!(
            webhook_tenant("stripe", "payments", 64).unwrap(),
            "wstripe:payments"
        );
        let p = tenant_of("stripe:payments", 64).unwrap();
        assert_ne!(p, webhook_tenant("stripe", "payments", 64).unwrap());
        let long = "n".repeat(80);
        let t = webhook_tenant("github", &long, 64).unwrap();
        assert!(t.starts_with("w#") && t.len() == 64, "{t}");
        assert_eq!(webhook_tenant("github", &long, 20), None);
    }
}
