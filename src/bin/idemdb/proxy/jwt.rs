//! Verified principals: the `sub` of a JSON Web Token the proxy has checked itself, with the
//! maintained `jsonwebtoken` crate. Invariant: a principal drawn from a token is the subject of a
//! token whose signature verified under one of the route's keys, with an algorithm that key
//! allows (never `none`, never an HMAC algorithm with a public key); whose `exp` has not passed
//! and whose `nbf` has come, each within the leeway; and whose `iss` and `aud` are among those
//! configured. A token that fails any check scopes nothing: the proxy answers 401 and neither
//! stores nor forwards the request.
//!
//! Keys come from a file (`jwt-key=KIND:PATH`) read at start (a file that does not load stops the
//! proxy) and read again within a second or two of each change to its size or modification time;
//! a change that does not load keeps the keys in use and is logged.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use super::watch::{every_second, Stamp};

/// The shortest HMAC secret accepted: RFC 7518 3.2 asks for a key at least as long as the hash
/// (256 bits for HS256).
const MIN_SECRET: usize = 32;

/// Where a route's verification keys come from (`jwt-key=KIND:PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyFile {
    /// `secret:PATH`: a shared HMAC secret, the file's bytes without a final line break
    /// (HS256, HS384, HS512); at least 32 bytes.
    Secret(PathBuf),
    /// `pem:PATH`: one or more PEM public keys, RSA (RS256/384/512, PS256/384/512), EC P-256 or
    /// P-384 (ES256, ES384) or Ed25519 (EdDSA).
    Pem(PathBuf),
    /// `jwks:PATH`: a JSON Web Key Set; a token's `kid` picks its key, a key's `alg` (if given)
    /// is the only algorithm it verifies, and keys for encryption (`"use": "enc"`) are skipped.
    Jwks(PathBuf),
}

impl KeyFile {
    /// `secret:PATH`, `pem:PATH` or `jwks:PATH`.
    pub(crate) fn parse(text: &str) -> Result<KeyFile, String> {
        let (kind, path) = text
            .split_once(':')
            .filter(|(_, p)| !p.is_empty())
            .ok_or_else(|| {
                "expected secret:PATH (an HMAC secret), pem:PATH (public keys) or jwks:PATH \
                 (a JSON Web Key Set)"
                    .to_owned()
            })?;
        let path = PathBuf::from(path);
        match kind {
            "secret" => Ok(KeyFile::Secret(path)),
            "pem" => Ok(KeyFile::Pem(path)),
            "jwks" => Ok(KeyFile::Jwks(path)),
            other => Err(format!(
                "key kind `{other}` is not one of secret, pem, jwks"
            )),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            KeyFile::Secret(p) | KeyFile::Pem(p) | KeyFile::Jwks(p) => p,
        }
    }

    pub(crate) fn describe(&self) -> String {
        let kind = match self {
            KeyFile::Secret(_) => "secret",
            KeyFile::Pem(_) => "pem",
            KeyFile::Jwks(_) => "jwks",
        };
        format!("{kind}:{}", self.path().display())
    }

