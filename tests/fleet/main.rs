//! Fleet mode's own behaviours: what only a store on PostgreSQL has, so no embedded twin runs
//! beside it (the conformance suite, `tests/conformance/`, holds every behaviour both backends
//! have): the schema's migrations up and down, the SQL that restates the claim and holder rules,
//! the background sweeper, the sweep's walk over the table's pages and a lap left by a lost
//! sweeper, the local replay tier, instance clocks skewed against the database's,
//! a lost listening connection, connections terminated under load, the HTTP layer while the
//! database is away, and the `idemdb` operator commands on a schema. Each test is named
//! `<module>::postgres` and runs in its own schema on the conformance suite's server
//! (127.0.0.1:5432, database `test`, user `postgres`; `IDEMDB_TEST_POSTGRES` overrides the URL),
//! through the conformance suite's harness, so `scripts/test` and `scripts/fleet-production` run
//! them with the suite's PostgreSQL half (`--test conformance --test fleet postgres`). A test that
//! cannot reach PostgreSQL fails, naming it. One of them:
//! `cargo test --release --features http,postgres --test fleet <module>`.

// Shared with the conformance suite; this binary opens only PostgreSQL stores and never uses
// `on_both_backends!`.
#[allow(dead_code, unused_macros)]
#[path = "../conformance/harness.rs"]
mod harness;
#[path = "../common/http.rs"]
mod http_common;

mod a_sweep_lap_left_by_a_lost_sweeper_is_taken_over;
mod cli_reaches_a_postgres_store;
mod database_faults_never_run_an_effect_twice;
mod expired_rows_are_swept_in_the_background;
mod http_answers_503_while_the_database_is_down;
mod replays_are_served_from_the_local_tier;
mod schema_migrates_up_and_down;
mod skewed_instance_clocks_change_nothing;
mod the_claim_and_holder_rules_are_the_sql_s;
mod the_sweep_walks_every_page_from_a_shared_cursor;
mod waiting_claims_survive_a_lost_listening_connection;
