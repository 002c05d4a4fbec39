//! Operating idemdb (docs/operating.md): the spans of store operations and HTTP requests, the
//! metrics of a scripted workload read back through a recorder, `idemdb inspect` and `stats` on a
//! store another process holds open, a read-only store's refusals, and the `idemdb` command's
//! arguments (its `--help`, as docs/cli.md shows it, and its usage errors); and the repository's
//! own hygiene: the floor plan of `src/`, and comments and docs that name only files and module
//! paths that exist. One module per behaviour; one of them:
//! `cargo test --release --features http,postgres --test operating <module>`.
#[path = "../common/mod.rs"]
mod common;
#[cfg(feature = "http")]
#[path = "../common/http.rs"]
mod http_common;
mod spans;

mod cli_help_matches_docs_for_every_command;
mod comments_and_docs_name_only_what_exists;
mod floor_plan_imports_only_downward;
#[cfg(feature = "http")]
mod http_span_names_outcome_and_status_never_bytes;
mod inspect_lists_a_damaged_value_and_goes_on;
mod inspect_reads_every_kind_from_a_store_in_use;
mod metrics_count_every_outcome_of_a_workload;
mod read_only_store_refuses_every_write;
mod spans_carry_decisions_and_hashes_not_keys;

/// Taken by every test of this binary, so they run one at a time. `tracing` caches each
/// callsite's interest for the whole process: a test that runs store operations with no
/// subscriber while another test installs its own thread-local one can leave the store's
/// callsites cached as uninteresting for both (seen: the HTTP span test lost every claim span in
/// about half of the parallel runs beside the metrics, read-only or damaged-value test).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
