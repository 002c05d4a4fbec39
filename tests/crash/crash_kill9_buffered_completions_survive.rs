//! kill -9 durability, buffered: the promise of `Durability::Buffered` (the batch reaches the OS
//! before the call returns, so it survives `kill -9` of the process, not power loss) checked the
//! same way as the synced one: every completion acknowledged by a child process is present and
//! intact after a SIGKILL at a random moment. The workload: `tests/crash/completions_crash.rs`.
use crate::completions_crash;

use idemdb::Durability;

#[test]
#[ignore = "the child side of the crash test; run by the parent test"]
fn crash_child() {
    completions_crash::child(Durability::Buffered);
}

#[test]
fn acknowledged_completions_survive_sigkill() {
    completions_crash::run(
        Durability::Buffered,
        "crash_kill9_buffered_completions_survive::crash_child",
    );
}
