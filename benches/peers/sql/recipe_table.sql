CREATE TABLE hand_requests (key text PRIMARY KEY, fp bytea NOT NULL, state smallint NOT NULL,
    lease_until timestamptz, response bytea)
