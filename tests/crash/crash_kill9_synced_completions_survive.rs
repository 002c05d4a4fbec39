//! kill -9 durability, synced: every completion acknowledged by a child process in synced
//! durability is present and intact after the child is SIGKILLed at a random moment and the
//! store reopened; fences never go backwards; pending records can be taken over. Repeated
//! `IDEMDB_CRASH_ITERATIONS` times (default 100). The workload: `tests/crash/completions_crash.rs`.
use crate::completions_crash;

use idemdb::Durability;

#[test]
#[ignore = "the child side of the crash test; run by the parent test"]
fn crash_child() {
    completions_crash::child(Durability::Synced);
}

#[test]
fn acknowledged_completions_survive_sigkill() {
    completions_crash::run(
        Durability::Synced,
        "crash_kill9_synced_completions_survive::crash_child",
    );
}
