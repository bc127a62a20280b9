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
