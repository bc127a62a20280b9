//! [`EventStore`]: appends (one transaction each, fenced by the lease) and history reads.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{PgConnection, Row};
use worlds_engine::model::{ListQuery, Page, SortOrder};
use worlds_engine::store::{Appended, EventStore};
use worlds_engine::{Event, EventKind, HookStatus, ResolveData, WorkflowState, WorldError};

use crate::db::{big, from_json, to_json, unsigned};
use crate::reads::{number_cursor, DEFAULT_PAGE};
use crate::PostgresStore;

/// The hook events that change the `hooks` table.
fn hook_position(kind: &EventKind) -> Option<u32> {
    match kind {
        EventKind::HookCreated { position, .. }
        | EventKind::HookConflict { position, .. }
        | EventKind::HookReceived { position, .. }
        | EventKind::HookExpired { position, .. }
        | EventKind::HookDisposed { position, .. } => Some(*position),
        _ => None,
    }
}

impl PostgresStore {
    /// Reads a run's events from `from_seq` on, in order.
    pub(crate) async fn read_history(
        &self,
        conn: &mut PgConnection,
        run_id: &str,
        from_seq: i64,
    ) -> Result<Vec<Event>, WorldError> {
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT body FROM events WHERE run_id = $1 AND seq >= $2 ORDER BY seq",
        )
        .bind(run_id)
        .bind(from_seq)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| self.err("reading a history", e))?;
        rows.iter().map(|body| from_json("event", body)).collect()
    }

    /// The run's state after `next_seq` events: the cached one, or rebuilt from the events.
    async fn state_at(
        &self,
        conn: &mut PgConnection,
        run_id: &str,
        next_seq: i64,
    ) -> Result<Arc<WorkflowState>, WorldError> {
        if let Some(state) = self.cache_get(run_id, next_seq) {
            return Ok(state);
        }
        let history = self.read_history(conn, run_id, 0).await?;
        let state = WorkflowState::from_history(&history)?;
        Ok(Arc::new(state))
    }

    /// The append of [`EventStore::append`]: one transaction that locks the run's row, checks
    /// the lease epoch this store holds (if any) and the events, inserts them and updates the
    /// run.
    pub(crate) async fn append_events(
        &self,
        run_id: &str,
        mut events: Vec<Event>,
    ) -> Result<Appended, WorldError> {
        let me = &self.inner.member_id;
        let mut tx = self
            .inner
            .pool
            .begin()
            .await
            .map_err(|e| self.err("starting an append", e))?;
        let row =
            sqlx::query("SELECT next_seq, owner, epoch FROM runs WHERE run_id = $1 FOR UPDATE")
                .bind(run_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| self.err("locking a run for an append", e))?
                .ok_or_else(|| WorldError::NotFound {
                    what: "run",
                    id: run_id.to_owned(),
                })?;
        let next_seq: i64 = row.get(0);
        let owner: Option<String> = row.get(1);
        let epoch: i64 = row.get(2);
        let held = self.inner.held.lock().get(run_id).copied();
        if let Some(held) = held {
            if owner.as_deref() != Some(me.as_str()) || epoch != held.epoch {
                drop(tx);
                self.inner.held.lock().remove(run_id);
                self.inner.cache.lock().remove(run_id);
                return Err(WorldError::LeaseLost {
                    run_id: run_id.to_owned(),
                });
            }
        }
        let base = self.state_at(&mut tx, run_id, next_seq).await?;
        if events.is_empty() {
            return Ok(Appended {
                events: Vec::new(),
                status: base.status,
            });
        }
        if unsigned(next_seq) + events.len() as u64 > u64::from(u32::MAX) {
            return Err(WorldError::InvalidInput {
                field: "events".into(),
                message: format!(
                    "run {run_id} has {next_seq} events, the most one history can hold; continue the work in a new run"
                ),
            });
        }
        let mut state = WorkflowState::clone(&base);
        let mut correlation = Vec::with_capacity(events.len());
        for (i, event) in events.iter_mut().enumerate() {
            state.check(&event.kind)?;
            event.seq = unsigned(next_seq) + i as u64;
            event.run_id = run_id.to_owned();
            state.apply(event);
            correlation.push(state.correlation_id(&event.kind).map(str::to_owned));
        }
        self.check_tokens(&mut tx, run_id, &events).await?;

        let bodies = events
            .iter()
            .map(|e| to_json("event", e))
            .collect::<Result<Vec<_>, _>>()?;
        let seqs: Vec<i64> = events.iter().map(|e| big(e.seq)).collect();
        let new_next = next_seq + events.len() as i64;
        let state_json = to_json("run state", &state)?;
        let finished = state.status.is_terminal();
        sqlx::query(
            "WITH ins AS (
                 INSERT INTO events (run_id, seq, correlation_id, body)
                 SELECT $1, s, c, b FROM UNNEST($2::bigint[], $3::text[], $4::text[]) AS t(s, c, b)
             )
             UPDATE runs SET next_seq = $5, status = $6, finished = $7, quarantined = $8,
                 state = $9, last_writer = $10
             WHERE run_id = $1",
        )
        .bind(run_id)
        .bind(&seqs)
        .bind(&correlation)
        .bind(&bodies)
        .bind(new_next)
        .bind(state.status.as_str())
        .bind(finished)
        .bind(state.quarantine.is_some())
        .bind(&state_json)
        .bind(me)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.err("appending events", e))?;
        self.write_owners(&mut tx, run_id, &events, &state).await?;
        tx.commit()
            .await
            .map_err(|e| self.err("committing an append", e))?;

        let status = state.status;
        self.cache_put(run_id, new_next, Arc::new(state));
        {
            let mut held = self.inner.held.lock();
            if finished {
                held.remove(run_id);
            } else if let Some(h) = held.get_mut(run_id) {
                // Another process's write in between stays unseen: external_changes reports it.
                if h.seen_seq == next_seq {
                    h.seen_seq = new_next;
                }
            }
        }
        Ok(Appended {
            events: events.into_iter().map(Arc::new).collect(),
            status,
        })
    }

    /// Refuses a `hook_created` whose token a waiting hook of another run or position holds.
    async fn check_tokens(
        &self,
        conn: &mut PgConnection,
        run_id: &str,
        events: &[Event],
    ) -> Result<(), WorldError> {
        let created: Vec<(u32, &str)> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::HookCreated {
                    position,
                    token_digest,
                    ..
                } => Some((*position, token_digest.as_str())),
                _ => None,
            })
            .collect();
        if created.is_empty() {
            return Ok(());
        }
        let digests: Vec<&str> = created.iter().map(|(_, d)| *d).collect();
        let rows = sqlx::query(
            "SELECT token_digest, run_id, position FROM hooks WHERE live AND token_digest = ANY($1)",
        )
        .bind(&digests)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| self.err("checking hook tokens", e))?;
        for row in rows {
            let digest: String = row.get(0);
            let holder_run: String = row.get(1);
            let holder_position: i32 = row.get(2);
            let same = created.iter().any(|(position, d)| {
                *d == digest
                    && holder_run == run_id
                    && i64::from(*position) == i64::from(holder_position)
            });
            if !same {
                return Err(WorldError::Conflict {
                    message: format!(
                        "hook token is held by the waiting hook #{holder_position} of run {holder_run}"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Files the steps and hooks these events introduce or change, by id.
    async fn write_owners(
        &self,
        conn: &mut PgConnection,
        run_id: &str,
        events: &[Event],
        state: &WorkflowState,
    ) -> Result<(), WorldError> {
        let mut step_ids = Vec::new();
        let mut step_positions = Vec::new();
        let mut hook_positions: Vec<u32> = Vec::new();
        for event in events {
            if let EventKind::ActivityScheduled {
                activity_id,
                position,
                ..
            } = &event.kind
            {
                step_ids.push(activity_id.as_str());
                step_positions.push(i64::from(*position));
            }
            if let Some(position) = hook_position(&event.kind) {
                if !hook_positions.contains(&position) {
                    hook_positions.push(position);
                }
            }
        }
        if !step_ids.is_empty() {
            sqlx::query(
                "INSERT INTO steps (step_id, run_id, position)
                 SELECT s, $1, p FROM UNNEST($2::text[], $3::bigint[]) AS t(s, p)
                 ON CONFLICT (step_id) DO NOTHING",
            )
            .bind(run_id)
            .bind(&step_ids)
            .bind(&step_positions)
            .execute(&mut *conn)
            .await
            .map_err(|e| self.err("recording step ids", e))?;
        }
        let mut hook_ids = Vec::new();
        let mut positions = Vec::new();
        let mut digests = Vec::new();
        let mut live = Vec::new();
        for position in hook_positions {
            if let Some(hook) = state.hook(position) {
                hook_ids.push(hook.id.as_str());
                positions.push(i64::from(position));
                digests.push(hook.token_digest.as_str());
                live.push(hook.status == HookStatus::Waiting && !state.status.is_terminal());
            }
        }
        if !hook_ids.is_empty() {
            sqlx::query(
                "INSERT INTO hooks (hook_id, run_id, position, token_digest, live)
                 SELECT h, $1, p, d, l FROM UNNEST($2::text[], $3::bigint[], $4::text[], $5::bool[]) AS t(h, p, d, l)
                 ON CONFLICT (hook_id) DO UPDATE SET live = EXCLUDED.live
                 WHERE hooks.run_id = EXCLUDED.run_id",
            )
            .bind(run_id)
            .bind(&hook_ids)
            .bind(&positions)
            .bind(&digests)
            .bind(&live)
            .execute(&mut *conn)
            .await
            .map_err(|e| match crate::db::unique_violation(&e) {
                Some(_) => WorldError::Conflict {
                    message: "hook token is held by another waiting hook".into(),
                },
                None => self.err("recording hooks", e),
            })?;
        }
        if state.status.is_terminal() {
            sqlx::query("UPDATE hooks SET live = false, run_over = true WHERE run_id = $1")
                .bind(run_id)
                .execute(&mut *conn)
                .await
                .map_err(|e| self.err("freeing a finished run's hook tokens", e))?;
        }
        Ok(())
    }

    /// True if the run exists.
    pub(crate) async fn run_exists(&self, run_id: &str) -> Result<bool, WorldError> {
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = $1)")
            .bind(run_id)
            .fetch_one(&self.inner.pool)
            .await
            .map_err(|e| self.err("looking up a run", e))
    }

    /// One page of events matching `filter_sql` (a condition on `$1`), keyed by `seq`.
    async fn event_page(
        &self,
        by_correlation: bool,
        id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        let after = number_cursor::<u64>(query)?.map(big);
        let limit = query.limit.unwrap_or(DEFAULT_PAGE);
        let sql = match (by_correlation, query.order) {
            (false, SortOrder::Ascending) => "SELECT body FROM events WHERE run_id = $1 AND ($2::bigint IS NULL OR seq > $2) ORDER BY seq LIMIT $3",
            (false, SortOrder::Descending) => "SELECT body FROM events WHERE run_id = $1 AND ($2::bigint IS NULL OR seq < $2) ORDER BY seq DESC LIMIT $3",
            (true, SortOrder::Ascending) => "SELECT body FROM events WHERE correlation_id = $1 AND run_id = (SELECT run_id FROM events WHERE correlation_id = $1 ORDER BY run_id, seq LIMIT 1) AND ($2::bigint IS NULL OR seq > $2) ORDER BY seq LIMIT $3",
            (true, SortOrder::Descending) => "SELECT body FROM events WHERE correlation_id = $1 AND run_id = (SELECT run_id FROM events WHERE correlation_id = $1 ORDER BY run_id, seq LIMIT 1) AND ($2::bigint IS NULL OR seq < $2) ORDER BY seq DESC LIMIT $3",
        };
        let rows: Vec<String> = sqlx::query_scalar(sql)
            .bind(id)
            .bind(after)
            .bind(big(limit as u64).saturating_add(1))
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| self.err("listing events", e))?;
        let mut data = rows
            .iter()
            .map(|body| {
                let mut event: Event = from_json("event", body)?;
                if query.resolve_data == ResolveData::None {
                    event.kind.strip_data();
                }
                Ok(Arc::new(event))
            })
            .collect::<Result<Vec<_>, WorldError>>()?;
        let has_more = data.len() > limit;
        data.truncate(limit);
        let cursor = if has_more {
            data.last().map(|e| e.seq.to_string())
        } else {
            None
        };
        Ok(Page {
            data,
            cursor,
            has_more,
        })
    }
}

#[async_trait]
impl EventStore for PostgresStore {
    async fn append(&self, run_id: &str, events: Vec<Event>) -> Result<Appended, WorldError> {
        self.append_events(run_id, events).await
    }

    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Arc<Event>>, WorldError> {
        let mut conn = self
            .inner
            .pool
            .acquire()
            .await
            .map_err(|e| self.err("reading a history", e))?;
        let events = self.read_history(&mut conn, run_id, big(from_seq)).await?;
        if events.is_empty() && !self.run_exists(run_id).await? {
            return Err(WorldError::NotFound {
                what: "run",
                id: run_id.to_owned(),
            });
        }
        Ok(events.into_iter().map(Arc::new).collect())
    }

    async fn list_events(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        let page = self.event_page(false, run_id, query).await?;
        if page.data.is_empty() && !self.run_exists(run_id).await? {
            return Err(WorldError::NotFound {
                what: "run",
                id: run_id.to_owned(),
            });
        }
        Ok(page)
    }

    async fn list_events_by_correlation_id(
        &self,
        correlation_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        self.event_page(true, correlation_id, query).await
    }
}
