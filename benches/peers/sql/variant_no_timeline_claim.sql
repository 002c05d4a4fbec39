WITH ins AS (
    INSERT INTO idemdb_requests AS q (ns, tenant, key, fingerprint, created_at, expires_at,
        fence, attempts, takeovers, state, lease_until, taken_over, claim_nonce)
    SELECT $1::smallint, $2::bytea, $3::bytea, $4::bytea, COALESCE($7::bigint, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint), COALESCE($7::bigint, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint) + $6::bigint, CASE WHEN $8::bigint >> 47 = ($8::bigint >> 47) THEN $8::bigint ELSE idemdb_fence_next() END, 1, 0, 0, COALESCE($7::bigint, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint) + $5::bigint, false, $10::bigint
    WHERE (CASE WHEN $9::boolean AND $8::bigint >> 47 = ($8::bigint >> 47)
                THEN set_config('synchronous_commit', 'off', true) IS NOT NULL
                ELSE (CASE WHEN current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'local', true) ELSE '' END) IS NOT NULL END)
    ON CONFLICT DO NOTHING
    RETURNING true AS acquired, q.fence, q.attempts, q.taken_over, q.lease_until, q.expires_at, q.checkpoint_phase, q.checkpoint_state, q.fingerprint, q.state, q.finished_at, q.response_body, q.response_meta, q.created_at AS now)
SELECT * FROM ins
UNION ALL
SELECT false AS acquired, r.fence, r.attempts, r.taken_over, r.lease_until, r.expires_at, r.checkpoint_phase, r.checkpoint_state, r.fingerprint, r.state, r.finished_at, r.response_body, r.response_meta, COALESCE($7::bigint, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint) AS now FROM idemdb_requests r WHERE r.ns = $1::smallint AND r.tenant = $2::bytea AND r.key = $3::bytea
  AND NOT EXISTS (SELECT 1 FROM ins)
