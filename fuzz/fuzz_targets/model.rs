//! Operation sequences decoded from fuzzer bytes (`Op::decode_all`: one byte selects the
//! operation, the next ones its parameters) run against a fresh store and the reference model of
//! `tests/model/mod.rs`, the same runner as the proptest test `model_records_match_reference`:
//! every outcome and, after every step, the observable state of every key must equal the model's,
//! and the claim/CAS invariants (`model::Watch`) must hold. The store lives in RocksDB's in-memory
//! environment (one per input, shared with its reopens), so an input costs no file system work;
//! the proptest test runs the same runner on disk.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/model/mod.rs"]
mod model;

/// Longest sequence per input: long enough for expiry, poison and reopen in one run, short enough
/// to keep an execution in the low milliseconds.
const MAX_OPS: usize = 128;

fuzz_target!(|data: &[u8]| {
    let ops = model::Op::decode_all(data, MAX_OPS);
    if !ops.is_empty() {
        model::run(ops, model::Backend::InMemory, &mut |_, _| {});
    }
});
