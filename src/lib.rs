//! # idemdb
//!
//! An embedded idempotency engine on RocksDB: a request, message or update that arrives twice
//! (client retries, proxies, at-least-once brokers, crashed workers) never takes effect twice.
//!
//! A caller **claims** a key with a request fingerprint. Exactly one concurrent claimer
//! **acquires** a lease (with a fencing token) and runs the operation; it then **completes** the
//! lease with a response, which every later claim **replays** byte for byte. A lease that expires
//! (the worker crashed) is taken over by the next claim; a stale holder's late completion is
//! refused. Records expire after their retention and vanish from reads at once.
//!
//! ```
//! use idemdb::{Claim, ClaimOptions, Config, Durability, Response};
//!
//! # fn main() -> idemdb::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let store = Config::new(dir.path()).durability(Durability::Buffered).open()?;
//! let fp = idemdb::fingerprint(&[b"POST", b"/payments", b"{\"amount\":100}"]);
//!
//! // First delivery: we must do the work.
//! let Claim::Acquired(lease) = store.claim("acme", "key-1", &fp, ClaimOptions::default())? else {
//!     panic!("a new key is acquired");
//! };
//! let receipt = Response::new(b"charged 100".to_vec()).with_status(201);
//! store.complete(&lease, receipt.clone())?.expect("we hold the lease");
//!
//! // A retry replays the stored response instead of charging again.
//! match store.claim("acme", "key-1", &fp, ClaimOptions::default())? {
//!     Claim::Completed(replay) => assert_eq!(replay.response, receipt),
//!     other => panic!("expected a replay, got {other:?}"),
//! }
//! // The same key with a different request body is a mismatch (HTTP 422).
//! let other = idemdb::fingerprint(&[b"POST", b"/payments", b"{\"amount\":999}"]);
//! assert_eq!(store.claim("acme", "key-1", &other, ClaimOptions::default())?, Claim::Mismatch);
//! # Ok(()) }
//! ```
//!
//! A fleet of instances shares one store in PostgreSQL (feature `postgres`):
//! `Config::postgres(url).open_async()` gives an `AsyncStore` with the same request-record
//! calls and outcomes as an embedded store opened with `Config::open_async`; every decision is
//! one SQL statement and every time the database server's. The HTTP layer for tower and axum is
//! `idemdb::http` (feature `http`), which also receives signed webhooks once
//! (`http::WebhookLayer`); `idemdb::grpc` (feature `grpc`) makes a tonic server's methods
//! idempotent on the same records; the HTTP layer in front of a service in any language is the
//! `idemdb proxy` command (feature `proxy`, README "Any language: the proxy").
#![deny(unsafe_code, missing_docs)]
#![warn(clippy::unwrap_used, clippy::indexing_slicing)]

// The floors, from the bottom up; each imports only from the floors below it (docs/design.md,
// "Architecture"; scripts/check-layers checks it).
// 1. The shared vocabulary: what a call means on either backend, and its checks.
mod causal;
mod clock;
mod commit;
mod config;
mod consumer;
mod entities;
mod error;
mod format;
mod keys;
mod offsets;
mod record;
mod requests;
mod unique;
// Telemetry, which every floor may use.
mod telemetry;
// 2. The backends, each a whole store answering every call.
mod embedded;
#[cfg(feature = "postgres")]
mod postgres;
// 3. One async API over both.
#[cfg(feature = "async")]
mod async_store;
// 4. The HTTP layer.
#[cfg(feature = "http")]
pub mod http;
// 5. The gRPC layer, on the HTTP layer.
#[cfg(feature = "grpc")]
pub mod grpc;

#[cfg(feature = "async")]
pub use async_store::{AsyncCommit, AsyncStore};
pub use causal::{Causality, Sibling, Siblings, VersionVector};
pub use clock::{Clock, ManualClock, Millis, SystemClock};
pub use commit::{CommitConflict, Committed};
#[cfg(feature = "postgres")]
pub use config::fleet::{StatementMode, SynchronousCommit, TlsMode, TlsRoots};
#[cfg(feature = "postgres")]
pub use config::OnPostgres;
pub use config::{Config, Durability, OnDisk, TraceTenants};
pub use consumer::{Begin, ConsumerOptions, MessageFailed};
pub use embedded::commit::Commit;
pub use embedded::inspect::{DataKind, Detail, Item};
pub use embedded::Store;
pub use entities::{
    etag, expect_from_headers, parse_etag, Conflict, Expect, UpdateOptions, Version, Versioned,
};
pub use error::{Cause, Error, InvalidInput, Result};
pub use keys::{derive_key, fingerprint, mint_key};
pub use offsets::OffsetWindow;
#[cfg(feature = "postgres")]
pub use postgres::migrations::SchemaStep;
#[cfg(feature = "postgres")]
pub use postgres::replay_tier::ReplayTierStats;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresStats, SqlTransaction, SqlValue};
pub use record::{
    Checkpoint, Claim, ClaimOptions, FailKind, Lease, LeaseLost, LeaseResult, RecordInfo,
    RecordState, Replay, ReplayView, Response,
};
pub use requests::{Execution, MAX_FINGERPRINT_LEN};
pub use telemetry::counters::{Counters, Stats};
pub use telemetry::spans::trace_key_hash;
pub use unique::{Released, Reservation};

