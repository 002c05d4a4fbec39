//! The SQL behind each operation (see `docs/design.md`, "PostgreSQL backend", for why each one
//! is atomic). Invariant: each decision is one statement (a claim's first statement, or the
//! takeover function it hands a row that looks acquirable to; a holder's `UPDATE`); its time is
//! the database's clock at its start (`statement_timestamp()`, or `clock_timestamp()` read once) (`$now` is `NULL` except in the conformance tests, whose manual
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

/// The statement's "now", in milliseconds, as an expression: `statement_timestamp()` is the
/// database's clock when the statement arrived and stays the same throughout it, so it can be
/// written wherever "now" is needed with no subquery to compute it once (measured: the subquery
/// cost about 5 µs per statement, docs/benchmarks.md). The test clock replaces it when given.
macro_rules! now_expr {
    ($p:literal) => {
        concat!(
            "COALESCE(",
            $p,
            "::bigint, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint)"
        )
    };
}

/// The server's WAL timeline, as the high bits of a fencing token carry it (migration 4's
/// `idemdb_fence_next()`, docs/design.md, "Fencing across a failover").
macro_rules! timeline {
    () => {
        "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint"
    };
}

/// A condition that is always true and makes its statement's commit wait for the WAL flush when
/// the session's `synchronous_commit` is `off` (set on the role, the database or the server:
/// the store's own sessions never set it so): `local` for this transaction alone. Every
/// statement that draws fencing tokens from the sequence carries it, since a token whose
/// sequence record a crash loses is handed out again after recovery (`fences.rs`); any other
/// setting already flushes, and is left as it is (`on` may also wait for standbys).
macro_rules! flushed_if_off {
    () => {
        "(CASE WHEN current_setting('synchronous_commit') = 'off' \
         THEN set_config('synchronous_commit', 'local', true) ELSE '' END) IS NOT NULL"
    };
}

/// The end of a `SET` list that ends a lease of the row `q` (a completion, failure or release):
/// the waiters' flag is cleared, and when it was set their notification is sent
/// (`idemdb_wake_waiters` of migration 10), from the row as this statement changes it (its
/// newest version, under its lock), so a mark committed before the change is always seen. A
/// change PostgreSQL re-evaluates on a newer version (a concurrent update) may notify twice: a
/// wake is only a reason to claim again. Used by [`COMPLETE`], [`FAIL`], [`RELEASE`],
/// [`RELEASE_LOST_CLAIM`]; migration 10's `idemdb_holder` and `idemdb_end_leases` restate it in
/// their literal SQL (released text is never built by a macro), held to it by
/// `migrations::tests::migration_10_wakes_the_waiters_as_the_statements_do`. No trigger runs on
/// the table.
macro_rules! wake_waiters {
    () => {
        ",\n            waiting = CASE WHEN q.waiting THEN NOT idemdb_wake_waiters(q.ns, q.tenant, q.key) \
         ELSE false END"
    };
}
// For the unit test that holds migration 10's restatement to it.
#[cfg(test)]
pub(crate) use wake_waiters;

/// The condition a `DELETE` of the row `q` adds: always true, and when the row's waiters' flag is
/// set, their notification is sent ([`FORGET`], [`SWEEP_PAGES`]).
macro_rules! wake_if_deleted {
    () => {
        "(NOT q.waiting OR idemdb_wake_waiters(q.ns, q.tenant, q.key))"
    };
}

/// The columns a claim answers with, in the order of the `idemdb_claim` function's `OUT`
/// parameters (both claim statements answer alike).
macro_rules! claim_columns {
    ($q:literal) => {
        concat!(
            $q,
            ".fence, ",
            $q,
            ".attempts, ",
            $q,
            ".taken_over, ",
            $q,
            ".lease_until, ",
            $q,
            ".expires_at, ",
            $q,
            ".checkpoint_phase, ",
            $q,
            ".checkpoint_state, ",
            $q,
            ".fingerprint, ",
            $q,
            ".state, ",
            $q,
            ".finished_at, ",
            $q,
            ".response_body, ",
            $q,
            ".response_meta"
        )
    };
}

/// The head of a claim's insert of a new key's pending row: the table and its columns, in the
/// order the values follow (every claim statement that inserts: [`CLAIM_FAST`], [`CLAIM_TOKEN`],
/// [`CLAIM_BATCH`]).
macro_rules! insert_pending {
    () => {
        " INSERT INTO idemdb_requests AS q (ns, tenant, key, fingerprint, created_at, expires_at, \
         fence, attempts, takeovers, state, lease_until, taken_over, claim_nonce)"
    };
}

