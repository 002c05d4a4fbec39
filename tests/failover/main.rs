//! The failover suite: fleet mode (`AsyncStore` on PostgreSQL) through real failovers of a
//! primary with a streaming standby (throwaway clusters on loopback made by `scripts/pg-lab`,
//! one pair per test, stopped by a guard whatever happens). It proves that a failover never runs
//! an operation without an `Acquired` claim and never twice: under synchronous replication no
//! acknowledged result is lost and every lease from before keeps working; under asynchronous
//! replication what is lost is only what the standby never received, and no lease from before
//! the failover is ever accepted on a record claimed after it (the fencing token carries the
//! timeline); the pool heals by itself when the primary is demoted or frozen, failing calls
//! closed (`Error::Unavailable`) meanwhile, never hanging. Every wait is bounded and says what it
//! waited for; measured recovery times are printed (`--nocapture`), never asserted.
//!
//! Must run as root (pg-lab runs the servers as `postgres`). Sizes for a full run:
//! `IDEMDB_FAILOVER_PAYMENTS` (default 300; full run 3000), `IDEMDB_FAILOVER_KEYS` (default 20),
//! `IDEMDB_FAILOVER_CALLS` (default 50).

mod lab;
/// The TCP relay the tests put between a store and a server.
#[path = "../common/relay.rs"]
mod relay;

mod a_claim_lost_in_a_failover_is_released_not_taken_over;
mod a_role_that_does_not_flush_never_repeats_a_token;
mod a_server_crash_loses_buffered_claims_never_a_token;
mod a_standby_url_is_unavailable_not_broken;
mod a_token_block_from_before_a_failover_is_never_used_after;
mod asynchronous_failover_never_accepts_a_lease_from_before;
mod completions_wait_for_the_standby_when_asked;
mod pool_heals_after_the_primary_freezes;
mod pool_heals_after_the_primary_is_demoted;
mod synchronous_failover_loses_no_acknowledged_payment;