    /// Reads and parses the file: every key it holds, or why none can be used.
    fn load(&self) -> Result<Vec<Key>, String> {
        let path = self.path();
        let bytes =
            std::fs::read(path).map_err(|e| format!("{}: cannot be read: {e}", path.display()))?;
        let bad = |why: String| format!("{}: {why}", path.display());
        match self {
            KeyFile::Secret(_) => {
                let mut secret = bytes.as_slice();
                for end in [&b"\n"[..], b"\r"] {
                    secret = secret.strip_suffix(end).unwrap_or(secret);
                }
                if secret.len() < MIN_SECRET {
                    return Err(bad(format!(
                        "an HMAC secret of {} bytes; at least {MIN_SECRET} are needed",
                        secret.len()
                    )));
                }
                let key = DecodingKey::from_secret(secret).map_err(|e| bad(e.to_string()))?;
                Ok(vec![Key {
                    kid: None,
                    key,
                    algorithms: vec![Algorithm::HS256, Algorithm::HS384, Algorithm::HS512],
                }])
            }
            KeyFile::Pem(_) => {
                let text = String::from_utf8(bytes).map_err(|_| bad("not PEM text".into()))?;
                let keys = pem_blocks(&text)
                    .into_iter()
                    .map(|block| pem_key(block).map_err(&bad))
                    .collect::<Result<Vec<_>, _>>()?;
                if keys.is_empty() {
                    return Err(bad("no `-----BEGIN PUBLIC KEY-----` block".into()));
                }
                Ok(keys)
            }
            KeyFile::Jwks(_) => {
                let set: JwkSet = serde_json::from_slice(&bytes)
                    .map_err(|e| bad(format!("not a JSON Web Key Set: {e}")))?;
                let mut keys = Vec::new();
                for jwk in &set.keys {
                    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
                        continue;
                    }
                    let key = DecodingKey::from_jwk(jwk).map_err(|e| {
                        bad(format!(
                            "key {:?}: {e}",
                            jwk.common.key_id.as_deref().unwrap_or("without kid")
                        ))
                    })?;
                    let algorithms = match jwk.common.key_algorithm {
                        Some(alg) => vec![Algorithm::from_str(&alg.to_string()).map_err(|_| {
                            bad(format!("key algorithm {alg} cannot verify a signature"))
                        })?],
                        None => key.family().algorithms().to_vec(),
                    };
                    keys.push(Key {
                        kid: jwk.common.key_id.clone(),
                        key,
                        algorithms,
                    });
                }
                if keys.is_empty() {
                    return Err(bad("the set holds no signature key".into()));
                }
                Ok(keys)
            }
        }
    }
}

/// The `BEGIN`...`END` blocks of a PEM file, each whole.
fn pem_blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let from = &rest[start..];
        let Some(end) = from.find("-----END ") else {
            break;
        };
        let after = &from[end + "-----END ".len()..];
        let close = after.find("-----").map_or(after.len(), |i| i + 5);
        let len = end + "-----END ".len() + close;
        out.push(&from[..len]);
        rest = &from[len..];
    }
    out
}

/// A decoder of one PEM public key.
type PemDecoder = fn(&[u8]) -> jsonwebtoken::errors::Result<DecodingKey>;

/// One PEM public key, as RSA, EC or Ed25519, with the algorithms of its family.
fn pem_key(block: &str) -> Result<Key, String> {
    let tries: [(PemDecoder, &[Algorithm]); 3] = [
        (
            DecodingKey::from_rsa_pem,
            jsonwebtoken::AlgorithmFamily::Rsa.algorithms(),
        ),
        (
            DecodingKey::from_ec_pem,
            jsonwebtoken::AlgorithmFamily::Ec.algorithms(),
        ),
        (
            DecodingKey::from_ed_pem,
            jsonwebtoken::AlgorithmFamily::Ed.algorithms(),
        ),
    ];
    for (decode, algorithms) in tries {
        if let Ok(key) = decode(block.as_bytes()) {
            return Ok(Key {
                kid: None,
                key,
                algorithms: algorithms.to_vec(),
            });
        }
    }
    let first = block.lines().next().unwrap_or_default();
    Err(format!(
        "`{first}`: not an RSA, EC (P-256, P-384) or Ed25519 public key"
    ))
}

/// A route's rule for tokens: its keys and what the claims must say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JwtRule {
    pub(crate) keys: KeyFile,
    /// `jwt-iss=A,B`: `iss` must be one of these (required when set).
    pub(crate) issuers: Vec<String>,
    /// `jwt-aud=A,B`: `aud` must name one of these (required when set; a token with an `aud`
    /// is refused when none is set).
    pub(crate) audiences: Vec<String>,
    /// `jwt-leeway=30s`: clock skew allowed on `exp` and `nbf`.
    pub(crate) leeway: Duration,
}

impl JwtRule {
    pub(crate) fn new(keys: KeyFile) -> JwtRule {
        JwtRule {
            keys,
            issuers: Vec::new(),
            audiences: Vec::new(),
            leeway: Duration::from_secs(30),
        }
    }
}

struct Key {
    kid: Option<String>,
    key: DecodingKey,
    algorithms: Vec<Algorithm>,
}

/// The claims the proxy reads: only the subject.
#[derive(serde::Deserialize)]
struct Claims {
    sub: String,
}

/// Why a token scopes nothing (the 401's detail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unverified(pub(crate) String);

