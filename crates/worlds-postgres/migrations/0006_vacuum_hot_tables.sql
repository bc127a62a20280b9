-- Vacuum settings for the tables whose rows are rewritten or deleted as runs move on.
--
-- Every run's row is updated at each status change (pending, running, completed…), and each
-- such update leaves a dead row version behind, with an entry in every index of `runs`. With
-- the server's defaults a table is vacuumed only once a fifth of its rows are dead: on a table
-- of a million finished runs, a burst of 200 000 runs leaves the `runs_status` index full of
-- entries for rows that are gone, and a capped count of a rare status (the dashboard's counts,
-- `worlds runs list --status …`) walks them all (0.7 s measured, 0.3 ms once vacuumed).
-- Here the hot tables are vacuumed after a few thousand changed rows, whatever their size, and
-- without the pauses autovacuum takes by default (a throttled vacuum of a large `runs` falls
-- behind a store recording thousands of runs a second).
--
-- `fillfactor` leaves room in each page of `runs` so that the updates that touch no indexed
-- column (most appends change only `next_seq` and the state) stay on the page and add no
-- index entry at all.
ALTER TABLE runs SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.02
);
-- Timers and live hooks come and go with every sleep and every hook.
ALTER TABLE timers SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE hooks SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0
);
