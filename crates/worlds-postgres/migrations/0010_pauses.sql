-- The pauses in force: one row per paused workflow or task queue, holding the pause (who, why,
-- since when) as JSON. Few rows, read whole by every member every few seconds; a resume
-- deletes its row.
CREATE TABLE pauses (
    kind   text NOT NULL COLLATE "C",
    name   text NOT NULL COLLATE "C",
    record text NOT NULL,
    PRIMARY KEY (kind, name)
);
