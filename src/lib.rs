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
#![deny(unsafe_code, missing_docs)]
#![warn(clippy::unwrap_used, clippy::indexing_slicing)]

mod clock;
mod codec;
mod commit;
mod config;
mod consumer;
mod engine;
mod error;
mod keys;
mod metrics;
mod offsets;
mod record;
mod store;
mod unique;
mod versions;
mod vv;

pub use clock::{Clock, ManualClock, Millis, SystemClock};
pub use commit::{Commit, CommitConflict, Committed};
pub use config::{Config, Durability};
pub use consumer::{Begin, ConsumerOptions, MessageFailed};
pub use error::{Error, InvalidInput, Result};
pub use keys::{derive_key, fingerprint, mint_key};
pub use metrics::{Counters, Stats};
pub use offsets::OffsetWindow;
pub use record::{
    Checkpoint, Claim, ClaimOptions, FailKind, Lease, LeaseLost, RecordInfo, RecordState, Replay,
    Response,
};
pub use store::{Execution, Store, MAX_FINGERPRINT_LEN};
pub use unique::{Released, Reservation};
pub use versions::{
    etag, expect_from_headers, parse_etag, Conflict, Expect, UpdateOptions, Version, Versioned,
};
pub use vv::{Causality, Sibling, Siblings, VersionVector};

#[doc(hidden)]
pub mod __internal {
    //! Test-only hooks; not part of the stable API.
    pub use crate::codec::{record_key, split_record_key};
}

/// The README's examples, compiled and run as doc-tests so they cannot drift from the code.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
