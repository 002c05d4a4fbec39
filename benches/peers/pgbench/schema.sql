DROP SCHEMA IF EXISTS exp15 CASCADE;
CREATE SCHEMA exp15;
SET search_path = exp15;
CREATE SEQUENCE idemdb_fence AS bigint;
CREATE TABLE idemdb_requests (
    ns smallint NOT NULL, tenant bytea NOT NULL, key bytea NOT NULL, fingerprint bytea NOT NULL,
    created_at bigint NOT NULL, expires_at bigint NOT NULL, fence bigint NOT NULL,
    attempts integer NOT NULL, takeovers integer NOT NULL, state smallint NOT NULL,
    lease_until bigint NOT NULL, taken_over boolean NOT NULL DEFAULT false, finished_at bigint,
    response_body bytea, response_meta text[], checkpoint_phase text, checkpoint_state bytea,
    PRIMARY KEY (ns, tenant, key));
CREATE INDEX idemdb_requests_expires_at ON idemdb_requests (expires_at);
CREATE TABLE hand_requests (key text PRIMARY KEY, fp bytea NOT NULL,
                 state smallint NOT NULL, lease_until timestamptz, response bytea);
