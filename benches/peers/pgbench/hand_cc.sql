\set k random(1, 1000000000000)
WITH ins AS (INSERT INTO hand_requests (key, fp, state, lease_until) VALUES (:k::text, 'fpfpfpfpfpfpfpfpfpfpfpfpfpfpfpfp'::bytea, 0, now() + interval '30 seconds') ON CONFLICT (key) DO NOTHING RETURNING true AS acquired, state, fp, response) SELECT acquired, state, fp, response FROM ins UNION ALL SELECT false, state, fp, response FROM hand_requests WHERE key = :k::text AND NOT EXISTS (SELECT 1 FROM ins);
UPDATE hand_requests SET state = 1, response = repeat('x',256)::bytea WHERE key = :k::text AND state = 0;
