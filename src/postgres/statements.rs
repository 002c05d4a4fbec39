//! The SQL behind each operation (see `docs/design.md`, "PostgreSQL backend", for why each one
//! is atomic). Invariant: each operation is one statement; its time is read once, at its start,
//! from the database's clock (`$now` is `NULL` except in the conformance tests, whose manual
//! clock replaces it).

/// The statement's "now", in milliseconds: the database's clock unless a test clock is given.
macro_rules! now_cte {
    ($p:literal) => {
        concat!(
            "WITH now AS (SELECT COALESCE(",
            $p,
            "::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS t)"
        )
    };
}

pub(crate) const NOW: &str = concat!(now_cte!("$1"), " SELECT t FROM now");

/// $1 ns, $2 tenant, $3 key, $4 fingerprint, $5 lease ms, $6 retention ms, $7 test clock.
/// The claim is the `idemdb_claim` function of migration 2 (see `migrations.rs` for how it
/// decides): one statement, one round trip. Its row: `acquired` (`NULL`: nothing decided, ask
/// again), the acquired lease's columns, or the row as it was read.
pub(crate) const CLAIM: &str = "SELECT * FROM idemdb_claim($1::smallint, $2::bytea, $3::bytea, \
    $4::bytea, $5::bigint, $6::bigint, $7::bigint)";

/// A holder's call: the `idemdb_holder` function of migration 2. $1 ns, $2 tenant, $3 key, $4
/// fence, $5 test clock, $6 the operation (1 complete, 2 fail terminally, 3 release, 4 renew,
/// 5 checkpoint), $7 the response body or checkpoint state, $8 the response metadata (key,
/// value, key, value...), $9 the renewal in milliseconds, $10 the checkpoint's phase. Its row:
/// `done_until` (the lease's end) if the update applied to the pending row carrying the lease's
/// fence that had not expired; otherwise the row's `state`, `fence` and `expired`, which say why
/// not (gone, finished, released, taken over).
pub(crate) const HOLDER: &str = "SELECT * FROM idemdb_holder($1::smallint, $2::bytea, $3::bytea, \
    $4::bigint, $5::bigint, $6::smallint, $7::bytea, $8::text[], $9::bigint, $10::text)";

/// $1 ns, $2 tenant, $3 key, $4 test clock: the live row.
pub(crate) const GET: &str = concat!(
    now_cte!("$4"),
    " SELECT r.* FROM now, idemdb_requests r
WHERE r.ns = $1 AND r.tenant = $2 AND r.key = $3 AND r.expires_at > now.t"
);

/// $1 ns, $2 tenant, $3 key.
pub(crate) const FORGET: &str =
    "DELETE FROM idemdb_requests WHERE ns = $1 AND tenant = $2 AND key = $3";

/// $1 batch size, $2 test clock: deletes up to $1 expired rows, oldest expiry first, skipping
/// rows locked by others (no long locks, no waiting on a claim in flight).
pub(crate) const SWEEP: &str = concat!(
    now_cte!("$2"),
    ", doomed AS (
    SELECT r.ns, r.tenant, r.key FROM idemdb_requests r, now
    WHERE r.expires_at <= now.t
    ORDER BY r.expires_at
    LIMIT $1
    FOR UPDATE OF r SKIP LOCKED
)
DELETE FROM idemdb_requests r USING doomed d
WHERE r.ns = d.ns AND r.tenant = d.tenant AND r.key = d.key"
);
