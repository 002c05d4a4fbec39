//! A PostgreSQL store's connection settings, and the options idemdb reads from the URL itself.
//! Invariants:
//! - the URL is the single source a deployment has to get right: `sslmode`, `sslrootcert` and
//!   `statement_mode` are read from it (URL form `postgres://...?sslmode=verify-full` or key/value
//!   form `host=... sslmode=verify-full`), and every other option is left, unchanged, to
//!   tokio-postgres (multi-host lists, `target_session_attrs`, `options`, ...); a `Config` setter
//!   wins over the URL;
//! - a URL that cannot be parsed, or an option value idemdb does not know, is
//!   [`InvalidInput::Config`] at open, with the URL's password never shown.

use std::path::PathBuf;

use super::tls::Tls;
use crate::config::fleet::{Settings, StatementMode, TlsMode, TlsRoots};
use crate::error::{InvalidInput, Result};

impl Settings {
    /// The URL taken apart: what tokio-postgres parses, and idemdb's own options with the
    /// setters applied.
    pub(crate) fn resolve(&self) -> Result<Resolved> {
        let own = split_url(&self.url)?;
        let roots = self.tls_roots.clone().or(own.tls_roots);
        let mode = tls_mode(self.tls_mode.or(own.tls_mode), roots.as_ref())?;
        Ok(Resolved {
            rest: own.rest,
            tls: Tls { mode, roots },
            statement_mode: self
                .statement_mode
                .or(own.statement_mode)
                .unwrap_or_default(),
        })
    }
}

/// The mode asked for (the setter's, else the URL's), as libpq resolves it with these roots:
/// with `sslrootcert=system` the mode is `verify-full` when none is asked for, and a weaker one is
/// an error (libpq 16: "any weaker setting will result in an error"), since the system's roots
/// trust every public CA's certificate for any host name; otherwise `prefer` when none is asked.
fn tls_mode(asked: Option<TlsMode>, roots: Option<&TlsRoots>) -> Result<TlsMode> {
    match (roots, asked) {
        (Some(TlsRoots::System), None | Some(TlsMode::VerifyFull)) => Ok(TlsMode::VerifyFull),
        (Some(TlsRoots::System), Some(weaker)) => Err(InvalidInput::Config(format!(
            "sslrootcert=system with sslmode={}: the system's roots trust any publicly trusted \
             certificate, so only sslmode=verify-full (the default with sslrootcert=system, as in \
             libpq) checks that it names this server; remove sslmode or set it to verify-full, \
             or give the server's CA file as sslrootcert",
            weaker.as_str()
        ))
        .into()),
        (_, asked) => Ok(asked.unwrap_or(TlsMode::Prefer)),
    }
}

/// [`Settings::resolve`]'s answer.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// The URL without idemdb's options, for tokio-postgres.
    pub(crate) rest: String,
    pub(crate) tls: Tls,
    pub(crate) statement_mode: StatementMode,
}

/// idemdb's options found in a URL, and the URL without them.
#[derive(Debug, Default, PartialEq, Eq)]
struct Own {
    tls_mode: Option<TlsMode>,
    tls_roots: Option<TlsRoots>,
    statement_mode: Option<StatementMode>,
    rest: String,
}

