//! Operation sequences decoded from fuzzer bytes (`Op::decode_all`: one byte selects the
//! operation, the next ones its parameters) run against the store and the reference model of
//! `tests/model/mod.rs`, the same runner as the proptest test `model_records_match_reference`:
//! every outcome and, after every step, the observable state of every key must equal the model's,
//! and the claim/CAS invariants (`model::Watch`) must hold.
//!
//! One store serves every input of the process: it lives in RocksDB's in-memory environment and
//! is emptied before each input (`idemdb::__internal::reset`), which puts it back in the state of
//! a new store (no data, the first fencing token, the time of a new store). Opening a store per
//! input cost several times more than running the input. A `Reopen` step still closes and reopens
//! it for real. The proptest test runs the same runner on a new store on disk per case.
#![no_main]

use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/model/mod.rs"]
mod model;

/// Longest sequence per input: long enough for expiry, poison and reopen in one run (a lease
/// runs out after one or two clock steps, a message is poisoned at its third failure), short
/// enough to keep an execution around a millisecond.
const MAX_OPS: usize = 48;

static SESSION: Mutex<Option<model::Session>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let ops = model::Op::decode_all(data, MAX_OPS);
    if ops.is_empty() {
        return;
    }
    let mut session = SESSION.lock().unwrap_or_else(|p| p.into_inner());
    let session = session.get_or_insert_with(model::Session::in_memory);
    model::run(ops, model::Backend::Reused(session), &mut |_, _| {});
});
