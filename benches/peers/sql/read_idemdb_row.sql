-- idemdb's read first (CLAIM_READ, src/postgres/statements.rs, its parameters as constants) of a
-- completed row. Set-up, in a schema of its own: idemdb's migrations (open a store there) and
--   INSERT INTO idemdb_requests (ns, tenant, key, fingerprint, created_at, expires_at, fence,
--     attempts, takeovers, state, lease_until, taken_over, finished_at, response_body,
--     response_meta) VALUES (0, 't', 'rk', '\x0707', 1, 99999999999999, 1, 1, 0, 2, 1, false, 1,
--     decode(repeat('2a', 256), 'hex'), '{}');
-- Run alternating with read_recipe_row.sql (pgbench -n -M prepared -c 1 -T 5 -f ...).
SELECT false AS acquired, r.fence, r.attempts, r.taken_over, r.lease_until, r.expires_at, r.checkpoint_phase, r.checkpoint_state, r.fingerprint, r.state, r.finished_at, r.response_body, r.response_meta, COALESCE(NULL::bigint, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint) AS now FROM idemdb_requests r WHERE r.ns = 0::smallint AND r.tenant = 't'::bytea AND r.key = 'rk'::bytea;
