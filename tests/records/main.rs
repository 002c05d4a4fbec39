//! Request records: claims, completions, failures, checkpoints, expiry and the sweep, leases and
//! fencing tokens, tenants, bad input of the records API, corruption, a torn WAL tail, reopen.
//! One module per behaviour, named after what it checks (each module was its own test binary:
//! grouped, RocksDB is linked into a few test binaries instead of one per file). One of them:
//! `cargo test --release --features http --test records <module>`.
#[path = "../common/mod.rs"]
mod common;

mod bad_input_is_rejected_and_changes_nothing;
mod checkpoint_reaches_next_acquirer;
mod clock_going_backwards_changes_nothing;
mod completed_records_survive_reopen;
mod concurrent_claims_have_exactly_one_winner;
mod corrupted_value_is_reported_not_replayed;
mod ended_lease_cannot_end_again;
mod execute_waits_for_a_running_duplicate;
mod expired_key_is_claimable_and_physically_removed;
mod expired_lease_is_taken_over_and_stale_complete_refused;
mod fencing_tokens_increase_across_reopen;
mod fingerprint_mismatch_leaves_record_untouched;
mod foreign_lease_and_foreign_directory_are_refused;
mod pending_in_memory_until_finished;
mod replay_with_borrows_the_stored_result;
mod retryable_failure_releases_and_terminal_failure_replays;
mod same_request_twice_replays_first_response;
mod sweep_never_deletes_an_extended_record;
mod tenants_are_independent;
mod truncated_wal_tail_recovers_a_prefix;
