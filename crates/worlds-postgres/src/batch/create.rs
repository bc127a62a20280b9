//! Run creations, group-committed by the writer like appends: the runs created by one batch
//! are inserted by one statement (their rows and first events) in one flushed commit, on the
//! writer's connection, so starting many runs at once costs a few round trips instead of two
//! per run, and starting one costs no pool check.

use std::sync::Arc;

use sqlx::PgConnection;
use tokio::sync::oneshot;
use worlds_engine::{Event, WorkflowState, WorldError};

use super::Pending;
use crate::db::to_json;
use crate::{Held, PostgresStore};

/// A run to create: its first event, and who waits for the answer.
pub(crate) struct Create {
    first: Event,
    reply: oneshot::Sender<Result<(), WorldError>>,
}

impl Create {
    pub(super) fn refuse(self, error: WorldError) {
        let _ = self.reply.send(Err(error));
    }
}

/// A run ready to insert: its state and the JSON of its first event and state.
pub(super) struct NewRun {
    state: WorkflowState,
    first: Arc<Event>,
    body: String,
    state_json: String,
    reply: oneshot::Sender<Result<(), WorldError>>,
}

impl NewRun {
    pub(super) fn refuse(self, error: WorldError) {
        let _ = self.reply.send(Err(error));
    }
}

impl PostgresStore {
    /// Creates a run through the writer (see the module documentation).
    pub(crate) async fn create_through_writer(&self, first: Event) -> Result<(), WorldError> {
        self.queue_creation(first)?
            .await
            .map_err(|_| super::closed())?
    }

    /// Queues a run's creation for the writer; the receiver answers once it is committed.
    pub(crate) fn queue_creation(
        &self,
        first: Event,
    ) -> Result<oneshot::Receiver<Result<(), WorldError>>, WorldError> {
        let (reply, answer) = oneshot::channel();
        self.inner
            .writer
            .send(Pending::Create(Create { first, reply }))
            .map_err(|_| super::closed())?;
        Ok(answer)
    }

    /// The batch's creations ready to insert; one whose first event makes no run is answered
    /// at once.
    pub(super) fn prepare_runs(&self, creates: Vec<Create>) -> Vec<NewRun> {
        let mut runs = Vec::with_capacity(creates.len());
        for Create { mut first, reply } in creates {
            first.seq = 0;
            let prepared = WorkflowState::from_first_event(&first).and_then(|state| {
                Ok((
                    to_json("event", &first)?,
                    to_json("run state", &state)?,
                    state,
                ))
            });
            match prepared {
                Ok((body, state_json, state)) => runs.push(NewRun {
                    state,
                    first: Arc::new(first),
                    body,
                    state_json,
                    reply,
                }),
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            }
        }
        runs
    }

    /// Inserts runs with one statement; each caller hears whether its run was created. If the
    /// connection fails, the runs are handed back unanswered: the statement may have
    /// committed. `again` says this is the second try of such runs: one found with its own
    /// first event was created by the first.
    pub(super) async fn insert_runs(
        &self,
        conn: &mut PgConnection,
        mut runs: Vec<NewRun>,
        again: bool,
    ) -> Result<(), Vec<NewRun>> {
        if runs.is_empty() {
            return Ok(());
        }
        match self.insert_all(conn, &runs).await {
            Ok(inserted) => {
                // Each id answers once: a second creation of one run id in the batch was
                // refused by the first.
                let mut inserted: rustc_hash::FxHashSet<String> = inserted.into_iter().collect();
                for run in runs {
                    let created = inserted.remove(&run.state.id)
                        || (again && self.is_own_run(conn, &run).await);
                    let result = if created {
                        self.created(run.state, run.first);
                        Ok(())
                    } else {
                        Err(self.why_not_created(conn, &run.state).await)
                    };
                    let _ = run.reply.send(result);
                }
                Ok(())
            }
            Err(WorldError::Unavailable(_)) => Err(runs),
            Err(e) if runs.len() == 1 => {
                if let Some(run) = runs.pop() {
                    let _ = run.reply.send(Err(e));
                }
                Ok(())
            }
            Err(e) => {
                // One run the database refuses fails alone: each is inserted by itself.
                tracing::debug!(
                    "creating {} runs together failed ({e}); one at a time",
                    runs.len()
                );
                let mut rest = runs.into_iter();
                while let Some(run) = rest.next() {
                    if let Err(mut unknown) =
                        Box::pin(self.insert_runs(conn, vec![run], again)).await
                    {
                        unknown.extend(rest);
                        return Err(unknown);
                    }
                }
                Ok(())
            }
        }
    }

    /// True if the run exists with `run`'s first event: a commit whose answer was lost
    /// created it.
    async fn is_own_run(&self, conn: &mut PgConnection, run: &NewRun) -> bool {
        let body: Option<String> =
            sqlx::query_scalar("SELECT body FROM events WHERE run_id = $1 AND seq = 0")
                .bind(&run.state.id)
                .fetch_optional(&mut *conn)
                .await
                .ok()
                .flatten();
        body.and_then(|b| crate::db::from_json::<Event>("event", &b).ok())
            .is_some_and(|stored| stored.id == run.first.id)
    }