/// The end of a claim statement's insert (`ins`), after its buffered claim's condition
/// (`CASE WHEN <buffered with a token of this timeline>`): the commit is buffered, or flushed as
/// [`flushed_if_off!`] says; the inserted row answers `acquired`, and a `UNION ALL` follows with
/// the key's row as read.
macro_rules! insert_answered {
    () => {
        concat!(
            " THEN set_config('synchronous_commit', 'off', true) IS NOT NULL ELSE ",
            flushed_if_off!(),
            " END) ON CONFLICT DO NOTHING RETURNING true AS acquired, ",
            claim_columns!("q"),
            ", q.created_at AS now) SELECT * FROM ins UNION ALL"
        )
    };
}

/// The key's row as a claim reads it ($1 ns, $2 tenant, $3 key; `$p` the test clock), shaped as
/// a claim's answer that did not acquire: [`CLAIM_FAST`]'s read branch, and [`CLAIM_READ`].
macro_rules! key_row {
    ($p:literal) => {
        concat!(
            "SELECT false AS acquired, ",
            claim_columns!("r"),
            ", ",
            now_expr!($p),
            " AS now FROM idemdb_requests r WHERE r.ns = $1::smallint AND r.tenant = $2::bytea \
             AND r.key = $3::bytea"
        )
    };
}

