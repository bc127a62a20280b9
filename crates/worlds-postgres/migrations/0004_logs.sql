-- The world's log entries, written by every member in batches and read by `worlds logs`:
-- `entry` is the entry as JSON; the other columns are for filtering and order.
CREATE TABLE logs (
    id bigserial PRIMARY KEY,
    at bigint NOT NULL,
    level smallint NOT NULL,
    category text NOT NULL,
    member text NOT NULL,
    entry text NOT NULL
);
CREATE INDEX logs_at ON logs (at, id);