#[cfg(feature = "__internal")]
#[doc(hidden)]
pub mod __internal {
    //! Test-only hooks, compiled only with the `__internal` feature (which the crate's own tests
    //! and the fuzz crate enable); not part of the stable API. The `decode` fuzz target (`fuzz/`)
    //! feeds arbitrary bytes through every decoder and merge fold below; the `model` fuzz target
    //! runs its stores in an [`InMemory`] environment and empties one store between inputs
    //! ([`reset`]) instead of opening a new one.
    /// Splits a record key back into (tenant, key); `None` if the bytes are not a record key.
    pub fn split_record_key(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
        crate::format::split_record_key(bytes)
    }

    /// The composite encoding of a unique value's parts: the key a reservation's span hashes
    /// (with the index as its tenant).
    pub fn composite(parts: &[&[u8]]) -> Vec<u8> {
        crate::format::composite(parts)
    }

    /// The claim rule (`requests::claim_step`) on one case, for the test that holds the SQL's
    /// copy to it: `found` is the key's record as (expires at, fingerprint, state, lease end),
    /// the state one of `pending`, `released`, `completed`, `failed`. The step's name: `absent`,
    /// `expired`, `mismatch`, `completed`, `failed`, `in_progress`, `acquire` or `takeover`.
    pub fn claim_rule(
        found: Option<(u64, &[u8], &str, u64)>,
        fingerprint: &[u8],
        now: u64,
    ) -> &'static str {
        use crate::requests::{claim_step, ClaimStep, Found};
        let found = found.map(|(expires_at, fingerprint, state, lease_until)| Found {
            expires_at,
            fingerprint,
            state: seen_named(state, lease_until),
        });
        match claim_step(found, fingerprint, now) {
            ClaimStep::Absent => "absent",
            ClaimStep::Expired => "expired",
            ClaimStep::Mismatch => "mismatch",
            ClaimStep::Completed(()) => "completed",
            ClaimStep::Failed(()) => "failed",
            ClaimStep::InProgress { .. } => "in_progress",
            ClaimStep::Acquire { takeover: false } => "acquire",
            ClaimStep::Acquire { takeover: true } => "takeover",
        }
    }

    /// The holder rule (`requests::lease_lost`) on one case: `found` is the key's record as
    /// (live, state as in [`claim_rule`], fence); `None` when the lease with token `ours` still
    /// holds it.
    pub fn holder_rule(found: Option<(bool, &str, u64)>, ours: u64) -> Option<crate::LeaseLost> {
        use crate::requests::{lease_lost, Holding};
        let found = found.map(|(live, state, fence)| Holding {
            live,
            state: seen_named(state, 0),
            fence,
        });
        lease_lost(found, ours)
    }

    /// A state by its name in [`claim_rule`]'s cases.
    fn seen_named(state: &str, lease_until: u64) -> crate::requests::Seen<()> {
        use crate::requests::Seen;
        match state {
            "pending" => Seen::Pending { lease_until },
            "released" => Seen::Released,
            "completed" => Seen::Completed(()),
            _ => Seen::Failed(()),
        }
    }

    /// The record key of request `(tenant, key)`.
    pub fn record_key(tenant: &[u8], key: &[u8]) -> Vec<u8> {
        crate::format::record_key(crate::format::Namespace::Requests, tenant, key).to_vec()
    }

    use crate::{OffsetWindow, RecordInfo, Result, Siblings, VersionVector};

    /// An in-memory storage environment, for tests and fuzzing only: a store opened with
    /// `Config::in_memory(&env)` keeps every file of its database in `env` (nothing is written
    /// to disk, and nothing survives the last clone of `env`). Clones share the same files, so a
    /// store reopened at the same path with the same handle (or a clone) finds what was written
    /// before; another handle sees an empty environment. Opaque: which engine provides it is not
    /// part of any API.
    #[derive(Clone)]
    pub struct InMemory(pub(crate) crate::embedded::engine::MemEnv);

    impl InMemory {
        /// A new, empty in-memory environment.
        pub fn new() -> Result<Self> {
            crate::embedded::engine::MemEnv::new().map(Self)
        }
    }

    impl std::fmt::Debug for InMemory {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("InMemory")
        }
    }

    /// Empties `store` and puts it back in the state of a new store (no data, the first fencing
    /// token 1, the time of a new store), without closing it: the `model` fuzz target runs many
    /// inputs on one open store this way. Nothing else may use the store meanwhile, and no lease
    /// or reservation from before may be used afterwards.
    pub fn reset(store: &crate::Store) -> Result<()> {
        store.core.reset()
    }

    /// Decodes a value of the `records` column family: the record as `get` would report it, and
    /// the record encoded again (the canonical bytes of what was decoded).
    pub fn decode_record(bytes: &[u8]) -> Result<(RecordInfo, Vec<u8>)> {
        let rec = crate::embedded::codec::decode_record(bytes)?;
        Ok((rec.info(), crate::embedded::codec::encode_record(&rec)?))
    }

    /// The expiry the compaction filter reads from a record value (`None` unless it checks out).
    pub fn record_expiry(bytes: &[u8]) -> Option<u64> {
        crate::embedded::codec::record_expiry(bytes)
    }

    /// Seals `body` in the generic envelope `[format][body][crc32 BE]`.
    pub fn seal(body: &[u8]) -> Vec<u8> {
        crate::format::seal(body)
    }

    /// Decodes a versioned entity value (kind 1): its version and value (`None`: a tombstone).
    pub fn decode_entity(bytes: &[u8]) -> Result<(u64, Option<Vec<u8>>)> {
        let s = crate::entities::decode_entity(bytes)?;
        Ok((s.version, s.value))
    }

    /// Encodes a versioned entity value (kind 1).
    pub fn encode_entity(version: u64, value: Option<&[u8]>) -> Vec<u8> {
        crate::entities::encode_entity(version, value)
    }

    /// Decodes a causal entity value (kind 2).
    pub fn decode_siblings(bytes: &[u8]) -> Result<Siblings> {
        crate::format::unseal_bincode("causal entity", bytes)
    }

    /// Decodes a replica version vector value (kind 3).
    pub fn decode_version_vector(bytes: &[u8]) -> Result<VersionVector> {
        crate::format::unseal_bincode("version vector", bytes)
    }

    /// Encodes a replica version vector value (kind 3), as a merge operand.
    pub fn encode_version_vector(vv: &VersionVector) -> Vec<u8> {
        crate::causal::encode_vv(vv).unwrap_or_default()
    }

    /// Decodes an offset window value (kind 4).
    pub fn decode_offset_window(bytes: &[u8]) -> Result<OffsetWindow> {
        crate::format::unseal_bincode("offset window", bytes)
    }

    /// Encodes an offset window value (kind 4), as a merge operand.
    pub fn encode_offset_window(w: &OffsetWindow) -> Vec<u8> {
        crate::format::seal_bincode("offset window", w).unwrap_or_default()
    }

    /// A reservation's owner and, if bound to a lease, the lease's (record key, fence).
    pub type DecodedReservation = (Vec<u8>, Option<(Vec<u8>, u64)>);

    /// Decodes a unique reservation value (kind 5).
    pub fn decode_reservation(bytes: &[u8]) -> Result<DecodedReservation> {
        let s: crate::unique::StoredReservation =
            crate::format::unseal_bincode("reservation", bytes)?;
        Ok((s.owner, s.bound))
    }

    /// The expiry index key of a record version.
    pub fn index_key(expires_at: u64, fence: u64, record_key: &[u8]) -> Vec<u8> {
        crate::format::index_key(expires_at, fence, record_key)
    }

    /// Splits an expiry index key into (expiry time, record key).
    pub fn split_index_key(bytes: &[u8]) -> Option<(u64, &[u8])> {
        crate::format::split_index_key(bytes)
    }

    /// The `versions` column family's merge operator on a key, an existing value and operands.
    pub fn versions_merge(key: &[u8], existing: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8> {
        crate::embedded::schema::versions_fold(key, existing, operands)
    }

    /// The `meta` column family's merge operator (the fence high-water mark).
    pub fn max_u64_merge(existing: Option<&[u8]>, operands: &[&[u8]]) -> Vec<u8> {
        crate::format::max_u64_fold(existing, operands)
    }
}

/// The README's examples, compiled and run as doc-tests so they cannot drift from the code.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