    /// One statement inserting the runs' rows (leased to this store) and first events; a run
    /// whose id or workflow id is taken (also by an earlier run of the same batch) inserts
    /// nothing. Returns the ids of the runs inserted.
    async fn insert_all(
        &self,
        conn: &mut PgConnection,
        runs: &[NewRun],
    ) -> Result<Vec<String>, WorldError> {
        let ids: Vec<&str> = runs.iter().map(|r| r.state.id.as_str()).collect();
        let workflow_ids: Vec<&[u8]> = runs
            .iter()
            .map(|r| r.state.workflow_id.as_bytes())
            .collect();
        let names: Vec<&[u8]> = runs.iter().map(|r| r.state.name.as_bytes()).collect();
        let statuses: Vec<&str> = runs.iter().map(|r| r.state.status.as_str()).collect();
        let parents: Vec<Option<&str>> =
            runs.iter().map(|r| r.state.parent_id.as_deref()).collect();
        let keys: Vec<Option<&[u8]>> = runs
            .iter()
            .map(|r| r.state.idempotency_key.as_deref().map(str::as_bytes))
            .collect();
        let created: Vec<i64> = runs.iter().map(|r| r.state.created_at).collect();
        let states: Vec<&str> = runs.iter().map(|r| r.state_json.as_str()).collect();
        let bodies: Vec<&str> = runs.iter().map(|r| r.body.as_str()).collect();
        let versions: Vec<Option<&[u8]>> = runs
            .iter()
            .map(|r| r.state.code_version.as_deref().map(str::as_bytes))
            .collect();
        let inserted: Vec<String> = sqlx::query_scalar(
            "WITH c AS (
                 SELECT * FROM UNNEST($1::text[], $2::bytea[], $3::bytea[], $4::text[],
                     $5::text[], $6::bytea[], $7::bigint[], $8::text[], $10::text[],
                     $11::bytea[])
                     WITH ORDINALITY AS c(run_id, workflow_id, name, status, parent_id,
                         idempotency_key, created_at, state, body, code_version, ord)
             ), run AS (
                 INSERT INTO runs (run_id, workflow_id, name, status, finished, parent_id,
                     idempotency_key, created_at, next_seq, state, state_seq, owner, epoch,
                     last_writer, code_version)
                 SELECT run_id, workflow_id, name, status, false, parent_id, idempotency_key,
                     created_at, 1, state, 1, $9, 1, $9, code_version
                 FROM c ORDER BY ord
                 ON CONFLICT DO NOTHING
                 RETURNING run_id
             ), ev AS (
                 INSERT INTO events (run_id, seq, correlation_id, body)
                 SELECT c.run_id, 0, NULL, c.body FROM c
                 WHERE c.run_id IN (SELECT run_id FROM run)
             )
             SELECT run_id FROM run",
        )
        .bind(&ids)
        .bind(&workflow_ids)
        .bind(&names)
        .bind(&statuses)
        .bind(&parents)
        .bind(&keys)
        .bind(&created)
        .bind(&states)
        .bind(&self.inner.member_id)
        .bind(&bodies)
        .bind(&versions)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| self.err("creating runs", e))?;
        // A flushed commit: it carried every earlier one of the writer to disk.
        self.inner.unflushed.lock().clear();
        Ok(inserted)
    }
}

impl PostgresStore {
    /// What this store knows of a run it just created: it holds the run (epoch 1) and has its
    /// state; other processes hear of a new run.
    pub(crate) fn created(&self, state: WorkflowState, first: Arc<Event>) {
        // A run driven from outside is nobody's to hold: whichever process its runtime calls
        // writes it, under the row lock of each append.
        if !state.external {
            self.inner.held.lock().insert(
                state.id.clone(),
                Held {
                    epoch: 1,
                    seen_seq: 1,
                },
            );
        }
        let run_id = state.id.clone();
        self.cache_put(&run_id, (1, 1), Arc::new(state), &[first]);
        self.announce(crate::notify::Change::Claimable, &run_id);
    }

    /// Why a run was not inserted: its run id or its workflow id is taken (read on the same
    /// connection, so inside the caller's transaction if there is one).
    pub(crate) async fn why_not_created(
        &self,
        conn: &mut PgConnection,
        state: &WorkflowState,
    ) -> WorldError {
        let holder: Result<Option<(String, bool)>, _> = sqlx::query_as(
            "SELECT run_id, run_id = $1 FROM runs WHERE run_id = $1 OR workflow_id = $2
             ORDER BY (run_id = $1) DESC LIMIT 1",
        )
        .bind(&state.id)
        .bind(state.workflow_id.as_bytes())
        .fetch_optional(&mut *conn)
        .await;
        match holder {
            Err(e) => self.err("creating a run", e),
            Ok(Some((_, true))) => WorldError::Conflict {
                message: format!("a run with id {} already exists", state.id),
            },
            Ok(Some((holder, false))) => WorldError::Conflict {
                message: format!(
                    "workflow id '{}' is already used by run {holder}; workflow ids must be unique",
                    state.workflow_id
                ),
            },
            // Taken and gone again between the two statements: still not created.
            Ok(None) => WorldError::Conflict {
                message: format!(
                    "run {} or its workflow id '{}' was taken while it was being created",
                    state.id, state.workflow_id
                ),
            },
        }
    }
}