/// $1 ns, $2 tenant, $3 key, $4 fingerprint, $5 lease ms, $6 retention ms, $7 test clock, $8
/// the claim's fencing token from its store's block (`NULL`: drawn here), $9 whether the claim is
/// buffered, $10 the claim's nonce (written into the row it acquires: [`RELEASE_LOST_CLAIM`]).
/// The claim's first statement, for the two common cases, shaped like the hand-written recipe:
/// the key's row is read first (`r`); only when there is none, a new row is inserted pending
/// (`ON CONFLICT DO NOTHING`: of concurrent inserts exactly one wins) and answers `acquired`. An
/// existing row is answered as read (`acquired` false), and the caller decides from it only what
/// needs no write (a replay, a mismatch, a live lease). A row that looks acquirable (expired,
/// released, or a lease run out) is taken by [`CLAIM`], whose `UPDATE ... WHERE acquirable`
/// decides under the row lock. No row at all: another claim inserted the key after this
/// statement's snapshot; run it again. `now` is the database time the statement used. A replay
/// draws no fencing token and writes nothing: with the insert evaluated first (the first
/// shape of this statement), every replay drew a token, and every 32nd one wrote the sequence's
/// WAL and waited for its flush (pgbench, one client: replays 0.224 to 0.238 ms on average
/// against 0.191 to 0.211 with this shape; docs/benchmarks.md, "The claim reads first").
///
/// A claim with a token from its store's block is sent as [`CLAIM_TOKEN`] (the same parameters
/// and answer, the insert first), so `$8` is `NULL` here in this build; what follows holds for
/// both. A buffered claim (`$9`; its token `$8` from the store's block, `fences.rs`) commits
/// without waiting for its WAL flush (`synchronous_commit` off for its transaction alone): the
/// completion's flushed commit, later in the same WAL, makes the pending row durable with it.
/// One flushed commit per request instead of two (docs/design.md, "One WAL flush per request").
/// A block's token is used only on the timeline it was drawn on (`f.fresh`): a store that still
/// holds a block from before a failover gets a token drawn here instead, greater than every
/// token of the old timeline, and waits for its flush (the store drops the block when it sees
/// the answer's newer timeline). Any other claim waits for its flush, as the server's setting
/// says, and at least locally (`flushed_if_off!`).
pub(crate) const CLAIM_FAST: &str = concat!(
    "WITH r AS (
    ",
    key_row!("$7"),
    "),
ins AS (",
    insert_pending!(),
    "
    SELECT $1::smallint, $2::bytea, $3::bytea, $4::bytea, ",
    now_expr!("$7"),
    ", ",
    now_expr!("$7"),
    " + $6::bigint, CASE WHEN f.fresh THEN $8::bigint ELSE idemdb_fence_next() END, 1, 0, 0, ",
    now_expr!("$7"),
    " + $5::bigint, false, $10::bigint
    FROM (SELECT CASE WHEN $8::bigint IS NULL THEN false ELSE $8::bigint >> 47 = ",
    timeline!(),
    " END AS fresh) f
    WHERE NOT EXISTS (SELECT 1 FROM r)
      AND (CASE WHEN $9::boolean AND f.fresh
",
    insert_answered!(),
    "
SELECT * FROM r"
);

/// [`CLAIM_FAST`] for a claim that carries a token from its store's block (`$8` not `NULL`:
/// buffered claims, the default), with the same parameters and answer, shaped as the
/// hand-written recipe's claim: the insert is tried first (`ON CONFLICT DO NOTHING`), and the
/// key's row is read only when it inserted nothing. On a new key (the common case for a claim
/// that takes a token) that is one index probe, no CTE read and no subquery: 4 to 8 % less
/// server CPU per claim+complete than [`CLAIM_FAST`] in `benches/peers/sql/run`'s diagnostic
/// (docs/benchmarks.md, "Issue 45"). A claim that draws its own token keeps [`CLAIM_FAST`]'s
/// read first: inserting first would draw a token from the sequence on every replay. Here a
/// replay draws none as long as `$8` is of the server's timeline; after a failover, until a new
/// key's claim makes the store drop its old block, a replay through this statement draws one
/// (and waits for its flush), as every claim then does.
pub(crate) const CLAIM_TOKEN: &str = concat!(
    "WITH ins AS (",
    insert_pending!(),
    "
    SELECT $1::smallint, $2::bytea, $3::bytea, $4::bytea, ",
    now_expr!("$7"),
    ", ",
    now_expr!("$7"),
    " + $6::bigint, CASE WHEN $8::bigint >> 47 = ",
    timeline!(),
    " THEN $8::bigint ELSE idemdb_fence_next() END, 1, 0, 0, ",
    now_expr!("$7"),
    " + $5::bigint, false, $10::bigint
    WHERE (CASE WHEN $9::boolean AND $8::bigint >> 47 = ",
    timeline!(),
    "",
    insert_answered!(),
    "
",
    key_row!("$7"),
    "
  AND NOT EXISTS (SELECT 1 FROM ins)"
);

/// $1 ns, $2 tenant, $3 key, $4 test clock: the read branch of [`CLAIM_FAST`] alone, a plain
/// primary-key `SELECT` (no insert branch to set up). A claim that expects to find its key's row
/// (most recent claims did: a run of retries) asks this first and is answered from the row when
/// it answers without a write (a replay, a mismatch, a live lease), as [`CLAIM_FAST`] would
/// answer from the same read; no row goes on to [`CLAIM_FAST`] (a second round trip, the cost of
/// a wrong guess), and a row that looks acquirable to [`CLAIM`].
pub(crate) const CLAIM_READ: &str = key_row!("$4");

/// [`CLAIM_FAST`] for many keys at once (coalesced claims, `group_commit.rs`): $1 namespaces, $2
/// tenants, $3 keys, $4 fingerprints, $5 leases and $6 retentions in milliseconds, $8 tokens
/// from the stores' blocks (`NULL`: drawn here; one element per call, no key twice, sorted by key
/// so that concurrent batches lock in one order), $7 test clock, $9 whether every claim in it is
/// buffered (then it commits without waiting for its flush, unless a token in it is of an older
/// timeline than the server's: that call's token is drawn here, as in [`CLAIM_FAST`]). One row per call that has one, its `ord` (1-based position in the arrays) first, then
/// the columns of [`CLAIM_FAST`]: a row inserted (`acquired`, its token drawn as the row is
/// written), or the key's row as read; a call without a row (a concurrent insert after the
/// snapshot) asks again alone, as does one whose row looks acquirable. Each key's row is read by
/// a `LATERAL` lookup that cannot be flattened into a join (`OFFSET 0`): one primary-key probe per
/// call whatever the table's statistics say, so that its plan, cached in the prepared mode, stays
/// right as the table grows (a join in its place was planned, on a small table, as a hash join
/// over a sequential scan, and kept: slower with every row; docs/benchmarks.md).
pub(crate) const CLAIM_BATCH: &str = concat!(
    "WITH i AS (
    SELECT * FROM unnest($1::smallint[], $2::bytea[], $3::bytea[], $4::bytea[], $5::bigint[],
        $6::bigint[], $8::bigint[], $10::bigint[])
        WITH ORDINALITY AS i(ns, tenant, key, fingerprint, lease_ms, retention_ms, fence, nonce,
            ord)),
r AS (
    SELECT i.ord, false AS acquired, ",
    claim_columns!("r"),
    ", ",
    now_expr!("$7"),
    " AS now FROM i CROSS JOIN LATERAL (
        SELECT * FROM idemdb_requests r
        WHERE r.ns = i.ns AND r.tenant = i.tenant AND r.key = i.key OFFSET 0) r),
ins AS (",
    insert_pending!(),
    "
    SELECT i.ns, i.tenant, i.key, i.fingerprint, ",
    now_expr!("$7"),
    ", ",
    now_expr!("$7"),
    " + i.retention_ms, CASE WHEN i.fence >> 47 = t.timeline THEN i.fence \
        ELSE idemdb_fence_next() END, 1, 0, 0, ",
    now_expr!("$7"),
    " + i.lease_ms, false, i.nonce
    FROM i, (SELECT ",
    timeline!(),
    " AS timeline) t
    WHERE NOT EXISTS (SELECT 1 FROM r WHERE r.ord = i.ord)
      AND (CASE WHEN $9::boolean AND NOT EXISTS (SELECT 1 FROM i j
                    WHERE j.fence IS NULL OR j.fence >> 47 <> t.timeline)
                THEN set_config('synchronous_commit', 'off', true) IS NOT NULL
                ELSE ",
    flushed_if_off!(),
    " END)
    ORDER BY i.ord
    ON CONFLICT DO NOTHING
    RETURNING q.ns, q.tenant, q.key, true AS acquired, ",
    claim_columns!("q"),
    ", q.created_at AS now)
SELECT i.ord, ins.acquired, ",
    claim_columns!("ins"),
    ", ins.now FROM ins JOIN i ON ins.ns = i.ns AND ins.tenant = i.tenant AND ins.key = i.key
UNION ALL
SELECT * FROM r"
);

/// $1 to $7 as [`CLAIM_FAST`], $8 the claim's nonce: the `idemdb_claim` function of migrations
/// 2 and 7 (see `migrations.rs` for how it decides), used when the key's row looked acquirable (a takeover,
/// an expired record, a released lease). Its row: `acquired` (`NULL`: nothing decided, ask
/// again), the acquired lease's columns, or the row as it was read.
pub(crate) const CLAIM: &str = concat!(
    "SELECT * FROM idemdb_claim($1::smallint, $2::bytea, $3::bytea, $4::bytea, $5::bigint, \
     $6::bigint, $7::bigint, $8::bigint) c WHERE ",
    flushed_if_off!()
);

/// $1 ns, $2 tenant, $3 key, $4 a claim's nonce: releases the lease that claim acquired, if it
/// did and the lease is still the row's (pending, with that nonce), as [`RELEASE`] would; one
/// row (its fence) when it released. Sent by a caller whose claim may have committed without
/// its answer reaching it (`lost_claims.rs`; docs/design.md, "Claims whose answer was lost"): no
/// other lease carries the nonce, so it never releases another caller's.
pub(crate) const RELEASE_LOST_CLAIM: &str = concat!(
    "UPDATE idemdb_requests q SET state = 1",
    wake_waiters!(),
    " WHERE q.ns = $1::smallint AND q.tenant = $2::bytea AND q.key = $3::bytea \
    AND q.claim_nonce = $4::bigint AND q.state = 0 RETURNING q.fence"
);

/// A holder's call as one call of migration 2's `idemdb_holder` function (the unnamed statement
/// mode, whose statements are planned at every call: the function's are planned once per server
/// connection): $1 ns, $2 tenant, $3 key, $4 fence, $5 test clock, $6 the change (1 complete,
/// 2 fail, 3 release, 4 renew, 5 checkpoint), $7 bytes, $8 metadata, $9 milliseconds, $10 text.
/// `done_until` is the lease's end when it applied; otherwise the row's state, fence and whether
/// it expired say why (all `NULL`: no row).
pub(crate) const HOLDER_FN: &str = "SELECT * FROM idemdb_holder($1::smallint, $2::bytea, \
    $3::bytea, $4::bigint, $5::bigint, $6::smallint, $7::bytea, $8::text[], $9::bigint, $10::text)";

/// A holder's call, one `UPDATE` per kind: $1 ns, $2 tenant, $3 key, $4 fence, $5 test clock,
/// then the change's own values. It applies only to the pending row carrying the lease's fence
/// that has not expired, and answers the lease's end (`lease_until`); no row: it applied to
/// nothing, and [`HOLDER_WHY`] says why.
macro_rules! holder {
    ($($set:tt)+) => {
        concat!(
            "UPDATE idemdb_requests q SET ",
            $($set)+,
            "
WHERE q.ns = $1::smallint AND q.tenant = $2::bytea AND q.key = $3::bytea AND q.fence = $4::bigint
  AND q.state = 0 AND q.expires_at > ",
            now_expr!("$5"),
            "
RETURNING q.lease_until"
        )
    };
}

/// A holder's call that ends the lease with a stored response in `state` (2 completed, 3 failed):
/// $6 the response body, $7 its metadata (key, value, key, value...). It wakes the waiters, as
/// [`RELEASE`] does ([`wake_waiters!`]).
macro_rules! finish {
    ($state:literal) => {
        holder!(
            "state = ",
            $state,
            ", finished_at = ",
            now_expr!("$5"),
            ", response_body = $6::bytea, response_meta = $7::text[], \
             checkpoint_phase = NULL, checkpoint_state = NULL",
            wake_waiters!()
        )
    };
}

/// $6 the response body, $7 its metadata.
pub(crate) const COMPLETE: &str = finish!("2");
/// As [`COMPLETE`], for a terminal failure.
pub(crate) const FAIL: &str = finish!("3");
pub(crate) const RELEASE: &str = holder!("state = 1", wake_waiters!());
/// $6 the renewal in milliseconds.
pub(crate) const RENEW: &str = holder!(
    "lease_until = ",
    now_expr!("$5"),
    " + $6::bigint, expires_at = GREATEST(q.expires_at, ",
    now_expr!("$5"),
    " + $6::bigint)"
);
/// $6 the checkpoint's phase, $7 its state.
pub(crate) const CHECKPOINT: &str =
    holder!("checkpoint_phase = $6::text, checkpoint_state = $7::bytea");

/// Holder calls that end a lease, for many keys at once (coalesced, `group_commit.rs`): one call of
/// migration 5's `idemdb_end_leases`. $1 namespaces, $2 tenants, $3 keys, $4 fences, $5 the new
/// states (1 released, 2 completed, 3 failed), $6 response bodies (`NULL` for a release), $7
/// every call's metadata in one flat array, $8 and $9 where each call's metadata starts and ends
/// in it (1-based, inclusive; an empty range is empty metadata), $10 test clock. Each row changes
/// as [`COMPLETE`], [`FAIL`] or [`RELEASE`] would change it, by the same `UPDATE` under the same
/// condition (the pending row with the lease's fence, not expired); one row per call that
/// applied (its `ord`, the lease's end). A call that applied to nothing asks alone, and learns
/// why. Sent in the store's mode: the function's statements are planned once per connection.
pub(crate) const HOLDER_BATCH: &str = "SELECT ord, lease_until FROM idemdb_end_leases(\
    $1::smallint[], $2::bytea[], $3::bytea[], $4::bigint[], $5::smallint[], $6::bytea[], \
    $7::text[], $8::integer[], $9::integer[], $10::bigint)";

/// $1 how many: a block of fencing tokens for buffered claims (`fences.rs`), in increasing
/// order. More than 32 values, so `nextval` WAL-logs in the statement and its commit waits for
/// the local flush, whatever the session's `synchronous_commit` (`local` for this transaction):
/// no crash of this server hands these tokens out again. It never waits for a standby: a
/// block's tokens are used only on the timeline they were drawn on (the claim statements check),
/// so a standby promoted without the block's sequence record hands out greater tokens (of its
/// newer timeline) whatever its sequence says. Every buffered claim of the store waits for the
/// draw (`take_fence`), so a draw that waited for a lagging synchronous standby would hold them
/// all up to the statement's bound.
pub(crate) const FENCE_BLOCK: &str = "SELECT idemdb_fence_next() AS fence \
    FROM generate_series(1, $1::integer) \
    WHERE set_config('synchronous_commit', 'local', true) IS NOT NULL ORDER BY 1";

/// $1 ns, $2 tenant, $3 key, $4 test clock: after a holder's call that applied to nothing, why
/// (the row's state and fence, whether it expired; no row: gone). Only explains a decision the
/// `UPDATE` already made.
pub(crate) const HOLDER_WHY: &str = concat!(
    "SELECT q.state, q.fence, q.expires_at <= ",
    now_expr!("$4"),
    " AS expired FROM idemdb_requests q
WHERE q.ns = $1 AND q.tenant = $2 AND q.key = $3"
);

/// $1 ns, $2 tenant, $3 key, $4 test clock: a waiting claim's mark (`waits.rs`). The key's
/// live pending row is marked `waiting` (migrations 6 and 8: its lease's end will notify), and the
/// milliseconds left of its lease are the answer; a row some other waiter marked already is
/// only read. No row: no live lease to wait for (it ended since the claim read it); claim
/// again. A mark is taken under the row's lock, so a change that ends the lease after it sees
/// the flag and notifies.
pub(crate) const MARK_WAITING: &str = concat!(
    "WITH u AS (
    UPDATE idemdb_requests q SET waiting = true
    WHERE q.ns = $1::smallint AND q.tenant = $2::bytea AND q.key = $3::bytea AND q.state = 0
      AND NOT q.waiting AND q.lease_until > ",
    now_expr!("$4"),
    " AND q.expires_at > ",
    now_expr!("$4"),
    "
    RETURNING q.lease_until - ",
    now_expr!("$4"),
    " AS left_ms)
SELECT left_ms FROM u
UNION ALL
SELECT q.lease_until - ",
    now_expr!("$4"),
    " FROM idemdb_requests q
WHERE q.ns = $1::smallint AND q.tenant = $2::bytea AND q.key = $3::bytea AND q.state = 0
  AND q.waiting AND q.lease_until > ",
    now_expr!("$4"),
    " AND q.expires_at > ",
    now_expr!("$4")
);

/// $1 ns, $2 tenant, $3 key, $4 test clock: the live row.
pub(crate) const GET: &str = concat!(
    now_cte!("$4"),
    " SELECT r.* FROM now, idemdb_requests r
WHERE r.ns = $1 AND r.tenant = $2 AND r.key = $3 AND r.expires_at > now.t"
);

/// $1 ns, $2 tenant, $3 key (a pending row's waiters are woken: [`wake_if_deleted!`]).
pub(crate) const FORGET: &str = concat!(
    "DELETE FROM idemdb_requests q WHERE q.ns = $1 AND q.tenant = $2 AND q.key = $3 AND ",
    wake_if_deleted!()
);

/// The number of pages of `idemdb_requests` now (its size over the server's block size).
macro_rules! table_pages {
    () => {
        "(SELECT pg_relation_size('idemdb_requests') / current_setting('block_size')::bigint)"
    };
}

/// $1 test clock: the sweep's shared cursor (migration 9): the first page of the next range to
/// sweep, how many laps the walk completed, the milliseconds since the last one ended, the
/// table's pages now, and the milliseconds since the cursor last moved.
pub(crate) const SWEEP_CURSOR: &str = concat!(
    "SELECT s.next_page, s.laps, ",
    now_expr!("$1"),
    " - s.lap_ended_at, ",
    table_pages!(),
    ", ",
    now_expr!("$1"),
    " - s.moved_at FROM idemdb_sweep s"
);

/// $1 the range's first page, $2 its number of pages, $3 batch size, $4 test clock: deletes up
/// to $3 expired rows on those pages of `idemdb_requests` (a TID range scan: no index decides
/// which rows expired), skipping rows locked by others (no long locks, no waiting on a claim in
/// flight); a deleted row's waiters are woken ([`wake_if_deleted!`]).
pub(crate) const SWEEP_PAGES: &str = concat!(
    "WITH doomed AS (
    SELECT r.ctid FROM idemdb_requests r
    WHERE r.ctid >= ('(' || $1::bigint || ',0)')::tid
      AND r.ctid < ('(' || LEAST($1::bigint + $2::bigint, 4294967295) || ',0)')::tid
      AND r.expires_at <= ",
    now_expr!("$4"),
    "
    LIMIT $3
    FOR UPDATE OF r SKIP LOCKED
)
DELETE FROM idemdb_requests q USING doomed d WHERE q.ctid = d.ctid AND ",
    wake_if_deleted!()
);

/// $1 a range's first page, $2 its end, $3 test clock: moves the shared cursor past a swept range,
/// if it still points at the range's start (another instance may have moved it meanwhile); past
/// the table's last page it comes round to page 0, one more lap, ended now. The cursor as it is
/// afterwards, in [`SWEEP_CURSOR`]'s columns.
pub(crate) const SWEEP_ADVANCE: &str = concat!(
    "WITH p AS (SELECT ",
    table_pages!(),
    " AS pages), u AS (
    UPDATE idemdb_sweep s SET
        next_page = CASE WHEN $2::bigint >= p.pages THEN 0 ELSE $2::bigint END,
        laps = s.laps + CASE WHEN $2::bigint >= p.pages THEN 1 ELSE 0 END,
        lap_ended_at = CASE WHEN $2::bigint >= p.pages THEN ",
    now_expr!("$3"),
    " ELSE s.lap_ended_at END,
        moved_at = ",
    now_expr!("$3"),
    "
    FROM p WHERE s.next_page = $1::bigint
    RETURNING s.next_page, s.laps, ",
    now_expr!("$3"),
    " - s.lap_ended_at AS since, p.pages, 0::bigint AS moved)
SELECT * FROM u
UNION ALL
SELECT s.next_page, s.laps, ",
    now_expr!("$3"),
    " - s.lap_ended_at, p.pages, ",
    now_expr!("$3"),
    " - s.moved_at FROM idemdb_sweep s, p WHERE NOT EXISTS (SELECT 1 FROM u)"
);

/// $1 tenant, $2 id: an entity's newest row (a `NULL` value is a tombstone).
pub(crate) const ENTITY_GET: &str =
    "SELECT version, value FROM idemdb_entities WHERE tenant = $1 AND id = $2";

/// As [`ENTITY_GET`], locking the row until the transaction ends (an update escalated to a
/// transaction that holds the entity while the caller's function runs).
pub(crate) const ENTITY_LOCK: &str =
    "SELECT version, value FROM idemdb_entities WHERE tenant = $1 AND id = $2 FOR UPDATE";

/// $1 tenant, $2 id, $3 condition (0 any, 1 absent, 2 version), $4 the version, $5 the value,
/// $6 whether to delete: the conditional write of migration 3, decided under the row's lock.
pub(crate) const ENTITY_PUT: &str = "SELECT applied, version, value FROM idemdb_put_entity(\
    $1::bytea, $2::bytea, $3::smallint, $4::bigint, $5::bytea, $6::boolean)";

/// $1 index, $2 value (composite encoding), $3 owner (empty when bound), $4..$7 the lease's
/// namespace, tenant, key and fence (all `NULL` for a plain reservation), $8 test clock.
pub(crate) const RESERVE: &str = "SELECT outcome, owner, state, fence, expired FROM \
    idemdb_reserve($1::bytea, $2::bytea, $3::bytea, $4::smallint, $5::bytea, $6::bytea, \
    $7::bigint, $8::bigint)";

/// $1 index, $2 value, $3 owner, $4 test clock.
pub(crate) const RELEASE_RESERVATION: &str = "SELECT outcome, owner FROM \
    idemdb_release_reservation($1::bytea, $2::bytea, $3::bytea, $4::bigint)";

/// $1 index, $2 value: an operator's removal of a reservation, whatever its owner.
pub(crate) const FORGET_RESERVATION: &str =
    "DELETE FROM idemdb_unique WHERE index_name = $1::bytea AND value = $2::bytea";

/// $1 index, $2 value, $3 test clock: the owner of a live reservation.
pub(crate) const RESERVATION_OWNER: &str = concat!(
    "SELECT u.owner FROM idemdb_unique u
WHERE u.index_name = $1 AND u.value = $2
  AND idemdb_bound_live(u.bound_ns, u.bound_tenant, u.bound_key, u.bound_fence, ",
    now_expr!("$3::bigint"),
    ")"
);

/// $1 group, $2 topic, $3 partition, $4 watermark's `next` (text), $5 the offset to add (text,
/// or `NULL`), $6 the window's limit (or `NULL`): the join of migration 3.
pub(crate) const JOIN_OFFSETS: &str = "SELECT applied, above_len FROM idemdb_join_offsets(\
    $1::bytea, $2::bytea, $3::integer, $4::text, $5::text, $6::integer)";

/// $1 group, $2 topic, $3 partition: the window, its numbers as text.
pub(crate) const OFFSET_WINDOW: &str = "SELECT next::text, above::text[] FROM idemdb_offsets \
    WHERE group_name = $1 AND topic = $2 AND partition = $3";

/// $1 tenant, $2 id: the entity's row, locked until the transaction ends (a commit's check), in
/// one statement: a version-0 tombstone is inserted for an entity that has no row (version 0
/// reads as absent, and the first write makes version 1, as with no row), and an existing row is
/// locked by an update that changes nothing.
pub(crate) const ENTITY_HOLD: &str =
    "INSERT INTO idemdb_entities AS e (tenant, id, version, value) \
    VALUES ($1, $2, 0, NULL) ON CONFLICT (tenant, id) DO UPDATE SET version = e.version \
    RETURNING e.version, e.value";

/// $1 kind (0 causal entity, 1 replica vector), $2 tenant, $3 id: the stored bytes.
pub(crate) const CAUSAL_GET: &str =
    "SELECT value FROM idemdb_causal WHERE kind = $1 AND tenant = $2 AND id = $3";

/// The same parameters: an empty row to lock when there is none (a `NULL` value reads as none).
pub(crate) const CAUSAL_HOLD: &str = "INSERT INTO idemdb_causal (kind, tenant, id, value) \
    VALUES ($1, $2, $3, NULL) ON CONFLICT DO NOTHING";

/// The same parameters: the row, locked until the transaction ends.
pub(crate) const CAUSAL_LOCK: &str =
    "SELECT value FROM idemdb_causal WHERE kind = $1 AND tenant = $2 AND id = $3 FOR UPDATE";

/// The same parameters and $4 the new bytes (`NULL`: removed; the empty row is deleted).
pub(crate) const CAUSAL_SET: &str = "WITH up AS (UPDATE idemdb_causal SET value = $4 \
    WHERE kind = $1 AND tenant = $2 AND id = $3 AND $4::bytea IS NOT NULL RETURNING 1) \
    DELETE FROM idemdb_causal WHERE kind = $1 AND tenant = $2 AND id = $3 AND $4::bytea IS NULL";

/// $1 test clock: the counts of `PostgresStats`, in its field order.
pub(crate) const STATS: &str = concat!(
    "WITH t AS (SELECT ",
    now_expr!("$1::bigint"),
    " AS now), r AS (
    SELECT
      count(*) FILTER (WHERE q.ns = 0 AND q.state = 0 AND q.expires_at > t.now) AS a,
      count(*) FILTER (WHERE q.ns = 0 AND q.state = 1 AND q.expires_at > t.now) AS b,
      count(*) FILTER (WHERE q.ns = 0 AND q.state = 2 AND q.expires_at > t.now) AS c,
      count(*) FILTER (WHERE q.ns = 0 AND q.state = 3 AND q.expires_at > t.now) AS d,
      count(*) FILTER (WHERE q.ns = 1 AND q.state = 0 AND q.expires_at > t.now) AS e,
      count(*) FILTER (WHERE q.ns = 1 AND q.state = 1 AND q.expires_at > t.now) AS f,
      count(*) FILTER (WHERE q.ns = 1 AND q.state = 2 AND q.expires_at > t.now) AS g,
      count(*) FILTER (WHERE q.ns = 1 AND q.state = 3 AND q.expires_at > t.now) AS h,
      count(*) FILTER (WHERE q.expires_at <= t.now) AS i
    FROM idemdb_requests q, t)
SELECT r.a, r.b, r.c, r.d, r.e, r.f, r.g, r.h, r.i,
  (SELECT count(*) FROM idemdb_entities WHERE value IS NOT NULL),
  (SELECT count(*) FROM idemdb_entities WHERE value IS NULL AND version > 0),
  (SELECT count(*) FROM idemdb_unique),
  (SELECT count(*) FROM idemdb_offsets),
  (SELECT count(*) FROM idemdb_causal WHERE value IS NOT NULL),
  (SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c
   WHERE c.relkind = 'r' AND c.relname LIKE 'idemdb\\_%' AND pg_table_is_visible(c.oid))
FROM r"
);

/// $1 batch size, $2 test clock: deletes up to $1 reservation rows whose lease can never be live
/// again (its record gone, expired, finished, released or taken over: no pending row with its
/// fence that has not expired), skipping rows others hold. A lease that merely ran out is not
/// one of them: its holder may still renew it, and its reservation is live again (the model
/// found this sweep deleting such a reservation, so that the renewed holder had lost it).
pub(crate) const SWEEP_RESERVATIONS: &str = concat!(
    now_cte!("$2"),
    ", doomed AS (
    SELECT u.index_name, u.value FROM idemdb_unique u, now
    WHERE u.bound_fence IS NOT NULL
      AND NOT EXISTS (
        SELECT 1 FROM idemdb_requests q
        WHERE q.ns = u.bound_ns AND q.tenant = u.bound_tenant AND q.key = u.bound_key
          AND q.fence = u.bound_fence AND q.state = 0 AND q.expires_at > now.t)
    LIMIT $1
    FOR UPDATE OF u SKIP LOCKED
)
DELETE FROM idemdb_unique u USING doomed d
WHERE u.index_name = d.index_name AND u.value = d.value"
);

/// $1 batch size: deletes up to $1 version-0 entity rows (held by commits' checks of absent
/// entities; they read as absent, so deleting them changes nothing), skipping rows others hold.
pub(crate) const SWEEP_PLACEHOLDERS: &str = "WITH doomed AS (
    SELECT tenant, id FROM idemdb_entities WHERE version = 0 AND value IS NULL
    LIMIT $1 FOR UPDATE SKIP LOCKED
)
DELETE FROM idemdb_entities e USING doomed d WHERE e.tenant = d.tenant AND e.id = d.id";

#[cfg(test)]
mod tests {
    fn words(sql: &str) -> Vec<&str> {
        sql.split_whitespace().collect()
    }

    /// The peer harness's statement diagnostic (`benches/peers/src/bin/sqlbench.rs`) measures
    /// copies of the claim's first statement and the completion: they must be these.
    #[test]
    fn the_sql_the_peer_harness_measures_is_the_library_s() {
        let claim = include_str!("../../benches/peers/sql/idemdb_claim.sql");
        let with_token = include_str!("../../benches/peers/sql/idemdb_claim_with_token.sql");
        let complete = include_str!("../../benches/peers/sql/idemdb_complete.sql");
        assert_eq!(words(claim), words(super::CLAIM_FAST));
        assert_eq!(words(with_token), words(super::CLAIM_TOKEN));
        assert_eq!(words(complete), words(super::COMPLETE));
    }
}
