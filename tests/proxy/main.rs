//! `idemdb proxy` end to end: the real binary (a child process) in front of a real upstream, a
//! payment service in Python with no idempotency of its own (`upstream.py`, a child process whose
//! every effect is a line in a file), reached by a plain HTTP/1.1 client over raw sockets
//! (`harness.rs`). The embedded store is a new directory per test; fleet mode uses the suite's
//! PostgreSQL (127.0.0.1:5432, database `test`; `IDEMDB_TEST_POSTGRES` overrides it), a schema per
//! test. Processes are killed (SIGKILL, SIGTERM) as the tests say; every child is SIGKILLed when
//! its test ends. A test that cannot start python3 or reach PostgreSQL fails, naming it.
//! One module per behaviour, named after what it proves (the binary needs feature `proxy`, which
//! the crate's dev-dependency on itself turns on; `upstream.py` needs python3 3.11, standard
//! library only). One of them:
//! `cargo test --release --features http,postgres --test proxy <module>`.
#![cfg(feature = "proxy")]

/// The module's `check(dir, store)` as two tests, `embedded` (a store directory under `dir`) and
/// `postgres` (a fresh schema named after the module).
macro_rules! on_both_stores {
    () => {
        #[test]
        fn embedded() {
            let dir = tempfile::tempdir().unwrap();
            check(
                dir.path(),
                crate::harness::Store::Db(dir.path().join("store")),
            );
        }

        #[test]
        fn postgres() {
            let schema = crate::harness::Schema::fresh(module_path!());
            let dir = tempfile::tempdir().unwrap();
            check(dir.path(), crate::harness::Store::Postgres(schema.url()));
        }
    };
}

mod clients;
mod harness;

mod a_claim_whose_answer_was_lost_is_sent_once;
mod a_duplicate_on_another_proxy_waits_for_the_first_answer;
mod a_duplicate_waiting_on_a_killed_proxy_is_answered_when_its_lease_ends;
mod a_killed_proxy_leaves_no_key_stuck_past_its_lease;
mod a_principal_is_only_what_was_verified;
mod a_response_too_large_to_store_never_runs_twice;
mod bad_input_gets_a_clear_answer;
mod connections_over_the_limit_wait_their_turn;
mod database_cut_fails_closed;
mod every_spelling_of_a_keyed_path_is_keyed;
mod health_and_metrics_are_answered_by_the_proxy;
mod inventory_lists_every_route;
mod retries_through_an_embedded_proxy_run_each_payment_once;
mod retries_through_two_postgres_proxies_run_each_payment_once;
mod routes_say_where_a_key_is_required;
mod sigterm_lets_in_flight_requests_finish;
mod upstream_errors_release_the_key_and_unknown_outcomes_stay;
mod upstream_killed_mid_run_never_runs_a_payment_twice;
mod webhook_secret_files_are_read_again_when_they_change;
mod webhooks_through_proxies_are_handled_once;
