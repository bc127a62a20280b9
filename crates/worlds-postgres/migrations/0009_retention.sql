-- When each finished run ended (`WorkflowState::completed_at`, ms since the Unix epoch), NULL
-- while it runs: written with its status, so a retention sweep finds the runs that ended
-- before a time without reading their states. Runs that finished before this migration get
-- it from their stored state, which is written on every status change.
ALTER TABLE runs ADD COLUMN ended_at bigint;
UPDATE runs SET ended_at = COALESCE(
        (state::jsonb ->> 'completed_at')::bigint,
        (state::jsonb ->> 'updated_at')::bigint,
        created_at)
    WHERE finished;
-- Finished runs by end time, as `RetentionStore::ended_runs` lists them. `finished` is true
-- exactly for the terminal statuses (completed, failed, cancelled, compensated). A running
-- run has no entry, and its appends, which change neither `status` nor `ended_at`, stay
-- heap-only updates.
CREATE INDEX IF NOT EXISTS runs_ended ON runs (ended_at, run_id) WHERE finished;
-- A sweep deletes whole histories: the insert-only tables get dead rows by the thousand. Vacuum
-- them after a fixed number of deleted rows whatever their size (by default a fifth of a large
-- `events` would have to be dead first, so its space would come back only after months of
-- sweeps), and without autovacuum's pauses, like the hot tables of migration 6.
ALTER TABLE events SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 50000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE steps SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 20000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE chunks SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 20000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE streams SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0
);
