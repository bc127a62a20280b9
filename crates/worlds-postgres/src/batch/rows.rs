//! What a batch writes: its rows as one array per column, and the statements of the locked
//! path that write them.

use std::collections::BTreeMap;
use std::sync::Arc;

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{PgConnection, Postgres};
use worlds_engine::{Event, EventKind, HookStatus, RunStatus, WorldError};

use super::Working;
use crate::db::{big, to_json};
use crate::PostgresStore;

impl PostgresStore {
    /// Writes the accepted events of the batch: events, steps and runs in one statement, then
    /// hooks, then what a finished run frees (its hook tokens and timers; its streams are
    /// closed). Returns the finished runs that had a stream left open.
    pub(super) async fn write_runs(
        &self,
        conn: &mut PgConnection,
        me: &str,
        runs: &BTreeMap<String, Working>,
    ) -> Result<Vec<String>, WorldError> {
        let rows = Rows::of(runs)?;
        rows.bind_writes(sqlx::query(
            "WITH ins AS (
                 INSERT INTO events (run_id, seq, correlation_id, body)
                 SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[])
             ), st AS (
                 INSERT INTO steps (step_id, run_id, position)
                 SELECT * FROM UNNEST($5::text[], $6::text[], $7::bigint[])
                 ON CONFLICT (step_id) DO NOTHING
             )
             UPDATE runs SET next_seq = u.n, status = u.s, finished = u.f, quarantined = u.q,
                 ended_at = u.ea,
                 state = COALESCE(u.j, runs.state),
                 state_seq = CASE WHEN u.j IS NULL THEN runs.state_seq ELSE u.n END,
                 last_writer = $14,
                 -- A finished run reopened by hand is nobody's: any member may claim it.
                 owner = CASE WHEN runs.finished AND NOT u.f THEN NULL ELSE runs.owner END
             FROM UNNEST($8::text[], $9::bigint[], $10::text[], $11::bool[], $12::bool[], $13::text[],
                     $15::bigint[])
                 AS u(r, n, s, f, q, j, ea)
             WHERE runs.run_id = u.r",
        ), me)
        .bind(&rows.r_ended)
        .execute(&mut *conn)
        .await
        .map_err(|e| self.err("appending events", e))?;
        if !rows.h_id.is_empty() {
            sqlx::query(
                "INSERT INTO hooks (hook_id, run_id, position, token_digest, live)
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bool[])
                 ON CONFLICT (hook_id) DO UPDATE SET live = EXCLUDED.live
                 WHERE hooks.run_id = EXCLUDED.run_id",
            )
            .bind(&rows.h_id)
            .bind(&rows.h_run)
            .bind(&rows.h_pos)
            .bind(&rows.h_digest)
            .bind(&rows.h_live)
            .execute(&mut *conn)
            .await
            .map_err(|e| match crate::db::unique_violation(&e) {
                Some(_) => WorldError::Conflict {
                    message: "hook token is held by another waiting hook".into(),
                },
                None => self.err("recording hooks", e),
            })?;
        }
        if rows.finished_runs.is_empty() {
            return Ok(Vec::new());
        }
        let mut closed: Vec<String> = sqlx::query_scalar(
            "WITH fh AS (
                 UPDATE hooks SET live = false, run_over = true WHERE run_id = ANY($1)
             ), ft AS (
                 DELETE FROM timers WHERE run_id = ANY($1)
             )
             UPDATE streams SET done = true WHERE run_id = ANY($1) AND NOT done
             RETURNING run_id",
        )
        .bind(&rows.finished_runs)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| self.err("freeing what finished runs held", e))?;
        closed.sort_unstable();
        closed.dedup();
        Ok(closed)
    }
}

