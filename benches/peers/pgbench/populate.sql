SET search_path = exp15;
INSERT INTO idemdb_requests SELECT 0, 't', i::text::bytea, 'fpfpfpfpfpfpfpfpfpfpfpfpfpfpfpfp', 0, 9000000000000, nextval('idemdb_fence'), 1, 0, 2, 0, false, 0, repeat('x',256)::bytea, '{}' FROM generate_series(1,1000) i;
INSERT INTO hand_requests SELECT i::text, 'fpfpfpfpfpfpfpfpfpfpfpfpfpfpfpfp', 1, now(), repeat('x',256)::bytea FROM generate_series(1,1000) i;
