-- The cost of migration 6's wake trigger on statements that end leases when nobody waits (its
-- WHEN is false): 100,000 single-row UPDATEs (one statement each, as completions are) without
-- the trigger, then with it, twice. Run: psql -h 127.0.0.1 -U postgres -d test -f THIS (docs/benchmarks.md,
-- "Duplicates that wait"). It makes and drops the schema trig_bench.
DROP SCHEMA IF EXISTS trig_bench CASCADE; CREATE SCHEMA trig_bench; SET search_path = trig_bench;
CREATE TABLE t (ns smallint, tenant bytea, key bytea, state smallint, fence bigint, waiting boolean NOT NULL DEFAULT false, PRIMARY KEY (ns, tenant, key));
CREATE FUNCTION wake() RETURNS trigger LANGUAGE plpgsql AS $fn$ BEGIN PERFORM pg_notify('x', 'y'); NEW.waiting := false; RETURN NEW; END $fn$;
INSERT INTO t SELECT 0, 't'::bytea, i::text::bytea, 0, i, false FROM generate_series(1, 200000) i;
VACUUM ANALYZE t;
\timing on
DO $$ BEGIN FOR i IN 1..100000 LOOP UPDATE t SET state = 2 WHERE ns = 0 AND tenant = 't' AND key = i::text::bytea AND fence = i; END LOOP; END $$;
CREATE TRIGGER w BEFORE UPDATE ON t FOR EACH ROW WHEN (OLD.waiting AND (NEW.state <> 0 OR NEW.fence <> OLD.fence)) EXECUTE FUNCTION wake();
DO $$ BEGIN FOR i IN 100001..200000 LOOP UPDATE t SET state = 2 WHERE ns = 0 AND tenant = 't' AND key = i::text::bytea AND fence = i; END LOOP; END $$;
DROP TRIGGER w ON t;
DO $$ BEGIN FOR i IN 1..100000 LOOP UPDATE t SET state = 3 WHERE ns = 0 AND tenant = 't' AND key = i::text::bytea AND fence = i; END LOOP; END $$;
CREATE TRIGGER w BEFORE UPDATE ON t FOR EACH ROW WHEN (OLD.waiting AND (NEW.state <> 0 OR NEW.fence <> OLD.fence)) EXECUTE FUNCTION wake();
DO $$ BEGIN FOR i IN 100001..200000 LOOP UPDATE t SET state = 3 WHERE ns = 0 AND tenant = 't' AND key = i::text::bytea AND fence = i; END LOOP; END $$;
DROP SCHEMA trig_bench CASCADE;
