//! kill -9 tests. Each parent test re-executes this test binary to run its ignored child test
//! (`common::spawn_child`, by the child's full name: `<module>::<test>`), SIGKILLs the child at
//! random moments, reopens the store and checks what survived. One module per behaviour (each
//! module was its own test binary); `completions_crash` is the workload shared by the synced and
//! buffered completion tests. One of them:
//! `cargo test --release --features http --test crash <module>`.
#[path = "../common/mod.rs"]
mod common;
mod completions_crash;

mod crash_kill9_buffered_completions_survive;
mod crash_kill9_commit_is_atomic;
mod crash_kill9_consumer_attempts_survive;
mod crash_kill9_consumer_ledger_exact;
mod crash_kill9_grpc_calls_run_once;
mod crash_kill9_synced_completions_survive;
