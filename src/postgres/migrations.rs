//! The PostgreSQL schema, as numbered migrations. Invariant: a migration, once released, never
//! changes; each has a way back (`down`); the applied versions are recorded in
//! `idemdb_migrations`, and applying runs in one transaction under an advisory lock, so instances
//! that open the store at the same moment apply each step exactly once.

use crate::config::Config;
use crate::error::{Error, Result};

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
    Migration {
        version: 3,
        name: "versioned entities, unique reservations, offset windows, causal entities",
        up: ENTITIES,
        down: "
            DROP TABLE idemdb_causal;
            DROP FUNCTION idemdb_join_offsets(bytea, bytea, integer, text, text, integer);
            DROP TABLE idemdb_offsets;
            DROP FUNCTION idemdb_release_reservation(bytea, bytea, bytea, bigint);
            DROP FUNCTION idemdb_reserve(bytea, bytea, bytea, smallint, bytea, bytea, bigint,
                bigint);
            DROP FUNCTION idemdb_bound_live(smallint, bytea, bytea, bigint, bigint);
            DROP TABLE idemdb_unique;
            DROP FUNCTION idemdb_put_entity(bytea, bytea, smallint, bigint, bytea, boolean);
            DROP TABLE idemdb_entities;
        ",
    },
    Migration {
        version: 4,
        name: "fencing tokens carry the server's timeline (safe across a failover)",
        up: EPOCH_FENCE,
        down: EPOCH_FENCE_DOWN,
    },
    Migration {
        version: 5,
        name: "coalesced lease ends: one function call for many, planned once per connection",
        up: END_LEASES,
        down: "
            DROP FUNCTION idemdb_end_leases(smallint[], bytea[], bytea[], bigint[], smallint[],
                bytea[], text[], integer[], integer[], bigint);
        ",
    },
    Migration {
        version: 6,
        name: "fleet-wide waits: a waiting flag, and the trigger that wakes the waiters",
        up: WAITS,
        down: "
            DROP TRIGGER idemdb_requests_wake ON idemdb_requests;
            DROP TRIGGER idemdb_requests_wake_deleted ON idemdb_requests;
            DROP FUNCTION idemdb_wake();
            DROP FUNCTION idemdb_wait_channel();
            ALTER TABLE idemdb_requests DROP COLUMN waiting;
        ",
    },
    Migration {
        version: 7,
        name: "claim nonces: a claim whose answer was lost is released by its caller",
        up: CLAIM_NONCE,
        down: CLAIM_NONCE_DOWN,
    },
];

/// Fleet-wide waits (`waits.rs`). `waiting` is set on a pending row by a claim that waits for
/// its lease to end (`statements::MARK_WAITING`); the row's next change that ends that lease
/// (a completion, failure or release: `state` leaves 0; a takeover: a new `fence`) or deletes it
/// sends one notification on the schema's channel (`idemdb_wait_channel()`), whose payload
/// names the key, and clears the flag in the same change. It is sent by the trigger, in the
/// statement that ends the lease, and delivered when that statement's transaction commits. A
/// row nobody waits for sends nothing: the trigger's `WHEN` is false, and the hot path pays no
/// notification (each one takes the database's notification lock at commit).
const WAITS: &str = "
ALTER TABLE idemdb_requests ADD COLUMN waiting boolean NOT NULL DEFAULT false;

CREATE FUNCTION idemdb_wait_channel() RETURNS text
LANGUAGE sql STABLE AS $fn$
    SELECT 'idemdb_wait_' || left(md5(n.nspname), 20)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = 'idemdb_requests'::regclass
$fn$;

CREATE FUNCTION idemdb_wake() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify('idemdb_wait_' || left(md5(TG_TABLE_SCHEMA), 20),
        left(OLD.ns::text || ':' || encode(OLD.tenant, 'hex') || ':' || encode(OLD.key, 'hex'),
             7000));
    IF TG_OP = 'UPDATE' THEN
        NEW.waiting := false;
        RETURN NEW;
    END IF;
    RETURN OLD;
END
$fn$;

CREATE TRIGGER idemdb_requests_wake BEFORE UPDATE ON idemdb_requests FOR EACH ROW
    WHEN (OLD.waiting AND (NEW.state <> 0 OR NEW.fence <> OLD.fence))
    EXECUTE FUNCTION idemdb_wake();