/// A route's verifier: its rule and the keys now loaded.
pub(crate) struct Verifier {
    rule: JwtRule,
    keys: RwLock<Arc<Vec<Key>>>,
    /// The key file as it was last read.
    stamp: Stamp,
}

impl Verifier {
    /// Loads the rule's keys (an error names the file and what is wrong with it) and starts
    /// watching the file for changes.
    pub(crate) fn start(rule: &JwtRule) -> Result<Arc<Verifier>, String> {
        let stamp = Stamp::of(rule.keys.path());
        let keys = rule.keys.load()?;
        let verifier = Arc::new(Verifier {
            rule: rule.clone(),
            keys: RwLock::new(Arc::new(keys)),
            stamp,
        });
        every_second(
            "idemdb-jwt-keys",
            Arc::downgrade(&verifier),
            Verifier::reload_if_changed,
        )?;
        Ok(verifier)
    }

    /// Reads the key file again if its size or modification time changed.
    fn reload_if_changed(&self) {
        let path = self.rule.keys.path();
        if !self.stamp.changed(path) {
            return;
        }
        match self.rule.keys.load() {
            Ok(keys) => {
                let n = keys.len();
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
                tracing::info!(target: "idemdb::proxy", file = %path.display(), keys = n,
                    "JWT verification keys reloaded");
            }
            Err(e) => tracing::warn!(target: "idemdb::proxy",
                "JWT verification keys not reloaded, the previous ones stay in use: {e}"),
        }
    }

    /// The subject of `token` if it verifies, or why not.
    pub(crate) fn subject(&self, token: &str) -> Result<String, Unverified> {
        let no = |why: &str| Err(Unverified(why.to_owned()));
        let Ok(header) = jsonwebtoken::decode_header(token) else {
            return no(
                "the token is not a signed JWT with an algorithm the proxy verifies \
                 (HS*, RS*, PS*, ES256, ES384, EdDSA)",
            );
        };
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner()).clone();
        let candidates: Vec<&Key> = keys
            .iter()
            .filter(|k| k.algorithms.contains(&header.alg))
            .filter(|k| match (&header.kid, &k.kid) {
                (Some(want), Some(have)) => want == have,
                _ => true,
            })
            .collect();
        if candidates.is_empty() {
            return Err(Unverified(format!(
                "no key of this route verifies algorithm {:?}{}",
                header.alg,
                header
                    .kid
                    .as_deref()
                    .map(|k| format!(" with kid {k:?}"))
                    .unwrap_or_default()
            )));
        }
        let mut v = Validation::new(header.alg);
        v.leeway = self.rule.leeway.as_secs();
        v.validate_nbf = true;
        let mut required = vec!["exp", "sub"];
        if !self.rule.issuers.is_empty() {
            v.set_issuer(&self.rule.issuers);
            required.push("iss");
        }
        if self.rule.audiences.is_empty() {
            v.validate_aud = false;
        } else {
            v.set_audience(&self.rule.audiences);
            required.push("aud");
        }
        v.set_required_spec_claims(&required);
        for key in candidates {
            match jsonwebtoken::decode::<Claims>(token, &key.key, &v) {
                Ok(data) if data.claims.sub.is_empty() => return no("the token's `sub` is empty"),
                Ok(data) => return Ok(data.claims.sub),
                // Another key of the set may be the one.
                Err(e) if matches!(e.kind(), ErrorKind::InvalidSignature) => continue,
                Err(e) => return Err(Unverified(refusal(e.kind()))),
            }
        }
        no("the token's signature does not verify under this route's keys")
    }
}

