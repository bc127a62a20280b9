//! [`RetentionStore`]: finished runs by end time, and removing runs with their rows.
//!
//! `ended_runs` is one statement on the partial index `runs_ended` (`(ended_at, run_id)` of
//! the finished runs, migration 9). `remove_runs` is one short transaction per batch: one
//! statement locks the rows of the batch's runs, their parents' and their children's, in run
//! id order as the writer's locked path locks the runs of a batch (so neither waits on the
//! other in a cycle), the checks are made on the locked rows, and one statement deletes the
//! rows of the runs that may go from every table that holds them:
//!
//! | table | rows of the run |
//! |---|---|
//! | `runs` | its row: status, state, lease, idempotency key, and its workflow id (unique, so freed with the row) |
//! | `events` | its history |
//! | `steps` | the steps its history scheduled (found by the correlation ids of its events) |
//! | `hooks` | its hooks, with their token digests |
//! | `timers` | its timers (none once it finished, but a late one is not left behind) |
//! | `streams`, `chunks` | its streams and their chunks |
//!
//! An append to the run takes the same row lock (`FOR UPDATE` in the locked path; the holder's
//! one-statement write updates the row, which waits for the lock too, and writes nothing once
//! the row is gone). A reopen racing a removal is therefore either committed first, and the
//! removal sees an unfinished run and keeps it, or it waits, finds no row, and is answered
//! that the run is not found.

use async_trait::async_trait;
use sqlx::Row as _;
use worlds_engine::clock::Millis;
use worlds_engine::store::{EndedCursor, EndedRun, Kept, Removal, RemoveRun, RetentionStore};
use worlds_engine::{RunStatus, WorldError};

use crate::db::{storable, unsigned};
use crate::PostgresStore;

/// The columns of an [`EndedRun`], in the order [`ended_run`] reads them.
const ENDED_COLUMNS: &str =
    "run_id, name, status, quarantined, created_at, ended_at, idempotency_key IS NOT NULL";

fn ended_run(row: &sqlx::postgres::PgRow) -> Result<EndedRun, WorldError> {
    let name: Vec<u8> = row.get(1);
    let status: String = row.get(2);
    Ok(EndedRun {
        run_id: row.get(0),
        name: String::from_utf8(name).map_err(|e| {
            WorldError::Internal(format!("a stored workflow name is not UTF-8: {e}"))
        })?,
        status: status
            .parse::<RunStatus>()
            .map_err(|e| WorldError::Internal(format!("a stored run status: {e}")))?,
        quarantined: row.get(3),
        created_at: row.get(4),
        ended_at: row.get(5),
        has_idempotency_key: row.get(6),
    })
}

/// A row [`RetentionStore::remove_runs`] locked: a run asked for, its parent or a child.
struct Row {
    run_id: String,
    parent_id: Option<String>,
    finished: bool,
    ended_at: Option<Millis>,
}

/// The locked rows that bear on removing `run_id`, each in its role, in run id order.
fn locked_for(family: &[Row], run_id: &str) -> Vec<Locked> {
    let parent = family
        .iter()
        .find(|r| r.run_id == run_id)
        .and_then(|r| r.parent_id.as_deref());
    family
        .iter()
        .filter_map(|r| {
            let role = if r.run_id == run_id {
                Role::Run
            } else if r.parent_id.as_deref() == Some(run_id) {
                Role::Child
            } else if Some(r.run_id.as_str()) == parent {
                Role::Parent
            } else {
                return None;
            };
            Some(Locked {
                run_id: r.run_id.clone(),
                role,
                finished: r.finished,
                ended_at: r.ended_at,
            })
        })
        .collect()
}

/// A row bearing on one run's removal: the run itself, its parent or a child.
struct Locked {
    run_id: String,
    /// Which of the three it is.
    role: Role,
    finished: bool,
    ended_at: Option<Millis>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Run,
    Parent,
    Child,
}