CREATE TRIGGER idemdb_requests_wake_deleted BEFORE DELETE ON idemdb_requests FOR EACH ROW
    WHEN (OLD.waiting)
    EXECUTE FUNCTION idemdb_wake();
";

/// Versioned entities. A row is an entity's newest version: `value` `NULL` is a tombstone, which
/// keeps the version so that a re-created entity continues from it (a version is never reused).
///
/// `idemdb_put_entity` is a conditional write, decided under the row's lock in one call:
/// `p_expect` 0 any, 1 absent (no row, or a tombstone), 2 exactly version `p_version` of a live
/// entity; `p_delete` writes a tombstone instead of `p_value`. The row is read `FOR UPDATE`; a
/// missing row is inserted (`ON CONFLICT DO NOTHING`; when a concurrent call inserted it first,
/// the loop reads that row under its lock and decides again). `applied` true: `version` is the
/// version written (`NULL`: a delete that found nothing live, which writes nothing). `applied`
/// false: the condition did not hold, and `version`, `value` are the live entity as read under
/// the lock (`NULL`: absent or deleted).
///
/// `idemdb_unique` holds unique reservations: `(index_name, value)` (the value's composite
/// encoding) is reserved by a plain `owner`, or bound to a lease (`bound_*`: the request row's
/// namespace, tenant, key and the lease's fence; `owner` empty). A row is live when it is plain,
/// or when its lease is: the request row carries that fence, is pending, and neither its lease
/// nor its retention ran out (`idemdb_bound_live`), so a reservation whose operation completed,
/// failed, was released or taken over is free again without anyone deleting it (the next
/// reservation overwrites it). `idemdb_reserve` decides under the reservation row's lock: a live
/// reservation of another owner is `taken` (outcome 1, with its owner); otherwise the row is
/// written (outcome 0). Bound to a lease, the lease's request row is first read `FOR SHARE`
/// (a completion or takeover waits until the reservation commits) and must be held with that
/// fence (outcome 2 otherwise, with the row's state, fence and whether it expired, all `NULL`
/// when it is gone). Owners are compared as on the embedded store: plain by their bytes, bound by
/// the lease's key whatever the fence. `idemdb_release_reservation` deletes a live plain
/// reservation of `p_owner` (0 released, 1 another owner's, with it, 2 none live).
///
/// `idemdb_offsets` holds a partition's processed offsets as the embedded store's window: `next`
/// (every offset below it is processed) and `above` (the processed offsets at or above it,
/// ascending), `numeric` because offsets are unsigned 64-bit. `idemdb_join_offsets` joins a
/// watermark (`p_next`) and an offset (`p_add`, or `NULL`) into the window under the row's lock
/// and moves `next` past offsets that became contiguous; with `p_limit`, a mark that would leave
/// more than that many offsets above `next` writes nothing and answers `applied` false. Offsets
/// travel as text (the client has no `numeric` type).
///
/// `idemdb_causal` holds causal entities (`kind` 0) and replica version vectors (`kind` 1) in
/// the embedded store's sealed encoding; a change is computed by the library from the row read
/// `FOR UPDATE` in one transaction (an empty row, `value` `NULL`, is inserted first when there
/// is none, so there is always a row to lock).
const ENTITIES: &str = "
CREATE TABLE idemdb_entities (
    tenant bytea NOT NULL,
    id bytea NOT NULL,
    version bigint NOT NULL,
    value bytea,
    PRIMARY KEY (tenant, id)
);

CREATE FUNCTION idemdb_put_entity(p_tenant bytea, p_id bytea, p_expect smallint,
    p_version bigint, p_value bytea, p_delete boolean,
    OUT applied boolean, OUT version bigint, OUT value bytea)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    cur_version bigint;
    cur_value bytea;
BEGIN
    LOOP
        SELECT e.version, e.value INTO cur_version, cur_value FROM idemdb_entities e
        WHERE e.tenant = p_tenant AND e.id = p_id FOR UPDATE;
        EXIT WHEN FOUND;
        IF p_expect = 2 THEN
            applied := false;
            RETURN;
        END IF;
        IF p_delete THEN
            applied := true;
            RETURN;
        END IF;
        INSERT INTO idemdb_entities AS e (tenant, id, version, value)
        VALUES (p_tenant, p_id, 1, p_value)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            applied := true;
            version := 1;
            RETURN;
        END IF;
    END LOOP;
    IF (p_expect = 1 AND cur_value IS NOT NULL)
       OR (p_expect = 2 AND (cur_value IS NULL OR cur_version <> p_version)) THEN
        applied := false;
        IF cur_value IS NOT NULL THEN
            version := cur_version;
            value := cur_value;
        END IF;
        RETURN;
    END IF;
    applied := true;
    IF p_delete AND cur_value IS NULL THEN
        RETURN;
    END IF;
    UPDATE idemdb_entities e
    SET version = e.version + 1, value = CASE WHEN p_delete THEN NULL ELSE p_value END
    WHERE e.tenant = p_tenant AND e.id = p_id
    RETURNING e.version INTO version;
