//! The PostgreSQL schema, as numbered migrations. Invariant: a migration, once released, never
//! changes; each has a way back (`down`); the applied versions are recorded in
//! `idemdb_migrations`, and applying runs in one transaction under an advisory lock, so instances
//! that open the store at the same moment apply each step exactly once.

/// One step of the schema.
pub(crate) struct Migration {
    pub(crate) version: i32,
    pub(crate) name: &'static str,
    pub(crate) up: &'static str,
    pub(crate) down: &'static str,
}

/// Every migration, in order. The schema version a build needs is the last one's.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "request records, fencing sequence, store id",
        up: "
        CREATE SEQUENCE idemdb_fence AS bigint;
        CREATE TABLE idemdb_meta (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            store_id bytea NOT NULL
        );
        INSERT INTO idemdb_meta (store_id)
            VALUES (decode(md5(random()::text || clock_timestamp()::text), 'hex'));
        CREATE TABLE idemdb_requests (
            ns smallint NOT NULL,
            tenant bytea NOT NULL,
            key bytea NOT NULL,
            fingerprint bytea NOT NULL,
            created_at bigint NOT NULL,
            expires_at bigint NOT NULL,
            fence bigint NOT NULL,
            attempts integer NOT NULL,
            takeovers integer NOT NULL,
            state smallint NOT NULL,
            lease_until bigint NOT NULL,
            taken_over boolean NOT NULL DEFAULT false,
            finished_at bigint,
            response_body bytea,
            response_meta text[],
            checkpoint_phase text,
            checkpoint_state bytea,
            PRIMARY KEY (ns, tenant, key)
        );
        CREATE INDEX idemdb_requests_expires_at ON idemdb_requests (expires_at);
    ",
        down: "
        DROP TABLE idemdb_requests;
        DROP TABLE idemdb_meta;
        DROP SEQUENCE idemdb_fence;
    ",
    },
    Migration {
        version: 2,
        name: "claim and holder functions: one small statement per path",
        up: FUNCTIONS,
        down: "
            DROP FUNCTION idemdb_claim(smallint, bytea, bytea, bytea, bigint, bigint, bigint);
            DROP FUNCTION idemdb_holder(smallint, bytea, bytea, bigint, bigint, smallint, bytea,
                text[], bigint, text);
        ",
    },
];

/// The claim, as a function the claim statement calls (one round trip): the key's row is read
/// first; a row that is live and not acquirable (another fingerprint, finished, or a live lease)
/// is the answer, read without a lock or a write; otherwise a missing row is inserted (`ON
/// CONFLICT DO NOTHING`) and an existing one is taken by an `UPDATE` whose `WHERE` states the
/// acquirable conditions again, evaluated by PostgreSQL on the row's newest version under its
/// lock, so of any number of concurrent claims exactly one acquires. `acquired` is `NULL` when
/// neither wrote (a concurrent claim inserted or changed the row after the read): the caller asks
/// again. "Now" is read once, at the start (the test clock if given). Each statement inside has
/// its own cached plan and only the path taken runs, which costs less than one statement holding
/// every path (measured: docs/benchmarks.md).
///
/// `idemdb_holder` is a holder's call (`p_op` 1 complete, 2 fail terminally, 3 release, 4 renew,
/// 5 checkpoint): one `UPDATE ... WHERE fence = p_fence AND state = pending AND not expired`;
/// `done_until` is the lease's end when it applied; when it changed nothing, the row is read to
/// say why (its state, its fence, whether it expired; all `NULL` if there is none).
const FUNCTIONS: &str = "
CREATE FUNCTION idemdb_claim(p_ns smallint, p_tenant bytea, p_key bytea, p_fp bytea,
    p_lease bigint, p_retention bigint, p_now bigint,
    OUT acquired boolean, OUT fence bigint, OUT attempts integer, OUT taken_over boolean,
    OUT lease_until bigint, OUT expires_at bigint, OUT checkpoint_phase text,
    OUT checkpoint_state bytea, OUT fingerprint bytea, OUT state smallint,
    OUT finished_at bigint, OUT response_body bytea, OUT response_meta text[], OUT now bigint)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    r idemdb_requests%ROWTYPE;
    found_row boolean;
