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
pub(crate) const MIGRATIONS: &[Migration] = &[Migration {
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
}];

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