impl PostgresStore {
    /// Writes runs this store holds with one statement (so one commit): each run only if its
    /// row still has the `next_seq` (`r_base`) and lease (`r_epoch`) the rows were made for;
    /// its events and steps, and for a finished run the freeing of its hook tokens and timers
    /// and the closing of its streams, only with it. Returns the runs written, each with
    /// whether a stream of it was closed.
    ///
    /// Without `flush` the statement commits with `synchronous_commit = off` (set for its own
    /// transaction): the server answers before its WAL reaches the disk, and the runs written
    /// are noted as [unflushed](crate::Inner::unflushed) until a later commit flushes them.
    pub(super) async fn write_held(
        &self,
        conn: &mut PgConnection,
        me: &str,
        rows: &Rows<'_>,
        flush: bool,
    ) -> Result<Vec<(String, bool)>, WorldError> {
        // The setting is made in `u`, which is never inlined (it calls a volatile function),
        // so it is made before anything is written, once per row, and only when asked for:
        // a server whose default is stronger than `on` (a synchronous standby) keeps it.
        let written = rows
            .bind_writes(
                sqlx::query(
                    "WITH u AS (
                 SELECT x.*, CASE WHEN $18 THEN set_config('synchronous_commit', 'off', true) END AS relaxed
                 FROM UNNEST($8::text[], $9::bigint[], $10::text[], $11::bool[],
                     $12::bool[], $13::text[], $15::bigint[], $16::bigint[], $17::bigint[],
                     $19::bigint[])
                     AS x(r, n, s, f, q, j, b, e, ss, ea)
             ), upd AS (
                 UPDATE runs SET next_seq = u.n, status = u.s, finished = u.f, quarantined = u.q,
                     ended_at = u.ea,
                     state = COALESCE(u.j, runs.state),
                     state_seq = CASE WHEN u.j IS NULL THEN runs.state_seq ELSE u.ss END,
                     last_writer = $14
                 FROM u
                 WHERE runs.run_id = u.r AND runs.next_seq = u.b
                     AND runs.owner = $14 AND runs.epoch = u.e
                 RETURNING runs.run_id, u.f
             ), ins AS (
                 INSERT INTO events (run_id, seq, correlation_id, body)
                 SELECT x.* FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[])
                     AS x(r, s, c, b)
                 WHERE x.r IN (SELECT run_id FROM upd)
             ), st AS (
                 INSERT INTO steps (step_id, run_id, position)
                 SELECT x.* FROM UNNEST($5::text[], $6::text[], $7::bigint[]) AS x(i, r, p)
                 WHERE x.r IN (SELECT run_id FROM upd)
                 ON CONFLICT (step_id) DO NOTHING
             ), fh AS (
                 UPDATE hooks SET live = false, run_over = true
                 WHERE run_id IN (SELECT run_id FROM upd WHERE f)
             ), ft AS (
                 DELETE FROM timers WHERE run_id IN (SELECT run_id FROM upd WHERE f)
             ), fs AS (
                 UPDATE streams SET done = true
                 WHERE run_id IN (SELECT run_id FROM upd WHERE f) AND NOT done
                 RETURNING run_id
             )
             SELECT run_id, run_id IN (SELECT run_id FROM fs) FROM upd",
                ),
                me,
            )
            .bind(&rows.r_base)
            .bind(&rows.r_epoch)
            .bind(&rows.r_state_seq)
            .bind(!flush)
            .bind(&rows.r_ended)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| self.err("appending events", e))?;
        let written: Vec<(String, bool)> = written
            .iter()
            .map(|row| (sqlx::Row::get(row, 0), sqlx::Row::get(row, 1)))
            .collect();
        let mut unflushed = self.inner.unflushed.lock();
        if flush {
            // This commit's flush carried every earlier commit's WAL to disk.
            unflushed.clear();
        } else {
            unflushed.extend(written.iter().map(|(run_id, _)| run_id.clone()));
        }
        drop(unflushed);
        Ok(written)
    }
}

/// What a batch writes to one run's row.
pub(super) struct RunRow<'a> {
    pub(super) run_id: &'a str,
    /// `next_seq` after the write.
    pub(super) next_seq: i64,
    pub(super) status: RunStatus,
    pub(super) quarantined: bool,
    /// When the run ended (`WorkflowState::completed_at`), if its status is terminal.
    pub(super) ended_at: Option<i64>,
    /// The run's state, serialized, and the `next_seq` it is as of, when it is written.
    pub(super) snapshot: Option<(String, i64)>,
    /// `next_seq` the row must have (the holder's write checks it).
    pub(super) base_seq: i64,
    /// The lease epoch the row must have (likewise).
    pub(super) epoch: i64,
}

/// The rows a batch writes, as one array per column (bound through `UNNEST`).
#[derive(Default)]
pub(super) struct Rows<'a> {
    pub(super) ev_run: Vec<&'a str>,
    pub(super) ev_seq: Vec<i64>,
    pub(super) ev_corr: Vec<Option<&'a str>>,
    pub(super) ev_body: Vec<String>,
    pub(super) st_id: Vec<&'a str>,
    pub(super) st_run: Vec<&'a str>,
    pub(super) st_pos: Vec<i64>,
    pub(super) r_id: Vec<&'a str>,
    pub(super) r_next: Vec<i64>,
    pub(super) r_status: Vec<&'static str>,
    pub(super) r_finished: Vec<bool>,
    pub(super) r_quarantined: Vec<bool>,
    /// When each run ended, NULL for an unfinished one (bound after the statement's others).
    pub(super) r_ended: Vec<Option<i64>>,
    pub(super) r_state: Vec<Option<String>>,
    /// `state_seq` of the snapshot in `r_state`, where there is one.
    pub(super) r_state_seq: Vec<i64>,
    /// The `next_seq` each run's row must still have (the fast path's check).
    pub(super) r_base: Vec<i64>,
    /// The lease epoch each run's row must still have (the fast path's check).
    pub(super) r_epoch: Vec<i64>,
    pub(super) h_id: Vec<&'a str>,
    pub(super) h_run: Vec<&'a str>,
    pub(super) h_pos: Vec<i64>,
    pub(super) h_digest: Vec<&'a str>,
    pub(super) h_live: Vec<bool>,
    pub(super) finished_runs: Vec<&'a str>,
}

