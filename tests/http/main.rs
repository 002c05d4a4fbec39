//! The HTTP layer end to end (feature `http`): a real axum server on 127.0.0.1 behind the layer and
//! a real HTTP/1.1 client, `common` (`tests/common/http.rs`). One module per behaviour, named after
//! what it checks (each module was its own test binary). One of them:
//! `cargo test --release --features http --test http <module>`.
#![cfg(feature = "http")]
#[path = "../common/http.rs"]
mod common;

mod http_changed_body_gets_422_and_record_untouched;
mod http_client_gone_during_claim_never_leaves_key_stuck;
mod http_compressed_response_replays_with_its_encoding;
mod http_concurrent_duplicates_run_handler_once;
mod http_disconnect_or_panic_never_leaves_key_stuck;
mod http_duplicate_while_running_gets_409_with_retry_after;
mod http_lease_is_renewed_while_handler_runs;
mod http_long_principals_are_hashed_not_shared;
mod http_missing_or_malformed_key_gets_400;
mod http_non_ascii_header_values_are_left_out_of_replays;
mod http_oversized_response_runs_once_and_replays_without_its_body;
mod http_principal_spelled_like_a_hash_stays_apart;
mod http_principals_never_share_keys;
mod http_problems_link_to_their_documentation;
mod http_retry_after_completion_replays_stored_response;
mod http_retry_after_follows_how_long_the_route_takes;
mod http_server_error_releases_key_not_replayed;
mod http_wait_for_duplicate_is_bounded;
