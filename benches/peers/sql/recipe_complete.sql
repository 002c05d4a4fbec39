UPDATE hand_requests SET state = 1, response = $2 WHERE key = $1 AND state = 0
