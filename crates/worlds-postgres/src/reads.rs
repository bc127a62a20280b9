//! [`StepStore`] and [`HookStore`]: lookups by id through the `steps` and `hooks` tables, and
//! pages over a run's materialized state.

use async_trait::async_trait;
use sqlx::Row;
use worlds_engine::model::{ActivityState, ListQuery, Page, SortOrder};
use worlds_engine::store::{HookRecord, HookRef, HookStore, StepRecord, StepStore};
use worlds_engine::{Event, HookStatus, ResolveData, WorkflowState, WorldError};

use crate::db::{from_json, storable};
use crate::PostgresStore;

/// A run's row as the readers need it: run id, stored state (JSON), `state_seq`, `next_seq`.
pub(crate) type StoredState = (String, String, i64, i64);

impl PostgresStore {
    /// The materialized state of a run (by run id), if it exists.
    pub(crate) async fn load_state(
        &self,
        run_id: &str,
    ) -> Result<Option<WorkflowState>, WorldError> {
        if !storable(run_id) {
            return Ok(None);
        }
        let row: Option<StoredState> =
            sqlx::query_as("SELECT run_id, state, state_seq, next_seq FROM runs WHERE run_id = $1")
                .bind(run_id)
                .fetch_optional(&self.inner.pool)
                .await
                .map_err(|e| self.err("reading a run", e))?;
        match row {
            Some(row) => Ok(Some(self.fresh_state(row).await?)),
            None => Ok(None),
        }
    }

    /// A run's state as of its row's `next_seq`: the stored state (written at `state_seq`)
    /// with the events since applied.
    pub(crate) async fn fresh_state(&self, row: StoredState) -> Result<WorkflowState, WorldError> {
        let (run_id, text, state_seq, next_seq) = row;
        let mut state: WorkflowState = from_json("run state", &text)?;
        if state_seq < next_seq {
            let bodies: Vec<String> = sqlx::query_scalar(
                "SELECT body FROM events WHERE run_id = $1 AND seq >= $2 AND seq < $3
                 ORDER BY seq",
            )
            .bind(&run_id)
            .bind(state_seq)
            .bind(next_seq)
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| self.err("reading a run's latest events", e))?;
            for body in bodies {
                let event: Event = from_json("event", &body)?;
                state.apply(&event);
            }
        }
        Ok(state)
    }

    /// The run (id) a step or hook id was recorded in.
    async fn owner_of(&self, sql: &'static str, id: &str) -> Result<Option<String>, WorldError> {
        if !storable(id) {
            return Ok(None);
        }
        sqlx::query_scalar(sql)
            .bind(id)
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(|e| self.err("looking up an id", e))
    }
}

#[async_trait]
impl StepStore for PostgresStore {
    async fn get_activity(&self, run_id: &str, position: u32) -> Result<ActivityState, WorldError> {
        self.load_state(run_id)
            .await?
            .and_then(|state| state.activity(position).cloned())
            .ok_or_else(|| WorldError::NotFound {
                what: "activity",
                id: format!("{run_id}#{position}"),
            })
    }

    async fn get_step(
        &self,
        step_id: &str,
        resolve: ResolveData,
    ) -> Result<StepRecord, WorldError> {
        let not_found = || WorldError::NotFound {
            what: "step",
            id: step_id.to_owned(),
        };
        let run_id = self
            .owner_of("SELECT run_id FROM steps WHERE step_id = $1", step_id)
            .await?
            .ok_or_else(not_found)?;
        let state = self.load_state(&run_id).await?.ok_or_else(not_found)?;
        let step = state
            .activities
            .iter()
            .find(|a| a.id == step_id)
            .ok_or_else(not_found)?;
        Ok(StepRecord {
            run_id,
            step: step.view(resolve),
        })
    }

