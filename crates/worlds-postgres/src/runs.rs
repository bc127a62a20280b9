//! [`RunStore`] and [`IdempotencyStore`]: creating runs (leased to this store at once),
//! reading and listing them, and idempotency keys.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{PgConnection, Postgres, QueryBuilder};
use worlds_engine::clock::Millis;
use worlds_engine::model::{Page, RunStatus, WorkflowQueryFilter};
use worlds_engine::store::{IdempotencyStore, RunStore};
use worlds_engine::{Event, ResolveData, WorkflowState, WorldError};

use crate::db::{storable, to_json};
use crate::reads::StoredState;
use crate::PostgresStore;

/// Default page size of `list_runs` when the filter sets no limit.
const DEFAULT_RUN_PAGE: usize = 100;

impl PostgresStore {
    /// Creates a run on `conn` (its first event and its row, leased to this store).
    async fn insert_run(
        &self,
        conn: &mut PgConnection,
        mut first: Event,
    ) -> Result<(), WorldError> {
        first.seq = 0;
        let state = WorkflowState::from_first_event(&first)?;
        let body = to_json("event", &first)?;
        let state_json = to_json("run state", &state)?;
        let inserted = sqlx::query(
            "WITH run AS (
                 INSERT INTO runs (run_id, workflow_id, name, status, finished, parent_id,
                     idempotency_key, created_at, next_seq, state, state_seq, owner, epoch,
                     last_writer, code_version)
                 VALUES ($1, $2, $3, $4, false, $5, $6, $7, 1, $8, 1, $9, 1, $9, $11)
                 ON CONFLICT DO NOTHING
                 RETURNING run_id
             )
             INSERT INTO events (run_id, seq, correlation_id, body)
             SELECT run_id, 0, NULL, $10 FROM run",
        )
        .bind(&state.id)
        .bind(state.workflow_id.as_bytes())
        .bind(state.name.as_bytes())
        .bind(state.status.as_str())
        .bind(&state.parent_id)
        .bind(state.idempotency_key.as_deref().map(str::as_bytes))
        .bind(state.created_at)
        .bind(&state_json)
        .bind(&self.inner.member_id)
        .bind(&body)
        .bind(state.code_version.as_deref().map(str::as_bytes))
        .execute(&mut *conn)
        .await;
        // A taken run id or workflow id inserts nothing (instead of failing, which would abort
        // the caller's transaction): say which, read on the same connection.
        let inserted = inserted.map_err(|e| self.err("creating a run", e))?;
        if inserted.rows_affected() == 0 {
            return Err(self.why_not_created(conn, &state).await);
        }
        self.created(state, Arc::new(first));
        Ok(())
    }

    async fn newest_with_key(
        &self,
        conn: &mut PgConnection,
        key: &str,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        sqlx::query_scalar(
            "SELECT run_id FROM runs WHERE idempotency_key = $1 AND created_at >= $2
             ORDER BY created_at DESC, run_id DESC LIMIT 1",
        )
        .bind(key.as_bytes())
        .bind(since)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| self.err("finding an idempotency key", e))
    }
}

#[async_trait]
impl RunStore for PostgresStore {
    /// Group-committed with other creations and appends by the writer.
    async fn create_run(&self, first: Event) -> Result<(), WorldError> {
        self.create_through_writer(first).await
    }

    /// Queued together, so the writer inserts them in as few statements as it can, in order:
    /// of two runs sharing a workflow id, the later is refused.
    async fn create_runs(&self, firsts: Vec<Event>) -> Vec<Result<(), WorldError>> {
        let answers: Vec<_> = firsts
            .into_iter()
            .map(|first| self.queue_creation(first))
            .collect();
        let mut results = Vec::with_capacity(answers.len());
        for answer in answers {
            results.push(match answer {
                Ok(answer) => answer.await.unwrap_or_else(|_| Err(crate::batch::closed())),
                Err(e) => Err(e),
            });
        }
        results
    }

    async fn get_run(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError> {
        self.fault_read()?;
        let row: Option<StoredState> = sqlx::query_as(
            "SELECT run_id, state, state_seq, next_seq FROM runs
             WHERE run_id = $1 OR workflow_id = $2
             ORDER BY (run_id = $1) DESC LIMIT 1",
        )
        // A run id never holds NUL, which a text parameter cannot carry; a workflow id may.
        .bind((!id.contains('\0')).then_some(id))
        .bind(id.as_bytes())
        .fetch_optional(&self.inner.pool)
        .await
        .map_err(|e| self.err("reading a run", e))?;
        let row = row.ok_or_else(|| WorldError::NotFound {
            what: "run",
            id: id.to_owned(),
        })?;
        Ok(self.fresh_state(row).await?.view(resolve))
    }

    async fn list_runs(
        &self,
        filter: &WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError> {
        let limit = filter.limit.unwrap_or(DEFAULT_RUN_PAGE);
        let offset = filter.offset.unwrap_or(0);
        let mut q: QueryBuilder<Postgres> =
            QueryBuilder::new("SELECT run_id, state, state_seq, next_seq FROM runs WHERE true");
        push_filter(&mut q, filter);
        let (past, order) = match filter.oldest_first {
            true => (" AND run_id > ", " ORDER BY run_id ASC OFFSET "),
            false => (" AND run_id < ", " ORDER BY run_id DESC OFFSET "),
        };
        if let Some(cursor) = &filter.cursor {
            if storable(cursor) {
                q.push(past).push_bind(cursor.clone());
            } else {
                // Compared as bytes, as the other stores compare it.
                let past = match filter.oldest_first {
                    true => " AND convert_to(run_id, 'UTF8') > ",
                    false => " AND convert_to(run_id, 'UTF8') < ",
                };
                q.push(past).push_bind(cursor.as_bytes().to_vec());
            }
        }
        q.push(order)
            .push_bind(i64::try_from(offset).unwrap_or(i64::MAX))
            .push(" LIMIT ")
            .push_bind(i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1));
        let rows: Vec<StoredState> = q
            .build_query_as()
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| self.err("listing runs", e))?;
        let mut data = Vec::with_capacity(rows.len());
        for row in rows {
            data.push(self.fresh_state(row).await?.view(filter.resolve_data));
        }
        Ok(Page::from_overfetch(data, limit, |s| s.id.clone()))
    }

