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
/// Inserts a new pending row, or, on conflict, acquires the existing row if it expired
/// (replaced as new), was released, or its lease ran out with the same fingerprint (a takeover).
/// The fence is taken from the sequence while the row is locked. Returns the acquired row, or
/// (nothing acquired) the row as the statement's snapshot saw it. A row the snapshot shows
/// live and not acquirable is answered without trying the insert (a replay reads, never locks).
pub(crate) const CLAIM: &str = concat!(
    now_cte!("$7"),
    ", seen AS (
    SELECT r.* FROM idemdb_requests r WHERE r.ns = $1 AND r.tenant = $2 AND r.key = $3
), acquired AS (
    INSERT INTO idemdb_requests AS r
        (ns, tenant, key, fingerprint, created_at, expires_at, fence, attempts, takeovers,
         state, lease_until, taken_over)
    SELECT $1::smallint, $2::bytea, $3::bytea, $4::bytea, now.t, now.t + $6::bigint,
           nextval('idemdb_fence'), 1, 0, 0, now.t + $5::bigint, false
    FROM now
    -- A row that the snapshot shows live and not acquirable (another fingerprint, finished, or
    -- leased) is answered from the snapshot: no insert is tried, so a replay takes no lock.
    WHERE NOT EXISTS (
        SELECT 1 FROM seen s
        WHERE s.expires_at > now.t
          AND (s.fingerprint <> $4::bytea OR s.state IN (2, 3)
               OR (s.state = 0 AND s.lease_until > now.t)))
    ON CONFLICT (ns, tenant, key) DO UPDATE SET
        fingerprint = CASE WHEN r.expires_at <= excluded.created_at
                           THEN excluded.fingerprint ELSE r.fingerprint END,
        created_at = CASE WHEN r.expires_at <= excluded.created_at
                          THEN excluded.created_at ELSE r.created_at END,
        expires_at = CASE WHEN r.expires_at <= excluded.created_at
                          THEN excluded.expires_at
                          ELSE GREATEST(r.expires_at, excluded.lease_until) END,
        fence = nextval('idemdb_fence'),
        attempts = CASE WHEN r.expires_at <= excluded.created_at THEN 1 ELSE r.attempts + 1 END,
        takeovers = CASE WHEN r.expires_at <= excluded.created_at THEN 0
                         ELSE r.takeovers + (r.state = 0)::int END,
        taken_over = r.expires_at > excluded.created_at AND r.state = 0,
        state = 0,
        lease_until = excluded.lease_until,
        finished_at = NULL,
        response_body = NULL,
        response_meta = NULL,
        checkpoint_phase = CASE WHEN r.expires_at <= excluded.created_at
                                THEN NULL ELSE r.checkpoint_phase END,
        checkpoint_state = CASE WHEN r.expires_at <= excluded.created_at
                                THEN NULL ELSE r.checkpoint_state END
    WHERE r.expires_at <= excluded.created_at
       OR (r.fingerprint = excluded.fingerprint
           AND (r.state = 1 OR (r.state = 0 AND r.lease_until <= excluded.created_at)))
    RETURNING r.fence, r.attempts, r.taken_over, r.lease_until, r.expires_at,
              r.checkpoint_phase, r.checkpoint_state
)
SELECT true AS acquired, a.fence, a.attempts, a.taken_over, a.lease_until, a.expires_at,
       a.checkpoint_phase, a.checkpoint_state, NULL::bytea AS fingerprint,
       NULL::smallint AS state, NULL::bigint AS finished_at, NULL::bytea AS response_body,
       NULL::text[] AS response_meta, (SELECT t FROM now) AS now
FROM acquired a
UNION ALL
SELECT false, s.fence, s.attempts, s.taken_over, s.lease_until, s.expires_at,
       NULL, NULL, s.fingerprint, s.state, s.finished_at, s.response_body, s.response_meta, now.t
FROM now, seen s
WHERE NOT EXISTS (SELECT 1 FROM acquired)"
);

/// The shape of every holder's call: $1 ns, $2 tenant, $3 key, $4 fence, $5 test clock, then
/// the change's own parameters. The update applies only to the pending row carrying the lease's
/// fence that has not expired; `done_until` is the lease's end when it applied, and otherwise
/// the row as the snapshot saw it tells why not (gone, finished, released, taken over); that
/// second read is skipped by a one-time filter when the update applied.
macro_rules! holder {
    ($set:literal) => {
        concat!(
            now_cte!("$5"),
            ", done AS (
    UPDATE idemdb_requests r SET ",
            $set,
            "
    FROM now
    WHERE r.ns = $1 AND r.tenant = $2 AND r.key = $3 AND r.fence = $4 AND r.state = 0
      AND r.expires_at > now.t
    RETURNING r.lease_until
)
SELECT d.lease_until AS done_until, NULL::smallint AS state, NULL::bigint AS fence,
       NULL::boolean AS expired
FROM done d
UNION ALL
SELECT NULL, c.state, c.fence, c.expires_at <= now.t
FROM now
LEFT JOIN idemdb_requests c ON c.ns = $1 AND c.tenant = $2 AND c.key = $3
WHERE NOT EXISTS (SELECT 1 FROM done)"
        )
    };
}

/// $6 response body, $7 response metadata (key, value, key, value...).
pub(crate) const COMPLETE: &str = holder!(
    "state = 2, finished_at = now.t, response_body = $6, response_meta = $7,
        checkpoint_phase = NULL, checkpoint_state = NULL"
);

/// $6 response body, $7 response metadata.
pub(crate) const FAIL_TERMINAL: &str = holder!(
    "state = 3, finished_at = now.t, response_body = $6, response_meta = $7,
        checkpoint_phase = NULL, checkpoint_state = NULL"
);

pub(crate) const RELEASE: &str = holder!("state = 1");

/// $6 the renewal in milliseconds: the lease ends that long after now, and the record lives at
/// least as long.
pub(crate) const RENEW: &str =
    holder!("lease_until = now.t + $6, expires_at = GREATEST(r.expires_at, now.t + $6)");

/// $6 phase, $7 state.
pub(crate) const CHECKPOINT: &str = holder!("checkpoint_phase = $6, checkpoint_state = $7");

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
