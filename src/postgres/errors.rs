//! PostgreSQL's errors as idemdb's: every driver error is classified here, once, at the
//! boundary, into an [`Error`] by its SQLSTATE (or, without one, by what the connection's failure
//! says). Invariants: a failure to reach the database, a statement timeout, or a server that is
//! read-only here (a standby) is [`Error::Unavailable`], never an answer; a configuration the
//! server or the client refuses is [`Error::ConnectionRejected`], with what to fix; a message
//! carries the server's text and SQLSTATE, and never a URL's password ([`redact`]).

use tokio_postgres::error::SqlState;

use super::{migrations, tls};
use crate::error::Error;

/// A database error as people read it: the server's message and SQLSTATE (the driver's own
/// `Display` says only "db error"), or the connection's failure with its cause.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut m = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(d) = db.detail() {
                m.push_str(&format!("; {d}"));
            }
            m
        }
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}

/// Classifies a database error once, at the boundary.
pub(super) fn classify(e: tokio_postgres::Error) -> Error {
    classify_parts(&e).with_source(e)
}

/// What a connection failure without SQLSTATE says about the configuration: `Some(what to fix)`
/// when it is one (TLS that cannot be agreed or verified, credentials the client lacks, a
/// setting tokio-postgres refuses), `None` when it is the network or the server being away.
fn rejection(e: &tokio_postgres::Error) -> Option<&'static str> {
    let text = e.to_string();
    if text.starts_with("error performing TLS handshake") {
        let cause = std::error::Error::source(e);
        let tls_itself = cause.is_some_and(tls::is_tls_rejection)
            || cause.is_some_and(|c| c.to_string().contains("server does not support TLS"));
        return tls_itself.then_some(
            "check sslmode, sslrootcert (the CA that signed the server's certificate) and the \
             host name the certificate names",
        );
    }
    if text.starts_with("authentication error") {
        return Some("check the user and password in the URL");
    }
    if text.starts_with("invalid configuration") {
        return Some("check the URL");
    }
    None
}

/// [`classify`] without taking the error.
pub(super) fn classify_parts(e: &tokio_postgres::Error) -> Error {
    let e_text = describe(e);
    match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
                || *c == SqlState::INVALID_CATALOG_NAME
                || *c == SqlState::SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION =>
        {
            Error::ConnectionRejected {
                message: format!(
                    "PostgreSQL: {e_text}; check the user, password, database and sslmode \
                     against the server's pg_hba.conf"
                ),
                source: None,
            }
        }
        Some(c)
            if *c == SqlState::INVALID_SQL_STATEMENT_NAME
                || *c == SqlState::DUPLICATE_PSTATEMENT =>
        {
            Error::ConnectionRejected {
                message: format!(
                    "PostgreSQL: {e_text}; named prepared statements do not survive this \
                     connection: it goes through a pooler in transaction mode (PgBouncer before \
                     1.21 or without max_prepared_statements, Supavisor, RDS Proxy): add \
                     statement_mode=unnamed to the URL, or call \
                     Config::statement_mode(StatementMode::Unnamed)"
                ),
                source: None,
            }
        }
        // A server in recovery (a standby: a stale writer endpoint after a failover, or a URL
        // without target_session_attrs) refuses a write with 25006, and a function that only a
        // primary answers (`pg_current_wal_lsn()`, in every fencing token) with 55000 "recovery
        // is in progress": both are the same standby, unavailable for writes.
        Some(c)
            if *c == SqlState::READ_ONLY_SQL_TRANSACTION
                || (*c == SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
                    && e_text.contains("recovery is in progress")) =>
        {
            Error::Unavailable {
                message: format!(
                    "PostgreSQL is read-only here (a standby, or a primary being demoted in a \
                 failover): {e_text}; the connection was closed, the next call connects afresh \
                 (use a multi-host URL with target_session_attrs=read-write; if this persists, \
                 the URL names a standby)"
                ),
                source: None,
            }
        }
        Some(c) if *c == SqlState::UNDEFINED_TABLE || *c == SqlState::UNDEFINED_OBJECT => {
            Error::SchemaMismatch {
                found: "no idemdb tables (the schema was never applied)".into(),
                expected: migrations::current_version(),
            }
        }
        Some(c) if *c == SqlState::QUERY_CANCELED => Error::Unavailable {
            message: format!("PostgreSQL cancelled the statement (statement timeout): {e_text}"),
            source: None,
        },
        Some(c)
            if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::LOCK_NOT_AVAILABLE =>
        {
            Error::Busy(format!("PostgreSQL: {e_text}"))
        }
        Some(c)
            if c.code().starts_with("08")
                || c.code().starts_with("57")
                || c.code().starts_with("53") =>
        {
            Error::Unavailable {
                message: format!("PostgreSQL: {e_text}"),
                source: None,
            }
        }
        Some(_) => Error::Engine(format!("PostgreSQL: {e_text}")),
        // No SQLSTATE: the connection failed or closed (I/O, TLS, protocol), or the client's
        // configuration cannot work with this server.
        None => match rejection(e) {
            Some(fix) => Error::ConnectionRejected {
                message: format!("PostgreSQL connection: {e_text}; {fix}"),
                source: None,
            },
            None => Error::Unavailable {
                message: format!("PostgreSQL connection: {e_text}"),
                source: None,
            },
        },
    }
}
/// The URL without its password, for messages.
pub(super) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((creds, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match creds.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}