    async fn list_steps(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<ActivityState>, WorldError> {
        let after = query.number_cursor::<u32>()?;
        let state = self
            .load_state(run_id)
            .await?
            .ok_or_else(|| WorldError::NotFound {
                what: "run",
                id: run_id.to_owned(),
            })?;
        let found = Page::of_sorted(
            state.activities.iter().collect(),
            |a| a.position,
            after,
            |a| a.position.to_string(),
            query,
        );
        Ok(Page {
            data: found
                .data
                .into_iter()
                .map(|a| a.view(query.resolve_data))
                .collect(),
            cursor: found.cursor,
            has_more: found.has_more,
        })
    }
}

#[async_trait]
impl HookStore for PostgresStore {
    async fn find_hook(&self, token_digest: &str) -> Result<Option<HookRef>, WorldError> {
        // The waiting holder if any, else the newest hook of an unfinished run that had it.
        let row = sqlx::query(
            "SELECT run_id, position FROM hooks WHERE token_digest = $1 AND NOT run_over
             ORDER BY live DESC, created DESC LIMIT 1",
        )
        .bind(token_digest)
        .fetch_optional(&self.inner.pool)
        .await
        .map_err(|e| self.err("finding a hook by token", e))?;
        Ok(row.map(|row| HookRef {
            run_id: row.get(0),
            position: u32::try_from(row.get::<i32, _>(1)).unwrap_or(0),
        }))
    }

    async fn get_hook(&self, hook_id: &str) -> Result<HookRecord, WorldError> {
        let not_found = || WorldError::NotFound {
            what: "hook",
            id: hook_id.to_owned(),
        };
        let run_id = self
            .owner_of("SELECT run_id FROM hooks WHERE hook_id = $1", hook_id)
            .await?
            .ok_or_else(not_found)?;
        let state = self.load_state(&run_id).await?.ok_or_else(not_found)?;
        let hook = state
            .hooks
            .iter()
            .find(|h| h.id == hook_id)
            .cloned()
            .ok_or_else(not_found)?;
        Ok(HookRecord { run_id, hook })
    }

    async fn list_run_hooks(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<HookRecord>, WorldError> {
        let after = query.number_cursor::<u32>()?;
        let state = self
            .load_state(run_id)
            .await?
            .ok_or_else(|| WorldError::NotFound {
                what: "run",
                id: run_id.to_owned(),
            })?;
        let mut items: Vec<_> = state.hooks.iter().collect();
        items.sort_by_key(|h| h.position);
        let found = Page::of_sorted(
            items,
            |h| h.position,
            after,
            |h| h.position.to_string(),
            query,
        );
        Ok(Page {
            data: found
                .data
                .into_iter()
                .map(|hook| HookRecord {
                    run_id: state.id.clone(),
                    hook: hook.clone(),
                })
                .collect(),
            cursor: found.cursor,
            has_more: found.has_more,
        })
    }

    async fn list_waiting_hooks(&self, query: &ListQuery) -> Result<Page<HookRecord>, WorldError> {
        let after = query
            .cursor
            .as_deref()
            .map(|c| {
                let (run_id, position) =
                    c.rsplit_once('#').ok_or_else(|| ListQuery::bad_cursor(c))?;
                let position = position
                    .parse::<u32>()
                    .map_err(|_| ListQuery::bad_cursor(c))?;
                Ok::<_, WorldError>((run_id.to_owned(), i64::from(position)))
            })
            .transpose()?;
        let limit = query.page_size();
        let sql = match query.order {
            SortOrder::Ascending => {
                "SELECT run_id, position FROM hooks WHERE live
                 AND ($1::text IS NULL OR (run_id, position::bigint) > ($1::text COLLATE \"C\", $2::bigint))
                 ORDER BY run_id, position LIMIT $3"
            }
            SortOrder::Descending => {
                "SELECT run_id, position FROM hooks WHERE live
                 AND ($1::text IS NULL OR (run_id, position::bigint) < ($1::text COLLATE \"C\", $2::bigint))
                 ORDER BY run_id DESC, position DESC LIMIT $3"
            }
        };
        let rows = sqlx::query(sql)
            .bind(after.as_ref().map(|(r, _)| r.as_str()))
            .bind(after.as_ref().map(|(_, p)| *p))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1))
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| self.err("listing waiting hooks", e))?;
        let mut data = Vec::with_capacity(rows.len());
        for row in rows {
            let run_id: String = row.get(0);
            let position = u32::try_from(row.get::<i32, _>(1)).unwrap_or(0);
            if let Some(state) = self.load_state(&run_id).await? {
                if let Some(hook) = state
                    .hook(position)
                    .filter(|h| h.status == HookStatus::Waiting)
                {
                    data.push(HookRecord {
                        run_id,
                        hook: hook.clone(),
                    });
                }
            }
        }
        Ok(Page::from_overfetch(data, limit, |h| {
            format!("{}#{}", h.run_id, h.hook.position)
        }))
    }
}