/// Whether the locked rows let the run go: `None` if so, else why it is kept. `None` with no
/// row of the run itself is for the caller to answer as [`Removal::Gone`].
fn why_kept(locked: &[Locked], ended_before: Millis) -> Option<Kept> {
    let run = locked.iter().find(|l| l.role == Role::Run)?;
    if !run.finished {
        return Some(Kept::Unfinished);
    }
    match run.ended_at {
        Some(ended_at) if ended_at < ended_before => {}
        // A finished run without an end time (none in its row nor its state): kept, like one
        // that ended later, rather than removed on a guess.
        ended_at => {
            return Some(Kept::EndedLater {
                ended_at: ended_at.unwrap_or(Millis::MAX),
            })
        }
    }
    // Rows come in run id order, so the child named is the first unfinished one by id.
    if let Some(child) = locked.iter().find(|l| l.role == Role::Child && !l.finished) {
        return Some(Kept::ChildRunning {
            child_id: child.run_id.clone(),
        });
    }
    if let Some(parent) = locked
        .iter()
        .find(|l| l.role == Role::Parent && !l.finished)
    {
        return Some(Kept::ParentRunning {
            parent_id: parent.run_id.clone(),
        });
    }
    None
}

#[async_trait]
impl RetentionStore for PostgresStore {
    async fn ended_runs(
        &self,
        before: Millis,
        after: Option<&EndedCursor>,
        limit: usize,
    ) -> Result<Vec<EndedRun>, WorldError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // Two statements rather than one with an optional bound, so each plan starts its
        // index range where the listing goes on.
        let rows = match after {
            None => {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "SELECT {ENDED_COLUMNS} FROM runs
                     WHERE finished AND ended_at < $1
                     ORDER BY ended_at, run_id LIMIT $2"
                )))
                .bind(before)
                .bind(limit)
                .fetch_all(self.pool())
                .await
            }
            Some(cursor) => {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "SELECT {ENDED_COLUMNS} FROM runs
                     WHERE finished AND ended_at < $1 AND (ended_at, run_id) > ($2, $3)
                     ORDER BY ended_at, run_id LIMIT $4"
                )))
                .bind(before)
                .bind(cursor.ended_at)
                .bind(&cursor.run_id)
                .bind(limit)
                .fetch_all(self.pool())
                .await
            }
        }
        .map_err(|e| self.err("listing finished runs", e))?;
        rows.iter().map(ended_run).collect()
    }

    async fn remove_runs(&self, runs: &[RemoveRun]) -> Result<Vec<Removal>, WorldError> {
        // An id PostgreSQL cannot hold (NUL) names no stored run.
        let ids: Vec<&str> = runs
            .iter()
            .map(|r| r.run_id.as_str())
            .filter(|id| storable(id))
            .collect();
        if ids.is_empty() {
            return Ok(vec![Removal::Gone; runs.len()]);
        }
        let mut tx = self
            .pool()
            .begin()
            .await
            .map_err(|e| self.err("starting the removal of runs", e))?;
        let removals = match self.remove_in(&mut tx, runs, &ids).await {
            Ok(removals) => removals,
            Err(e) => {
                let _ = tx.rollback().await;
                return Err(e);
            }
        };
        tx.commit()
            .await
            .map_err(|e| self.err("committing the removal of runs", e))?;
        for (run, removal) in runs.iter().zip(&removals) {
            if let Removal::Removed { .. } = removal {
                self.forget_run(&run.run_id);
            }
        }
        Ok(removals)
    }
}

/// The parents of the runs `$1` (a parent id never changes: read without a lock).
const PARENTS: &str = "SELECT parent_id FROM runs WHERE run_id = ANY($1) AND parent_id IS NOT NULL";

/// Locks the rows of the runs and parents `$1` and of the children of the runs `$2`, in run id
/// order; with each, whether it finished and when. One index scan per key (the test
/// `the_removal_statements_scan_no_table` holds it to that): a subquery inside the OR would make
/// PostgreSQL read every run.
const LOCK_FAMILY: &str = "SELECT run_id, parent_id, finished,
         -- A run a build before migration 9 finished has its end in its state only.
         CASE WHEN finished
             THEN COALESCE(ended_at, (state::jsonb ->> 'completed_at')::bigint) END
     FROM runs
     WHERE run_id = ANY($1) OR parent_id = ANY($2)
     ORDER BY run_id
     FOR UPDATE";