impl Own {
    /// Takes `key=value` if it is one of idemdb's options; whether it was.
    fn take(&mut self, key: &str, value: &str) -> Result<bool> {
        match key {
            "sslmode" => self.tls_mode = Some(TlsMode::parse(value)?),
            "sslrootcert" => {
                self.tls_roots = Some(if value == "system" {
                    TlsRoots::System
                } else {
                    TlsRoots::File(PathBuf::from(value))
                })
            }
            "statement_mode" => {
                self.statement_mode = Some(match value {
                    "prepared" => StatementMode::Prepared,
                    "unnamed" => StatementMode::Unnamed,
                    other => {
                        return Err(InvalidInput::Config(format!(
                            "statement_mode={other:?} is not prepared or unnamed"
                        ))
                        .into())
                    }
                })
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn split_url(url: &str) -> Result<Own> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_uri(url)
    } else {
        split_key_value(url)
    }
}

/// `postgres://user@host/db?a=1&sslmode=require`: the query's pairs, percent-decoded.
fn split_uri(url: &str) -> Result<Own> {
    let mut own = Own::default();
    let Some((base, query)) = url.split_once('?') else {
        own.rest = url.to_string();
        return Ok(own);
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(v)
            .decode_utf8()
            .map_err(|_| {
                InvalidInput::Config(format!(
                    "PostgreSQL URL: the value of {k} is not UTF-8 once percent-decoded"
                ))
            })?;
        if !own.take(k, &value)? {
            kept.push(pair);
        }
    }
    own.rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok(own)
}

/// `host=a port=5432 sslmode='verify-full'`: libpq's key/value form (values optionally in single
/// quotes, with `\'` and `\\` inside).
fn split_key_value(s: &str) -> Result<Own> {
    let bad = |m: String| -> crate::Error {
        InvalidInput::Config(format!("PostgreSQL connection string: {m}")).into()
    };
    let mut own = Own::default();
    let mut kept: Vec<&str> = Vec::new();
    let mut it = s.char_indices().peekable();
    let skip_space = |it: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while it.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_space(&mut it);
        let Some(&(start, _)) = it.peek() else { break };
        while it
            .next_if(|(_, c)| *c != '=' && !c.is_whitespace())
            .is_some()
        {}
        let key_end = it.peek().map_or(s.len(), |&(i, _)| i);
        let key = s.get(start..key_end).unwrap_or_default();
        skip_space(&mut it);
        if it.next_if(|(_, c)| *c == '=').is_none() {
            return Err(bad(format!("{key:?} has no value (key=value expected)")));
        }
        skip_space(&mut it);
        let mut value = String::new();
        if it.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match it.next() {
                    None => return Err(bad(format!("the value of {key} has no closing quote"))),
                    Some((_, '\'')) => break,
                    Some((_, '\\')) => match it.next() {
                        Some((_, c)) => value.push(c),
                        None => {
                            return Err(bad(format!("the value of {key} has no closing quote")))
                        }
                    },
                    Some((_, c)) => value.push(c),
                }
            }
        } else {
            while let Some((_, c)) = it.next_if(|(_, c)| !c.is_whitespace()) {
                value.push(c);
            }
        }
        let end = it.peek().map_or(s.len(), |&(i, _)| i);
        if !own.take(key, &value)? {
            kept.push(s.get(start..end).unwrap_or_default());
        }
    }
    own.rest = kept.join(" ");
    Ok(own)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Regression (issue 43 item 1): a URL with only `sslrootcert=system` ran as `prefer` (no
    /// certificate check, a plaintext fallback), and weaker modes with it accepted any publicly
    /// trusted certificate for any host.
    #[test]
    fn sslrootcert_system_means_verify_full_as_in_libpq() {
        let resolve = |url: &str| Settings::new(url.to_owned()).resolve();
        let only = resolve("postgres://h/db?sslrootcert=system").unwrap();
        assert_eq!(only.tls.mode, TlsMode::VerifyFull);
        assert_eq!(only.tls.roots, Some(TlsRoots::System));
        let full = resolve("postgres://h/db?sslrootcert=system&sslmode=verify-full").unwrap();
        assert_eq!(full.tls.mode, TlsMode::VerifyFull);
        for weaker in ["disable", "allow", "prefer", "require", "verify-ca"] {
            let e = resolve(&format!(
                "postgres://h/db?sslrootcert=system&sslmode={weaker}"
            ))
            .unwrap_err();
            assert!(
                matches!(&e, crate::Error::InvalidInput(InvalidInput::Config(m)) if m.contains("verify-full")),
                "{weaker}: {e}"
            );
        }
        let kv = Settings::new("host=h sslrootcert=system".into())
            .resolve()
            .unwrap();
        assert_eq!(kv.tls.mode, TlsMode::VerifyFull);
        // A setter's system roots resolve the same way.
        let mut s = Settings::new("postgres://h/db".into());
        s.tls_roots = Some(TlsRoots::System);
        assert_eq!(s.resolve().unwrap().tls.mode, TlsMode::VerifyFull);
        s.tls_mode = Some(TlsMode::Require);
        assert!(s.resolve().is_err());
        // A file's roots leave the mode as asked (libpq: `require` then verifies the chain).
        let file = resolve("postgres://h/db?sslrootcert=%2Fca.pem").unwrap();
        assert_eq!(file.tls.mode, TlsMode::Prefer);
    }

    #[test]
    fn uri_options_are_taken_and_the_rest_kept_in_order() {
        let own = split_url(
            "postgres://u:p@a:5432,b:5433/db?target_session_attrs=read-write&sslmode=verify-full\
             &sslrootcert=%2Fetc%2Fca.pem&application_name=x&statement_mode=unnamed",
        )
        .unwrap();
        assert_eq!(own.tls_mode, Some(TlsMode::VerifyFull));
        assert_eq!(own.tls_roots, Some(TlsRoots::File("/etc/ca.pem".into())));
        assert_eq!(own.statement_mode, Some(StatementMode::Unnamed));
        assert_eq!(
            own.rest,
            "postgres://u:p@a:5432,b:5433/db?target_session_attrs=read-write&application_name=x"
        );
        let plain = split_url("postgresql://u@h/db").unwrap();
        assert_eq!(plain.rest, "postgresql://u@h/db");
        assert_eq!(plain.tls_mode, None);
        let only = split_url("postgres://u@h/db?sslmode=disable").unwrap();
        assert_eq!(only.rest, "postgres://u@h/db");
        assert_eq!(only.tls_mode, Some(TlsMode::Disable));
    }

    #[test]
    fn key_value_options_are_taken_with_quotes() {
        let own = split_url(
            "host=a,b port=1,2 sslmode = 'verify-ca' sslrootcert='/x/it\\'s ca.pem' \
             options='-c search_path=s' dbname=test",
        )
        .unwrap();
        assert_eq!(own.tls_mode, Some(TlsMode::VerifyCa));
        assert_eq!(own.tls_roots, Some(TlsRoots::File("/x/it's ca.pem".into())));
        assert_eq!(
            own.rest,
            "host=a,b port=1,2 options='-c search_path=s' dbname=test"
        );
        assert!(split_url("host=a sslmode").is_err());
        assert!(split_url("host=a sslmode='x").is_err());
    }

    #[test]
    fn unknown_values_are_configuration_errors() {
        for url in [
            "postgres://h/db?sslmode=verify",
            "postgres://h/db?statement_mode=simple",
            "host=h sslmode=maybe",
        ] {
            let e = split_url(url).unwrap_err();
            assert!(
                matches!(e, crate::Error::InvalidInput(InvalidInput::Config(_))),
                "{url}: {e:?}"
            );
        }
    }

    #[test]
    fn setters_win_over_the_url() {
        let mut s = Settings::new("postgres://h/db?sslmode=require&statement_mode=unnamed".into());
        s.tls_mode = Some(TlsMode::Disable);
        s.statement_mode = Some(StatementMode::Prepared);
        let r = s.resolve().unwrap();
        assert_eq!(r.tls.mode, TlsMode::Disable);
        assert_eq!(r.statement_mode, StatementMode::Prepared);
        assert_eq!(r.rest, "postgres://h/db");
        let d = Settings::new("postgres://h/db".into()).resolve().unwrap();
        assert_eq!(d.tls.mode, TlsMode::Prefer);
        assert_eq!(d.statement_mode, StatementMode::Prepared);
    }
}
