-- A replay as a plain read of the recipe's row (docs/benchmarks.md, "One WAL flush per request,
-- and reads first"). Set-up, in a schema of its own (PGOPTIONS="-c search_path=SCHEMA"): the
-- recipe's table (recipe_table.sql) and its row:
--   INSERT INTO hand_requests VALUES ('rk', '\x0707', 1, now(), decode(repeat('2a', 256), 'hex'));
-- Run: pgbench -n -M prepared -c 1 -T 5 -f read_recipe_row.sql, alternating with read_idemdb_row.sql.
SELECT false, state, fp, response FROM hand_requests WHERE key = 'rk';
