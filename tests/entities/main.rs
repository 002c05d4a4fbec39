//! Everything beside request records: versioned entities and compare-and-swap, multi-key commits,
//! causal writes and version vectors, offsets and watermarks, idempotent consumers, unique
//! reservations, and bad input of those. One module per behaviour, named after what it checks
//! (each module was its own test binary). One of them:
//! `cargo test --release --features http --test entities <module>`.
#[path = "../common/mod.rs"]
mod common;

mod bad_input_on_entities_consumers_and_reservations;
mod cas_conflict_returns_current_version_and_value;
mod causal_writes_keep_concurrent_siblings;
mod consumer_stress_every_effect_exactly_once;
mod counter_updates_are_never_lost;
mod deleted_versions_are_never_reused;
mod multi_key_commit_is_all_or_nothing;
mod offset_u64_max_stays_processed;
mod offset_watermarks_match_model;
mod poisoned_message_is_not_retried;
mod replica_vector_merge_same_at_read_and_after_compaction;
mod unique_reservation_race_and_binding;
mod version_vector_laws;
