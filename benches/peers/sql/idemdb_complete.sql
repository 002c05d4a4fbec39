UPDATE idemdb_requests q SET state = 2, finished_at = COALESCE($5::bigint, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint), response_body = $6::bytea, response_meta = $7::text[], checkpoint_phase = NULL, checkpoint_state = NULL,
            waiting = CASE WHEN q.waiting THEN NOT idemdb_wake_waiters(q.ns, q.tenant, q.key) ELSE false END
WHERE q.ns = $1::smallint AND q.tenant = $2::bytea AND q.key = $3::bytea AND q.fence = $4::bigint
  AND q.state = 0 AND q.expires_at > COALESCE($5::bigint, floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint)
RETURNING q.lease_until
