-- A run's materialized state is written every few events and on every status change, not on
-- every append: `state_seq` is the `next_seq` it was written at, and readers apply the events
-- from there to `next_seq`.
ALTER TABLE runs ADD COLUMN state_seq bigint NOT NULL DEFAULT 0;
UPDATE runs SET state_seq = next_seq;
