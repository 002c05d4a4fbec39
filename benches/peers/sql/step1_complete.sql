UPDATE idemdb_requests q SET state = 2, response_body = $6::bytea
WHERE q.ns = $1::smallint AND q.tenant = $2::bytea AND q.key = $3::bytea AND $4::bigint IS NOT NULL AND $5::bigint IS NULL AND $7::text[] IS NOT NULL
  AND q.state = 0
RETURNING q.lease_until
