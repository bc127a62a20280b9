-- The code version of the world that accepted each run (`WorldConfig::code_version`), as its
-- UTF-8 bytes like the other names a user chooses; NULL for a world without one (and for runs
-- accepted before this migration). Listed by version with the newest first, as runs are.
ALTER TABLE runs ADD COLUMN code_version bytea;
CREATE INDEX runs_code_version ON runs (code_version, run_id) WHERE code_version IS NOT NULL;
