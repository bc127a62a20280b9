//! [`EventStore`]: appends (group-committed by the writer task of `batch`, fenced by the
//! lease) and history reads.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::PgConnection;
use worlds_engine::model::{ListQuery, Page, SortOrder};
use worlds_engine::store::{Appended, EventStore};
use worlds_engine::{Event, ResolveData, WorldError};

use crate::batch::Level;
use crate::db::{big, from_json, storable};
use crate::PostgresStore;

impl PostgresStore {
    /// Reads a run's events from `from_seq` on, in order.
    pub(crate) async fn read_history(
        &self,
        conn: &mut PgConnection,
        run_id: &str,
        from_seq: i64,
    ) -> Result<Vec<Event>, WorldError> {
        if !storable(run_id) {
            return Ok(Vec::new());
        }
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

    /// True if the run exists.
    pub(crate) async fn run_exists(&self, run_id: &str) -> Result<bool, WorldError> {
        if !storable(run_id) {
            return Ok(false);
        }
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
        let after = query.number_cursor::<u64>()?.map(big);
        let limit = query.page_size();
        if !storable(id) {
            return Ok(Page::from_overfetch(Vec::new(), limit, |e: &Arc<Event>| {
                e.seq.to_string()
            }));
        }
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
        let data = rows
            .iter()
            .map(|body| {
                let mut event: Event = from_json("event", body)?;
                if query.resolve_data == ResolveData::None {
                    event.kind.strip_data();
                }
                Ok(Arc::new(event))
            })
            .collect::<Result<Vec<_>, WorldError>>()?;
        Ok(Page::from_overfetch(data, limit, |e| e.seq.to_string()))
    }
}

#[async_trait]
impl EventStore for PostgresStore {
    async fn append(&self, run_id: &str, events: Vec<Event>) -> Result<Appended, WorldError> {
        self.append_events(run_id, events, Level::Synced).await
    }

    /// Returns at once where the append is accepted at call time (this store holds the run and
    /// its current state); otherwise once committed.
    async fn append_nowait(
        &self,
        run_id: &str,
        events: Vec<Event>,
    ) -> Result<Appended, WorldError> {
        self.append_events(run_id, events, Level::Queued).await
    }

    /// Returns once committed, without waiting for the server to flush the commit to disk
    /// (`synchronous_commit = off` for that commit) when nothing else in its batch needs it.
    async fn append_written(
        &self,
        run_id: &str,
        events: Vec<Event>,
    ) -> Result<Appended, WorldError> {
        let step_start = self.fault_is_step_start(&events);
        let appended = self.append_events(run_id, events, Level::Written).await?;
        if step_start {
            self.fault_after_step_start();
        }
        Ok(appended)
    }

    async fn wait_durable(&self, run_id: &str) -> Result<(), WorldError> {
        self.flush_writes(Some(run_id)).await
    }

    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Arc<Event>>, WorldError> {
        self.fault_read()?;
        let mut conn = self
            .inner
            .pool
            .acquire()
            .await
            .map_err(|e| self.err("reading a history", e))?;
        let events = self.read_history(&mut conn, run_id, big(from_seq)).await?;
        // Back to the pool before asking it for another: holding one connection while waiting
        // for a second starves a busy pool.
        drop(conn);
        if events.is_empty() && !self.run_exists(run_id).await? {
            return Err(WorldError::NotFound {
                what: "run",
                id: run_id.to_owned(),
            });
        }
        if from_seq == 0 {
            // Read back whole: appends are checked against this again.
            self.inner.accepted.lock().read_back(run_id);
        }
        Ok(events.into_iter().map(Arc::new).collect())
    }

    /// The engine's own recent records come from memory when this store holds the run and
    /// nobody else wrote to it since this store last looked; anything else is read from the
    /// database. A run an accepted append of which did not land answers with the error that
    /// poisoned it, until it is read back whole.
    async fn history_tip(
        &self,
        run_id: &str,
        from_seq: u64,
    ) -> Result<Vec<Arc<Event>>, WorldError> {
        if let Some(error) = self.inner.accepted.lock().poison(run_id) {
            // What the engine acts on did not all land: it reads the run back (the error says
            // so), rather than going on from a history that lacks its own records.
            return Err(error);
        }
        match self.cached_tail(run_id, from_seq) {
            Some(events) => Ok(events),
            None => self.history(run_id, from_seq).await,
        }
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