impl<'a> Rows<'a> {
    /// Binds the columns both write statements take, as `$1`–`$14`: events (`$1`–`$4`),
    /// steps (`$5`–`$7`), runs (`$8`–`$13`) and this member (`$14`).
    pub(super) fn bind_writes<'q>(
        &'q self,
        query: Query<'q, Postgres, PgArguments>,
        me: &'q str,
    ) -> Query<'q, Postgres, PgArguments> {
        query
            .bind(&self.ev_run)
            .bind(&self.ev_seq)
            .bind(&self.ev_corr)
            .bind(&self.ev_body)
            .bind(&self.st_id)
            .bind(&self.st_run)
            .bind(&self.st_pos)
            .bind(&self.r_id)
            .bind(&self.r_next)
            .bind(&self.r_status)
            .bind(&self.r_finished)
            .bind(&self.r_quarantined)
            .bind(&self.r_state)
            .bind(me)
    }

    /// Adds a run's row.
    pub(super) fn push_run(&mut self, run: RunRow<'a>) {
        let finished = run.status.is_terminal();
        self.r_id.push(run.run_id);
        self.r_next.push(run.next_seq);
        self.r_status.push(run.status.as_str());
        self.r_finished.push(finished);
        self.r_quarantined.push(run.quarantined);
        self.r_ended
            .push(if finished { run.ended_at } else { None });
        match run.snapshot {
            Some((json, at)) => {
                self.r_state.push(Some(json));
                self.r_state_seq.push(at);
            }
            None => {
                self.r_state.push(None);
                self.r_state_seq.push(0);
            }
        }
        self.r_base.push(run.base_seq);
        self.r_epoch.push(run.epoch);
        if finished {
            self.finished_runs.push(run.run_id);
        }
    }

    /// Adds a run's events (and the steps they schedule).
    pub(super) fn push_events(
        &mut self,
        run_id: &'a str,
        events: &'a [Arc<Event>],
        correlation: &'a [Option<String>],
    ) -> Result<(), WorldError> {
        for (event, corr) in events.iter().zip(correlation) {
            self.ev_run.push(run_id);
            self.ev_seq.push(big(event.seq));
            self.ev_corr.push(corr.as_deref());
            self.ev_body.push(to_json("event", &**event)?);
            if let EventKind::ActivityScheduled {
                activity_id,
                position,
                ..
            } = &event.kind
            {
                self.st_id.push(activity_id.as_str());
                self.st_run.push(run_id);
                self.st_pos.push(i64::from(*position));
            }
        }
        Ok(())
    }

    /// The rows of the runs with accepted events.
    pub(super) fn of(runs: &'a BTreeMap<String, Working>) -> Result<Self, WorldError> {
        let mut rows = Rows::default();
        for (run_id, w) in runs.iter().filter(|(_, w)| !w.events.is_empty()) {
            rows.push_events(run_id, &w.events, &w.correlation)?;
            let finished = w.state.status.is_terminal();
            let snapshot = if w.writes_snapshot() {
                Some((to_json("run state", &*w.state)?, w.next_seq))
            } else {
                None
            };
            rows.push_run(RunRow {
                run_id,
                next_seq: w.next_seq,
                status: w.state.status,
                quarantined: w.state.quarantine.is_some(),
                ended_at: w.state.completed_at,
                snapshot,
                base_seq: w.base_seq,
                epoch: w.epoch,
            });
            for &position in &w.hooks {
                if let Some(hook) = w.state.hook(position) {
                    rows.h_id.push(hook.id.as_str());
                    rows.h_run.push(run_id.as_str());
                    rows.h_pos.push(i64::from(position));
                    rows.h_digest.push(hook.token_digest.as_str());
                    rows.h_live
                        .push(hook.status == HookStatus::Waiting && !finished);
                }
            }
        }
        Ok(rows)
    }
}