/// Deletes the runs `$1` from every table; each run's count of events. Every statement in
/// WITH runs to completion whether or not its rows are read. A step is found by its id (the
/// key of `steps`) as an array: joined to the deleted events, the planner may scan every step.
const DELETE_RUNS: &str = "WITH ev AS (
         DELETE FROM events WHERE run_id = ANY($1) RETURNING run_id, correlation_id
     ), st AS (
         DELETE FROM steps
         WHERE step_id = ANY(ARRAY(
                 SELECT correlation_id FROM ev WHERE correlation_id IS NOT NULL))
             AND run_id = ANY($1)
     ), hk AS (
         DELETE FROM hooks WHERE run_id = ANY($1)
     ), tm AS (
         DELETE FROM timers WHERE run_id = ANY($1)
     ), ch AS (
         DELETE FROM chunks WHERE run_id = ANY($1)
     ), sm AS (
         DELETE FROM streams WHERE run_id = ANY($1)
     ), rn AS (
         DELETE FROM runs WHERE run_id = ANY($1)
     )
     SELECT run_id, count(*) FROM ev GROUP BY run_id";

impl PostgresStore {
    /// The work of [`RetentionStore::remove_runs`] in `tx`: locks, checks, deletes.
    async fn remove_in(
        &self,
        tx: &mut sqlx::PgConnection,
        runs: &[RemoveRun],
        ids: &[&str],
    ) -> Result<Vec<Removal>, WorldError> {
        // The runs' rows, their parents' and their children's, locked in run id order. A run
        // that has finished starts no child: a new one would come with a reopen, which needs
        // the lock taken here.
        let parents: Vec<String> = sqlx::query_scalar(PARENTS)
            .bind(ids)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| self.err("reading the parents of runs to remove", e))?;
        let mut locked: Vec<&str> = ids.to_vec();
        locked.extend(parents.iter().map(String::as_str));
        let rows = sqlx::query(LOCK_FAMILY)
            .bind(&locked)
            .bind(ids)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| self.err("locking runs to remove them", e))?;
        let family: Vec<Row> = rows
            .iter()
            .map(|row| Row {
                run_id: row.get(0),
                parent_id: row.get(1),
                finished: row.get(2),
                ended_at: row.get(3),
            })
            .collect();
        let mut answers: Vec<Option<Removal>> = Vec::with_capacity(runs.len());
        let mut doomed: Vec<&str> = Vec::new();
        for run in runs {
            let locked = locked_for(&family, &run.run_id);
            let answer = match why_kept(&locked, run.ended_before) {
                Some(kept) => Some(Removal::Kept(kept)),
                None if !locked.iter().any(|l| l.role == Role::Run) => Some(Removal::Gone),
                // The same run asked for twice in a batch goes once.
                None if doomed.contains(&run.run_id.as_str()) => Some(Removal::Gone),
                None => {
                    doomed.push(&run.run_id);
                    None
                }
            };
            answers.push(answer);
        }
        if doomed.is_empty() {
            return Ok(answers
                .into_iter()
                .map(|a| a.unwrap_or(Removal::Gone))
                .collect());
        }
        let counts: Vec<(String, i64)> = sqlx::query_as(DELETE_RUNS)
            .bind(&doomed)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| self.err("removing runs", e))?;
        let events = |run_id: &str| {
            counts
                .iter()
                .find(|(id, _)| id == run_id)
                .map_or(0, |(_, n)| unsigned(*n))
        };
        Ok(runs
            .iter()
            .zip(answers)
            .map(|(run, answer)| {
                answer.unwrap_or_else(|| Removal::Removed {
                    events: events(&run.run_id),
                })
            })
            .collect())
    }

    /// Drops what this store kept in memory of a run it removed.
    fn forget_run(&self, run_id: &str) {
        self.inner.held.lock().remove(run_id);
        self.inner.cache.lock().remove(run_id);
        self.inner.signals.lock().remove(run_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scans in a JSON plan (`EXPLAIN (FORMAT JSON)`) that read a whole table or index:
    /// sequential scans, and index scans with no condition on the index.
    fn full_scans(node: &serde_json::Value, found: &mut Vec<String>) {
        let kind = node["Node Type"].as_str().unwrap_or_default();
        let whole = match kind {
            "Seq Scan" => true,
            "Index Scan" | "Index Only Scan" => node.get("Index Cond").is_none(),
            _ => false,
        };
        if whole {
            found.push(format!("{kind} on {}", node["Relation Name"]));
        }
        for child in node["Plans"].as_array().into_iter().flatten() {
            full_scans(child, found);
        }
    }

    /// The plans of the removal's statements on a store's schema, with sequential scans and
    /// nested loops priced out (as a planner misjudging the rows a batch touches might): every
    /// table must still be reached through a condition on an index, or each batch reads it
    /// whole.
    #[tokio::test]
    async fn the_removal_statements_scan_no_table() {
        use sqlx::Connection as _;
        if !crate::testing::database_up().await {
            return;
        }
        let schema = crate::testing::TestSchema::fresh();
        let options = crate::PostgresOptions {
            pool_size: 1,
            schema: schema.name().to_owned(),
            ..crate::PostgresOptions::default()
        };
        let store = PostgresStore::connect(&crate::testing::test_url(), options)
            .await
            .expect("connect to the test database");
        let mut conn = sqlx::PgConnection::connect(&crate::testing::test_url())
            .await
            .unwrap();
        for set in [
            format!("SET search_path = \"{}\"", schema.name()),
            "SET enable_seqscan = off".to_owned(),
            "SET enable_nestloop = off".to_owned(),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(set))
                .execute(&mut conn)
                .await
                .unwrap();
        }
        let ids = ["wrun_a", "wrun_b"];
        for (name, sql, params) in [
            ("PARENTS", PARENTS, 1),
            ("LOCK_FAMILY", LOCK_FAMILY, 2),
            ("DELETE_RUNS", DELETE_RUNS, 1),
        ] {
            let mut explain = sqlx::query_scalar::<_, serde_json::Value>(sqlx::AssertSqlSafe(
                format!("EXPLAIN (FORMAT JSON) {sql}"),
            ))
            .bind(&ids[..]);
            if params == 2 {
                explain = explain.bind(&ids[..]);
            }
            let plan = explain.fetch_one(&mut conn).await.unwrap();
            let mut found = Vec::new();
            full_scans(&plan[0]["Plan"], &mut found);
            assert!(
                found.is_empty(),
                "{name} reads whole tables: {found:?}\n{plan:#}"
            );
        }
        let _ = store.close().await;
    }

    fn row(run_id: &str, role: Role, finished: bool, ended_at: Option<Millis>) -> Locked {
        Locked {
            run_id: run_id.into(),
            role,
            finished,
            ended_at,
        }
    }

    #[test]
    fn the_checks_go_in_order_status_end_children_parent() {
        let run = |finished, ended| row("wrun_b", Role::Run, finished, ended);
        assert_eq!(why_kept(&[], 10), None);
        assert_eq!(why_kept(&[run(false, None)], 10), Some(Kept::Unfinished));
        assert_eq!(
            why_kept(&[run(true, Some(10))], 10),
            Some(Kept::EndedLater { ended_at: 10 })
        );
        assert_eq!(
            why_kept(&[run(true, None)], 10),
            Some(Kept::EndedLater {
                ended_at: Millis::MAX
            })
        );
        assert_eq!(why_kept(&[run(true, Some(9))], 10), None);
        let family = [
            row("wrun_a", Role::Parent, false, None),
            run(true, Some(5)),
            row("wrun_c", Role::Child, true, Some(4)),
            row("wrun_d", Role::Child, false, None),
            row("wrun_e", Role::Child, false, None),
        ];
        assert_eq!(
            why_kept(&family, 10),
            Some(Kept::ChildRunning {
                child_id: "wrun_d".into()
            })
        );
        assert_eq!(
            why_kept(&family[..3], 10),
            Some(Kept::ParentRunning {
                parent_id: "wrun_a".into()
            })
        );
    }
}