END
$fn$;

CREATE TABLE idemdb_unique (
    index_name bytea NOT NULL,
    value bytea NOT NULL,
    owner bytea NOT NULL,
    bound_ns smallint,
    bound_tenant bytea,
    bound_key bytea,
    bound_fence bigint,
    PRIMARY KEY (index_name, value)
);

CREATE FUNCTION idemdb_bound_live(p_ns smallint, p_tenant bytea, p_key bytea, p_fence bigint,
    p_now bigint) RETURNS boolean
LANGUAGE sql STABLE AS $fn$
    SELECT p_fence IS NULL OR EXISTS (
        SELECT 1 FROM idemdb_requests q
        WHERE q.ns = p_ns AND q.tenant = p_tenant AND q.key = p_key AND q.fence = p_fence
          AND q.state = 0 AND q.lease_until > p_now AND q.expires_at > p_now)
$fn$;

CREATE FUNCTION idemdb_reserve(p_index bytea, p_value bytea, p_owner bytea, p_ns smallint,
    p_tenant bytea, p_key bytea, p_fence bigint, p_now bigint,
    OUT outcome smallint, OUT owner bytea, OUT state smallint, OUT fence bigint,
    OUT expired boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    t bigint := COALESCE(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    q idemdb_requests%ROWTYPE;
    u idemdb_unique%ROWTYPE;
BEGIN
    IF p_fence IS NOT NULL THEN
        SELECT * INTO q FROM idemdb_requests r
        WHERE r.ns = p_ns AND r.tenant = p_tenant AND r.key = p_key FOR SHARE;
        IF NOT FOUND OR q.expires_at <= t OR q.state <> 0 OR q.fence <> p_fence THEN
            outcome := 2;
            IF FOUND THEN
                state := q.state;
                fence := q.fence;
                expired := q.expires_at <= t;
            END IF;
            RETURN;
        END IF;
    END IF;
    LOOP
        SELECT * INTO u FROM idemdb_unique x
        WHERE x.index_name = p_index AND x.value = p_value FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO idemdb_unique AS x (index_name, value, owner, bound_ns, bound_tenant,
                bound_key, bound_fence)
            VALUES (p_index, p_value, p_owner, p_ns, p_tenant, p_key, p_fence)
            ON CONFLICT DO NOTHING;
            IF FOUND THEN
                outcome := 0;
                RETURN;
            END IF;
            CONTINUE;
        END IF;
        IF idemdb_bound_live(u.bound_ns, u.bound_tenant, u.bound_key, u.bound_fence, t)
           AND NOT (CASE WHEN p_fence IS NULL
                         THEN u.bound_fence IS NULL AND u.owner = p_owner
                         ELSE u.bound_fence IS NOT NULL AND u.bound_ns = p_ns
                              AND u.bound_tenant = p_tenant AND u.bound_key = p_key END) THEN
            outcome := 1;
            owner := u.owner;
            RETURN;
        END IF;
        UPDATE idemdb_unique x SET owner = p_owner, bound_ns = p_ns, bound_tenant = p_tenant,
            bound_key = p_key, bound_fence = p_fence
        WHERE x.index_name = p_index AND x.value = p_value;
        outcome := 0;
        RETURN;
    END LOOP;
END
$fn$;

CREATE FUNCTION idemdb_release_reservation(p_index bytea, p_value bytea, p_owner bytea,
    p_now bigint, OUT outcome smallint, OUT owner bytea)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    t bigint := COALESCE(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    u idemdb_unique%ROWTYPE;
BEGIN
    SELECT * INTO u FROM idemdb_unique x
    WHERE x.index_name = p_index AND x.value = p_value FOR UPDATE;
    IF NOT FOUND
       OR NOT idemdb_bound_live(u.bound_ns, u.bound_tenant, u.bound_key, u.bound_fence, t) THEN
        outcome := 2;
        RETURN;
    END IF;
    IF u.bound_fence IS NOT NULL OR u.owner <> p_owner THEN
        outcome := 1;
        owner := u.owner;
        RETURN;
    END IF;
    DELETE FROM idemdb_unique x WHERE x.index_name = p_index AND x.value = p_value;
    outcome := 0;
END
$fn$;

CREATE TABLE idemdb_causal (
    kind smallint NOT NULL,
    tenant bytea NOT NULL,
    id bytea NOT NULL,
    value bytea,
    PRIMARY KEY (kind, tenant, id)
);

CREATE TABLE idemdb_offsets (
    group_name bytea NOT NULL,
    topic bytea NOT NULL,
    partition integer NOT NULL,
    next numeric NOT NULL,
    above numeric[] NOT NULL,
    PRIMARY KEY (group_name, topic, partition)
);

CREATE FUNCTION idemdb_join_offsets(p_group bytea, p_topic bytea, p_partition integer,
    p_next text, p_add text, p_limit integer, OUT applied boolean, OUT above_len integer)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    w idemdb_offsets%ROWTYPE;
    nx numeric;
    arr numeric[];
    last constant numeric := 18446744073709551615;
BEGIN
    LOOP
        SELECT * INTO w FROM idemdb_offsets o
        WHERE o.group_name = p_group AND o.topic = p_topic AND o.partition = p_partition
        FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO idemdb_offsets AS o (group_name, topic, partition, next, above)
        VALUES (p_group, p_topic, p_partition, 0, '{}')
        ON CONFLICT DO NOTHING;
    END LOOP;
    IF p_add IS NOT NULL AND p_next::numeric <= w.next
       AND (p_add::numeric < w.next OR p_add::numeric = ANY (w.above)) THEN
        applied := true;
        above_len := cardinality(w.above);
        RETURN;
    END IF;
    nx := GREATEST(w.next, p_next::numeric);
    SELECT COALESCE(array_agg(DISTINCT x ORDER BY x), '{}') INTO arr
    FROM unnest(w.above || CASE WHEN p_add IS NULL THEN '{}'::numeric[]
                                ELSE ARRAY[p_add::numeric] END) AS x
    WHERE x >= nx;
    WHILE cardinality(arr) > 0 AND arr[1] = nx AND nx < last LOOP
        nx := nx + 1;
        arr := arr[2:];
    END LOOP;
    above_len := cardinality(arr);
    IF p_limit IS NOT NULL AND above_len > p_limit THEN
        applied := false;
        RETURN;
    END IF;
    UPDATE idemdb_offsets o SET next = nx, above = arr
    WHERE o.group_name = p_group AND o.topic = p_topic AND o.partition = p_partition;
    applied := true;
END
$fn$;
";

/// The claim function's text (see [`FUNCTIONS`]): created by migration 2 with
/// `$create = "CREATE FUNCTION"` and tokens from the sequence alone, replaced by migration 4 with
/// tokens that carry the server's timeline (`idemdb_fence_next()`).
macro_rules! claim_function {
    ($create:literal, $fence:literal) => {
        claim_function!($create, $fence, "", "", "", "")
    };
    ($create:literal, $fence:literal, $param:literal, $column:literal, $value:literal,
     $set:literal) => {
        concat!(
            $create,
            " ",
            "idemdb_claim(p_ns smallint, p_tenant bytea, p_key bytea, p_fp bytea,
    p_lease bigint, p_retention bigint, p_now bigint",
            $param,
            ",
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
            fence, attempts, takeovers, state, lease_until, taken_over",
            $column,
            ")
        VALUES (p_ns, p_tenant, p_key, p_fp, now, now + p_retention, ",
            $fence,
            ", 1,
            0, 0, now + p_lease, false",
            $value,
            ")
        ON CONFLICT DO NOTHING
        RETURNING q.fence, q.attempts, q.taken_over, q.lease_until, q.expires_at
        INTO fence, attempts, taken_over, lease_until, expires_at;
    ELSE
        UPDATE idemdb_requests q SET
            fingerprint = p_fp,
            created_at = CASE WHEN q.expires_at <= now THEN now ELSE q.created_at END,
            expires_at = CASE WHEN q.expires_at <= now THEN now + p_retention
                              ELSE GREATEST(q.expires_at, now + p_lease) END,
            fence = ",
            $fence,
            ",
            attempts = CASE WHEN q.expires_at <= now THEN 1 ELSE q.attempts + 1 END,
            takeovers = CASE WHEN q.expires_at <= now THEN 0
                             ELSE q.takeovers + (q.state = 0)::int END,
            taken_over = q.expires_at > now AND q.state = 0,
            state = 0,
            lease_until = now + p_lease,",
            $set,
            "
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

"
        )
    };
}

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
const FUNCTIONS: &str = concat!(
    "\n",
    claim_function!("CREATE FUNCTION", "nextval('idemdb_fence')"),
    "CREATE FUNCTION idemdb_holder(p_ns smallint, p_tenant bytea, p_key bytea, p_fence bigint,
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
"
);

/// `idemdb_end_leases` ends many leases in one call (coalesced completions, terminal failures and
/// releases, `coalesce.rs`): element `j` of the arrays is one call (`p_state[j]` 1 released, 2
/// completed, 3 failed; `p_body[j]` its response; its metadata `p_meta[p_from[j]:p_to[j]]`),
/// applied in array order (the caller sorts them by key) by the one-call `UPDATE` of that change,
/// under its condition (the pending row with the lease's fence, not expired); one row per call
/// that applied: its position `j` and the lease's end. Each `UPDATE` is a primary-key probe whose
/// plan PL/pgSQL caches once per server connection: a single `UPDATE ... FROM unnest(...)` had
/// no shape whose cached plan stays a probe as the table grows, and planning it at every call cost
/// about as much as running it (docs/benchmarks.md, "Coalesced statements").
const END_LEASES: &str = "
CREATE FUNCTION idemdb_end_leases(p_ns smallint[], p_tenant bytea[], p_key bytea[],
    p_fence bigint[], p_state smallint[], p_body bytea[], p_meta text[], p_from integer[],
    p_to integer[], p_now bigint)
RETURNS TABLE (ord integer, lease_until bigint)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    t bigint := COALESCE(p_now, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint);
    j integer;
    done bigint;
BEGIN
    FOR j IN 1 .. COALESCE(array_length(p_key, 1), 0) LOOP
        done := NULL;
        IF p_state[j] = 1 THEN
            UPDATE idemdb_requests q SET state = 1
            WHERE q.ns = p_ns[j] AND q.tenant = p_tenant[j] AND q.key = p_key[j]
              AND q.fence = p_fence[j] AND q.state = 0 AND q.expires_at > t
            RETURNING q.lease_until INTO done;
        ELSIF p_state[j] IN (2, 3) THEN
            UPDATE idemdb_requests q SET state = p_state[j], finished_at = t,
                response_body = p_body[j], response_meta = p_meta[p_from[j]:p_to[j]],
                checkpoint_phase = NULL, checkpoint_state = NULL
            WHERE q.ns = p_ns[j] AND q.tenant = p_tenant[j] AND q.key = p_key[j]
              AND q.fence = p_fence[j] AND q.state = 0 AND q.expires_at > t
            RETURNING q.lease_until INTO done;
        END IF;
        IF done IS NOT NULL THEN
            ord := j;
            lease_until := done;
            RETURN NEXT;
        END IF;
    END LOOP;
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

/// The first half of the advisory lock under which migrations run (any constant: `idem` in
/// ASCII); the second half is the schema's name, hashed ([`LOCK`]).
pub(crate) const LOCK_CLASS: i32 = 0x6964_656d;

/// Takes the migration lock of the schema the migration changes (its first parameter is
/// [`LOCK_CLASS`]): stores in other schemas of the same server migrate side by side.
pub(crate) const LOCK: &str =
    "SELECT pg_advisory_xact_lock($1, hashtext(COALESCE(current_schema(), '')))";

/// Migration 4: a fencing token is `timeline << 47 | n`, `n` from the sequence (now bounded to
/// 47 bits) and `timeline` the server's current WAL timeline, which every promotion of a
/// standby increases. A standby promoted after asynchronous replication may hand out sequence
/// values the old primary already gave, but never with as low a timeline: every token drawn
/// after a failover is larger than every token drawn before it, so a lease from before can
/// never match a record claimed after (design.md, "Fencing across a failover"). Tokens drawn
/// before this migration (below 2^47) are smaller than every token after it.
const EPOCH_FENCE: &str = concat!(
    "
    ALTER SEQUENCE idemdb_fence MAXVALUE 140737488355327;
    CREATE FUNCTION idemdb_fence_next() RETURNS bigint LANGUAGE sql VOLATILE AS $fn$
        SELECT (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
                << 47) + nextval('idemdb_fence')
    $fn$;
    ",
    claim_function!("CREATE OR REPLACE FUNCTION", "idemdb_fence_next()")
);

const EPOCH_FENCE_DOWN: &str = concat!(
    claim_function!("CREATE OR REPLACE FUNCTION", "nextval('idemdb_fence')"),
    "
    DROP FUNCTION idemdb_fence_next();
    ALTER SEQUENCE idemdb_fence NO MAXVALUE;
    "
);

/// Claim nonces (`lost_claims.rs`). Every claim that may acquire
/// carries a nonce its caller chose, written into the row it acquires (`claim_nonce`), so that a
/// caller whose claim statement may have committed without its answer reaching it (the
/// connection lost, the answer later than the statement's bound, the primary killed after the
/// commit reached a synchronous standby) can release exactly the lease that claim took, and
/// nothing else: `statements::RELEASE_LOST_CLAIM`. A row written before this step has no nonce
/// (`NULL`), which no release matches. The claim function gains the nonce as its last parameter.
const CLAIM_NONCE: &str = concat!(
    "
    ALTER TABLE idemdb_requests ADD COLUMN claim_nonce bigint;
    DROP FUNCTION idemdb_claim(smallint, bytea, bytea, bytea, bigint, bigint, bigint);
    ",
    claim_function!(
        "CREATE FUNCTION",
        "idemdb_fence_next()",
        ", p_nonce bigint",
        ", claim_nonce",
        ", p_nonce",
        "\n            claim_nonce = p_nonce,"
    )
);

const CLAIM_NONCE_DOWN: &str = concat!(
    "
    DROP FUNCTION idemdb_claim(smallint, bytea, bytea, bytea, bigint, bigint, bigint, bigint);
    ",
    claim_function!("CREATE FUNCTION", "idemdb_fence_next()"),
    "
    ALTER TABLE idemdb_requests DROP COLUMN claim_nonce;
    "
);

/// One step of the PostgreSQL schema, as [`Config::schema_status`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchemaStep {
    /// The step's version (1, 2, ...).
    pub version: i32,
    /// What it creates.
    pub name: &'static str,
    /// When it was applied (the database's text form of the time), `None` if it was not.
    pub applied_at: Option<String>,
}

impl Config {
    fn postgres_settings(&self, operation: &'static str) -> Result<&super::Settings> {
        self.postgres.as_ref().ok_or(Error::Unsupported {
            operation,
            hint: "only a store on PostgreSQL (Config::postgres) has a schema",
        })
    }

    /// PostgreSQL only: every step of the schema this build knows, with when each was applied.
    pub async fn schema_status(&self) -> Result<Vec<SchemaStep>> {
        let pg = super::PgStore::connect(self.postgres_settings("schema_status")?, None)?;
        let applied = pg.migration_status().await?;
        Ok(MIGRATIONS
            .iter()
            .map(|m| SchemaStep {
                version: m.version,
                name: m.name,
                applied_at: applied
                    .iter()
                    .find(|a| a.0 == m.version)
                    .map(|a| a.2.clone()),
            })
            .collect())
    }

    /// PostgreSQL only: moves the schema to version `to` (`None`: the latest this build knows),
    /// applying the steps above the current version or undoing those above `to` (newest first;
    /// undoing drops their tables and data, and `Some(0)` removes every idemdb table). Each step
    /// runs in its own transaction under an advisory lock. Returns the versions applied, or
    /// undone, in the order they ran.
    pub async fn migrate_schema(&self, to: Option<i32>) -> Result<Vec<i32>> {
        let latest = current_version();
        let target = to.unwrap_or(latest);
        if !(0..=latest).contains(&target) {
            return Err(crate::error::InvalidInput::Config(format!(
                "schema version {target} is not in 0..={latest}"
            ))
            .into());
        }
        let pg = super::PgStore::connect(self.postgres_settings("migrate_schema")?, None)?;
        let current = pg.schema_version().await?;
        if target >= current {
            pg.migrate_up(Some(target)).await
        } else {
            pg.migrate_down(target).await
        }
    }
}
