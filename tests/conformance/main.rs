//! The conformance suite: the request-record, entity, consumer, reservation, offset, commit and
//! causal-write behaviours, written once against the async API
//! (`AsyncStore`) and run against both backends: the embedded store (a new directory per test)
//! and PostgreSQL (127.0.0.1:5432, database `test`, user `postgres`; `IDEMDB_TEST_POSTGRES`
//! overrides the URL), each test in its own schema, so tests run in parallel without meeting.
//! Every module checks one behaviour; its `embedded` and `postgres` tests run the same check.
//! Behaviours of PostgreSQL alone (its schema, its SQL, its connections and clocks) are in
//! `tests/fleet/`, which shares this harness.
//! Both stores run on a manual clock (on PostgreSQL through a test-only hook that replaces the
//! database's clock in every statement), so expiry and takeover are exact. A test that cannot
//! reach PostgreSQL fails, naming it.

#[macro_use]
mod harness;
#[path = "../common/grpc.rs"]
mod grpc_common;
#[path = "../common/http.rs"]
mod http_common;
#[allow(dead_code)] // assert_absent is the operating tests'
#[path = "../operating/spans.rs"]
mod spans;
#[path = "../common/webhooks.rs"]
mod webhooks;

mod application_transaction_commits_with_the_record;
mod bad_input_is_refused_and_changes_nothing;
mod causal_writes_keep_every_concurrent_value;
mod claims_after_a_run_of_replays_answer_alike;
mod coalesced_calls_answer_as_one_at_a_time;
mod commits_apply_everything_or_nothing;
mod concurrent_claims_have_exactly_one_winner;
mod concurrent_entity_updates_lose_nothing;
mod consumer_messages_are_processed_once_then_poisoned;
mod counters_count_commits_and_forgotten_messages_alike;
mod duplicates_wait_for_the_first_anywhere_in_the_fleet;
mod entities_compare_and_swap_and_never_reuse_versions;
mod expired_lease_is_taken_over_and_stale_holder_refused;
mod fencing_tokens_increase_for_every_key;
mod first_claim_acquires_and_retries_replay;
mod forgotten_record_is_gone_for_its_holder;
mod grpc_methods_run_once_on_both_backends;
mod http_layer_runs_alike_on_both_backends;
mod offset_windows_join_marks_in_any_order;
mod one_callers_bytes_never_fail_another;
mod records_expire_and_are_swept;
mod records_match_the_model;
mod renewal_extends_the_lease_and_checkpoint_reaches_the_next_holder;
mod renewed_lease_keeps_its_reservation_through_a_sweep;
mod retryable_failure_releases_and_terminal_failure_replays;
mod spans_name_the_same_decisions_alike;
mod unique_values_have_one_live_owner;
mod webhook_events_are_handled_once;
mod webhook_secrets_rotate_without_a_restart;