/// What a 401's detail says of a token that did not verify for this reason.
fn refusal(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "the token has expired (`exp`)".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (`nbf`)".into(),
        ErrorKind::InvalidIssuer => {
            "the token's issuer (`iss`) is not one this route accepts".into()
        }
        ErrorKind::InvalidAudience => {
            "the token's audience (`aud`) is not one this route accepts".into()
        }
        ErrorKind::MissingRequiredClaim(c) => format!("the token has no `{c}` claim"),
        ErrorKind::InvalidClaimFormat(c) => format!("the token's `{c}` claim is malformed"),
        ErrorKind::InvalidAlgorithm => "the token's algorithm does not fit the key".into(),
        _ => "the token is malformed".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    fn token(claims: serde_json::Value, secret: &[u8]) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret).unwrap(),
        )
        .unwrap()
    }

    fn verifier(dir: &Path, rule: impl FnOnce(JwtRule) -> JwtRule) -> Arc<Verifier> {
        let path = dir.join("secret");
        std::fs::write(&path, [SECRET, b"\n"].concat()).unwrap();
        Verifier::start(&rule(JwtRule::new(KeyFile::Secret(path)))).unwrap()
    }

    #[test]
    fn only_a_token_that_verifies_gives_its_subject() {
        let dir = tempfile::tempdir().unwrap();
        let v = verifier(dir.path(), |r| r);
        let good = token(
            serde_json::json!({"sub": "alice", "exp": now() + 60}),
            SECRET,
        );
        assert_eq!(v.subject(&good), Ok("alice".to_owned()));
        let other_key = token(
            serde_json::json!({"sub": "alice", "exp": now() + 60}),
            b"another secret, long enough......",
        );
        assert!(v.subject(&other_key).is_err(), "signed with another key");
        let expired = token(
            serde_json::json!({"sub": "alice", "exp": now() - 120}),
            SECRET,
        );
        assert!(v.subject(&expired).unwrap_err().0.contains("expired"));
        let early = token(
            serde_json::json!({"sub": "alice", "exp": now() + 600, "nbf": now() + 300}),
            SECRET,
        );
        assert!(v.subject(&early).unwrap_err().0.contains("nbf"));
        let no_exp = token(serde_json::json!({"sub": "alice"}), SECRET);
        assert!(v.subject(&no_exp).unwrap_err().0.contains("exp"));
        // alg none, with alice's claims and no signature.
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let none = format!(
            "{}.{}.",
            b64(r#"{"alg":"none","typ":"JWT"}"#),
            b64(&format!(r#"{{"sub":"alice","exp":{}}}"#, now() + 60))
        );
        assert!(v.subject(&none).is_err(), "alg none");
        // alice's signature over bob's claims.
        let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
        parts[1] = b64(&format!(r#"{{"sub":"bob","exp":{}}}"#, now() + 60));
        assert!(v.subject(&parts.join(".")).is_err(), "tampered claims");
    }

    #[test]
    fn issuer_and_audience_are_checked_when_configured() {
        let dir = tempfile::tempdir().unwrap();
        let v = verifier(dir.path(), |mut r| {
            r.issuers = vec!["https://id.example".into()];
            r.audiences = vec!["payments".into()];
            r
        });
        let exp = now() + 60;
        let ok = token(
            serde_json::json!({"sub": "a", "exp": exp, "iss": "https://id.example", "aud": "payments"}),
            SECRET,
        );
        assert_eq!(v.subject(&ok), Ok("a".to_owned()));
        for claims in [
            serde_json::json!({"sub": "a", "exp": exp, "aud": "payments"}),
            serde_json::json!({"sub": "a", "exp": exp, "iss": "https://evil", "aud": "payments"}),
            serde_json::json!({"sub": "a", "exp": exp, "iss": "https://id.example", "aud": "other"}),
        ] {
            assert!(
                v.subject(&token(claims.clone(), SECRET)).is_err(),
                "{claims}"
            );
        }
    }

    #[test]
    fn a_changed_key_file_is_read_again_and_a_bad_one_keeps_the_keys() {
        let dir = tempfile::tempdir().unwrap();
        let v = verifier(dir.path(), |r| r);
        let path = dir.path().join("secret");
        let new_secret = b"a brand new secret of 32 bytes!!";
        std::fs::write(&path, new_secret).unwrap();
        // A different size: the watcher sees it within a second or two.
        let signed_new = token(
            serde_json::json!({"sub": "a", "exp": now() + 600}),
            new_secret,
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while v.subject(&signed_new).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the new key was never loaded"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::fs::write(&path, b"short").unwrap();
        v.reload_if_changed();
        assert_eq!(
            v.subject(&signed_new),
            Ok("a".to_owned()),
            "a bad file keeps the keys"
        );
    }

    /// Runs openssl (scripts/setup installs it) with `args` in `dir`.
    fn openssl(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| panic!("this test needs the openssl command: {e}"));
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn public_keys_from_pem_and_jwks_verify_their_own_tokens_only() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for (name, curve) in [("a", "prime256v1"), ("b", "prime256v1")] {
            openssl(
                d,
                &[
                    "ecparam",
                    "-genkey",
                    "-name",
                    curve,
                    "-noout",
                    "-out",
                    &format!("{name}.sec1"),
                ],
            );
            openssl(
                d,
                &[
                    "pkcs8",
                    "-topk8",
                    "-nocrypt",
                    "-in",
                    &format!("{name}.sec1"),
                    "-out",
                    &format!("{name}.key"),
                ],
            );
            openssl(
                d,
                &[
                    "ec",
                    "-in",
                    &format!("{name}.sec1"),
                    "-pubout",
                    "-out",
                    &format!("{name}.pub"),
                ],
            );
        }
        let signer = |name: &str| {
            EncodingKey::from_ec_pem(&std::fs::read(d.join(format!("{name}.key"))).unwrap())
                .unwrap()
        };
        let es256 = |name: &str, kid: Option<&str>| {
            let mut h = Header::new(Algorithm::ES256);
            h.kid = kid.map(str::to_owned);
            let claims = serde_json::json!({"sub": name, "exp": now() + 60});
            encode(&h, &claims, &signer(name)).unwrap()
        };
        // PEM: key a only.
        let v = Verifier::start(&JwtRule::new(KeyFile::Pem(d.join("a.pub")))).unwrap();
        assert_eq!(v.subject(&es256("a", None)), Ok("a".to_owned()));
        assert!(v.subject(&es256("b", None)).is_err(), "another key's token");
        let hs = token(serde_json::json!({"sub": "a", "exp": now() + 60}), SECRET);
        assert!(
            v.subject(&hs).is_err(),
            "an HMAC token against a public key"
        );
        // Both public keys in one PEM file.
        let both = [
            std::fs::read(d.join("a.pub")).unwrap(),
            std::fs::read(d.join("b.pub")).unwrap(),
        ]
        .concat();
        std::fs::write(d.join("both.pub"), both).unwrap();
        let v = Verifier::start(&JwtRule::new(KeyFile::Pem(d.join("both.pub")))).unwrap();
        assert_eq!(v.subject(&es256("b", None)), Ok("b".to_owned()));
        // JWKS: keys picked by kid.
        let jwk = |name: &str| {
            let mut k =
                jsonwebtoken::jwk::Jwk::from_encoding_key(&signer(name), Algorithm::ES256).unwrap();
            k.common.key_id = Some(format!("kid-{name}"));
            k
        };
        let set = jsonwebtoken::jwk::JwkSet {
            keys: vec![jwk("a"), jwk("b")],
        };
        std::fs::write(d.join("jwks.json"), serde_json::to_vec(&set).unwrap()).unwrap();
        let v = Verifier::start(&JwtRule::new(KeyFile::Jwks(d.join("jwks.json")))).unwrap();
        assert_eq!(v.subject(&es256("a", Some("kid-a"))), Ok("a".to_owned()));
        assert_eq!(v.subject(&es256("b", Some("kid-b"))), Ok("b".to_owned()));
        assert!(
            v.subject(&es256("a", Some("kid-b"))).is_err(),
            "a's token naming b's key"
        );
        assert!(
            v.subject(&es256("a", Some("kid-x"))).is_err(),
            "an unknown kid"
        );
    }

    #[test]
    fn key_files_that_cannot_be_used_are_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, b"secret").unwrap();
        let e = KeyFile::Secret(short).load().err().unwrap();
        assert!(e.contains("at least 32"), "{e}");
        let pem = dir.path().join("pem");
        std::fs::write(&pem, "no keys here").unwrap();
        assert!(KeyFile::Pem(pem).load().is_err());
        let jwks = dir.path().join("jwks");
        std::fs::write(&jwks, r#"{"keys": []}"#).unwrap();
        assert!(KeyFile::Jwks(jwks).load().is_err());
        assert!(KeyFile::parse("rsa:/x").is_err());
        assert_eq!(
            KeyFile::parse("pem:/etc/k.pem"),
            Ok(KeyFile::Pem("/etc/k.pem".into()))
        );
    }
}
