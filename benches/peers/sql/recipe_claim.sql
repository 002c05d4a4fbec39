    WITH ins AS (
        INSERT INTO hand_requests (key, fp, state, lease_until)
        VALUES ($1, $2, 0, now() + interval '30 seconds')
        ON CONFLICT (key) DO NOTHING
        RETURNING true AS acquired, state, fp, response)
    SELECT acquired, state, fp, response FROM ins
    UNION ALL
    SELECT false, state, fp, response FROM hand_requests
    WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM ins)