BEGIN
    now := COALESCE(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    SELECT * INTO r FROM idemdb_requests q
    WHERE q.ns = p_ns AND q.tenant = p_tenant AND q.key = p_key;
    found_row := FOUND;
    IF found_row AND r.expires_at > now
       AND (r.fingerprint <> p_fp OR r.state IN (2, 3) OR (r.state = 0 AND r.lease_until > now))
    THEN
        acquired := false;
        fence := r.fence;
        attempts := r.attempts;
        taken_over := r.taken_over;
        lease_until := r.lease_until;
        expires_at := r.expires_at;
        fingerprint := r.fingerprint;
        state := r.state;
        finished_at := r.finished_at;
        response_body := r.response_body;
        response_meta := r.response_meta;
        RETURN;
    END IF;
    IF NOT found_row THEN
        INSERT INTO idemdb_requests AS q (ns, tenant, key, fingerprint, created_at, expires_at,
            fence, attempts, takeovers, state, lease_until, taken_over)
        VALUES (p_ns, p_tenant, p_key, p_fp, now, now + p_retention, nextval('idemdb_fence'), 1,
            0, 0, now + p_lease, false)
        ON CONFLICT DO NOTHING
        RETURNING q.fence, q.attempts, q.taken_over, q.lease_until, q.expires_at
        INTO fence, attempts, taken_over, lease_until, expires_at;
    ELSE
        UPDATE idemdb_requests q SET
            fingerprint = p_fp,
            created_at = CASE WHEN q.expires_at <= now THEN now ELSE q.created_at END,
            expires_at = CASE WHEN q.expires_at <= now THEN now + p_retention
                              ELSE GREATEST(q.expires_at, now + p_lease) END,
            fence = nextval('idemdb_fence'),
            attempts = CASE WHEN q.expires_at <= now THEN 1 ELSE q.attempts + 1 END,
            takeovers = CASE WHEN q.expires_at <= now THEN 0
                             ELSE q.takeovers + (q.state = 0)::int END,
            taken_over = q.expires_at > now AND q.state = 0,
            state = 0,
            lease_until = now + p_lease,
            finished_at = NULL,
            response_body = NULL,
            response_meta = NULL,
            checkpoint_phase = CASE WHEN q.expires_at <= now THEN NULL ELSE q.checkpoint_phase END,
            checkpoint_state = CASE WHEN q.expires_at <= now THEN NULL ELSE q.checkpoint_state END
        WHERE q.ns = p_ns AND q.tenant = p_tenant AND q.key = p_key
          AND (q.expires_at <= now
               OR (q.fingerprint = p_fp
                   AND (q.state = 1 OR (q.state = 0 AND q.lease_until <= now))))
        RETURNING q.fence, q.attempts, q.taken_over, q.lease_until, q.expires_at,
                  q.checkpoint_phase, q.checkpoint_state
        INTO fence, attempts, taken_over, lease_until, expires_at, checkpoint_phase,
             checkpoint_state;
    END IF;
    IF FOUND THEN
        acquired := true;
    END IF;
END
$fn$;

CREATE FUNCTION idemdb_holder(p_ns smallint, p_tenant bytea, p_key bytea, p_fence bigint,
    p_now bigint, p_op smallint, p_bytes bytea, p_meta text[], p_ms bigint, p_text text,
    OUT done_until bigint, OUT state smallint, OUT fence bigint, OUT expired boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    t bigint := COALESCE(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
BEGIN
    IF p_op = 1 THEN
        UPDATE idemdb_requests q SET state = 2, finished_at = t, response_body = p_bytes,
            response_meta = p_meta, checkpoint_phase = NULL, checkpoint_state = NULL
        WHERE q.ns = p_ns AND q.tenant = p_tenant AND q.key = p_key AND q.fence = p_fence
          AND q.state = 0 AND q.expires_at > t
        RETURNING q.lease_until INTO done_until;
    ELSIF p_op = 2 THEN
        UPDATE idemdb_requests q SET state = 3, finished_at = t, response_body = p_bytes,
            response_meta = p_meta, checkpoint_phase = NULL, checkpoint_state = NULL
        WHERE q.ns = p_ns AND q.tenant = p_tenant AND q.key = p_key AND q.fence = p_fence
          AND q.state = 0 AND q.expires_at > t
        RETURNING q.lease_until INTO done_until;
    ELSIF p_op = 3 THEN
        UPDATE idemdb_requests q SET state = 1
        WHERE q.ns = p_ns AND q.tenant = p_tenant AND q.key = p_key AND q.fence = p_fence
          AND q.state = 0 AND q.expires_at > t
        RETURNING q.lease_until INTO done_until;
    ELSIF p_op = 4 THEN
        UPDATE idemdb_requests q SET lease_until = t + p_ms,
            expires_at = GREATEST(q.expires_at, t + p_ms)
        WHERE q.ns = p_ns AND q.tenant = p_tenant AND q.key = p_key AND q.fence = p_fence
          AND q.state = 0 AND q.expires_at > t
        RETURNING q.lease_until INTO done_until;
    ELSIF p_op = 5 THEN
        UPDATE idemdb_requests q SET checkpoint_phase = p_text, checkpoint_state = p_bytes
        WHERE q.ns = p_ns AND q.tenant = p_tenant AND q.key = p_key AND q.fence = p_fence
          AND q.state = 0 AND q.expires_at > t
        RETURNING q.lease_until INTO done_until;
    END IF;
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT q.state, q.fence, q.expires_at <= t INTO state, fence, expired
    FROM idemdb_requests q WHERE q.ns = p_ns AND q.tenant = p_tenant AND q.key = p_key;
END
$fn$;
";

/// The schema version this build reads and writes.
pub(crate) fn current_version() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The bookkeeping table, created if missing before anything else.
pub(crate) const BOOKKEEPING: &str = "
    CREATE TABLE IF NOT EXISTS idemdb_migrations (
        version integer PRIMARY KEY,
        name text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
    )";

/// The advisory lock key under which migrations run (any constant: `idemdb` in ASCII).
pub(crate) const LOCK_KEY: i64 = 0x6964_656d_6462;
