WITH ins AS (
    INSERT INTO idemdb_requests (ns, tenant, key, fingerprint, created_at, expires_at, fence, attempts, takeovers, state, lease_until, taken_over)
    VALUES ($1, $2, $3, $4, COALESCE($7::bigint, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint), COALESCE($7::bigint, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint) + $6::bigint, nextval('idemdb_fence'), 1, 0, 0, COALESCE($7::bigint, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint) + $5::bigint, false)
    ON CONFLICT DO NOTHING
    RETURNING true AS acquired, fence, attempts, taken_over, lease_until, expires_at, checkpoint_phase, checkpoint_state, fingerprint, state, finished_at, response_body, response_meta, created_at AS now)
SELECT * FROM ins
UNION ALL
SELECT false, fence, attempts, taken_over, lease_until, expires_at, checkpoint_phase, checkpoint_state, fingerprint, state, finished_at, response_body, response_meta, COALESCE($7::bigint, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint) FROM idemdb_requests
WHERE key = $3 AND tenant = $2 AND ns = $1 AND NOT EXISTS (SELECT 1 FROM ins)