    /// One query that stops counting at `cap`, without reading the runs' states.
    async fn count_runs(
        &self,
        filter: &WorkflowQueryFilter,
        cap: usize,
    ) -> Result<usize, WorldError> {
        let mut q: QueryBuilder<Postgres> =
            QueryBuilder::new("SELECT count(*) FROM (SELECT 1 FROM runs WHERE true");
        push_filter(&mut q, filter);
        q.push(" LIMIT ")
            .push_bind(i64::try_from(cap).unwrap_or(i64::MAX))
            .push(") AS capped");
        let count: i64 = q
            .build_query_scalar()
            .fetch_one(&self.inner.pool)
            .await
            .map_err(|e| self.err("counting runs", e))?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    async fn unfinished_runs(&self) -> Result<Vec<String>, WorldError> {
        sqlx::query_scalar("SELECT run_id FROM runs WHERE NOT finished ORDER BY run_id")
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| self.err("listing unfinished runs", e))
    }
}

#[async_trait]
impl IdempotencyStore for PostgresStore {
    async fn find_by_idempotency_key(
        &self,
        key: &str,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        let mut conn = self
            .inner
            .pool
            .acquire()
            .await
            .map_err(|e| self.err("finding an idempotency key", e))?;
        self.newest_with_key(&mut conn, key, since).await
    }

    /// One transaction under a lock on the key, so two processes starting one key at once
    /// create one run.
    async fn create_run_once(
        &self,
        first: Event,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        let Some(key) = first.kind.idempotency_key().map(str::to_owned) else {
            return self.create_run(first).await.map(|()| None);
        };
        let mut tx = self
            .inner
            .pool
            .begin()
            .await
            .map_err(|e| self.err("creating a run", e))?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!("worlds-engine key {} {key}", self.inner.schema))
            .execute(&mut *tx)
            .await
            .map_err(|e| self.err("locking an idempotency key", e))?;
        if let Some(existing) = self.newest_with_key(&mut tx, &key, since).await? {
            return Ok(Some(existing));
        }
        let run_id = first.run_id.clone();
        self.insert_run(&mut tx, first).await?;
        if let Err(e) = tx.commit().await {
            self.inner.held.lock().remove(&run_id);
            self.inner.cache.lock().remove(&run_id);
            return Err(self.err("committing a run", e));
        }
        Ok(None)
    }
}

/// The conditions of `filter` after `WHERE true` (its cursor and order left to the caller).
fn push_filter(q: &mut QueryBuilder<Postgres>, filter: &WorkflowQueryFilter) {
    if let Some(status) = &filter.status {
        let statuses: Vec<&str> = RunStatus::ALL
            .into_iter()
            .filter(|s| status.matches(*s))
            .map(RunStatus::as_str)
            .collect();
        q.push(" AND status = ANY(").push_bind(statuses).push(")");
    }
    if let Some(name) = &filter.workflow_name {
        q.push(" AND name = ").push_bind(name.as_bytes().to_vec());
    }
    if let Some(parent) = &filter.parent_id {
        match storable(parent) {
            true => q.push(" AND parent_id = ").push_bind(parent.clone()),
            // No run id holds NUL.
            false => q.push(" AND false"),
        };
    }
    if let Some(prefix) = &filter.workflow_id_prefix {
        // Workflow ids are stored as bytes.
        let bytes = prefix.as_bytes().to_vec();
        q.push(" AND substr(workflow_id, 1, ")
            .push_bind(i32::try_from(bytes.len()).unwrap_or(i32::MAX))
            .push(") = ")
            .push_bind(bytes);
    }
    if let Some(after) = filter.started_after {
        q.push(" AND created_at >= ").push_bind(after);
    }
    if let Some(before) = filter.started_before {
        q.push(" AND created_at < ").push_bind(before);
    }
    if let Some(quarantined) = filter.quarantined {
        q.push(" AND quarantined = ").push_bind(quarantined);
    }
    if let Some(version) = &filter.code_version {
        q.push(" AND code_version = ")
            .push_bind(version.as_bytes().to_vec());
    }
}
