//! The memory store's steps and hooks duties ([`StepStore`], [`HookStore`]) and its event lists:
//! lookups by id through the owner index, and pages over a run's visible state and history.
//!
//! Every list is kept in ascending order of its key (a `seq`, a command position, a run id and
//! position), so a page is the items past the cursor in the asked order, and the cursor is the
//! key of the page's last item.

use std::sync::Arc;

use async_trait::async_trait;

use crate::error::WorldError;
use crate::model::{
    ActivityState, Event, HookStatus, ListQuery, Page, ResolveData, SortOrder, WorkflowState,
};
use crate::store::hook_index::HookRef;
use crate::store::{HookRecord, HookStore, StepRecord, StepStore};

use super::MemoryStore;

/// True if an item with `key` comes after the cursor `after` in the query's order.
fn past<K: Ord>(key: &K, after: Option<&K>, order: SortOrder) -> bool {
    after.is_none_or(|after| match order {
        SortOrder::Ascending => key > after,
        SortOrder::Descending => key < after,
    })
}

fn empty<T>() -> Page<T> {
    Page {
        data: Vec::new(),
        cursor: None,
        has_more: false,
    }
}

/// The event as the query asks for it: shared as stored, or a copy without payloads.
fn event_view(event: &Arc<Event>, resolve: ResolveData) -> Arc<Event> {
    match resolve {
        ResolveData::All => event.clone(),
        ResolveData::None => {
            let mut copy = Event::clone(event);
            copy.kind.strip_data();
            Arc::new(copy)
        }
    }
}

impl MemoryStore {
    /// The run a step, hook or child id was recorded in.
    pub(in crate::store) fn owner_of(&self, id: &str) -> Option<Arc<str>> {
        self.owners.get(id)
    }

    /// Runs `read` on the run's visible state and events; `None` if the run does not exist or
    /// its creation is not published.
    fn read_run<T>(
        &self,
        run_id: &str,
        read: impl FnOnce(&WorkflowState, &[Arc<Event>]) -> T,
    ) -> Option<T> {
        let shared = self.entry(run_id)?;
        let entry = shared.lock();
        let state = entry.visible_state()?;
        Some(read(&state, &entry.history[..entry.visible()]))
    }

    /// [`EventStore::list_events`](crate::store::EventStore::list_events). `seq` is the index in
    /// the history, so a page is a slice of it.
    pub(super) fn read_events(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        let after = query.number_cursor::<u64>()?;
        let shared = self
            .entry(run_id)
            .ok_or_else(|| WorldError::not_found("run", run_id))?;
        let entry = shared.lock();
        if entry.visible == 0 {
            return Err(WorldError::not_found("run", run_id));
        }
        let visible = &entry.history[..entry.visible()];
        let at = |seq: u64| {
            usize::try_from(seq)
                .unwrap_or(usize::MAX)
                .min(visible.len())
        };
        let slice = match (after, query.order) {
            (None, _) => visible,
            (Some(seq), SortOrder::Ascending) => &visible[at(seq.saturating_add(1))..],
            (Some(seq), SortOrder::Descending) => &visible[..at(seq)],
        };
        let found = Page::of_sorted(
            slice.iter().collect(),
            |e| e.seq,
            None,
            |e| e.seq.to_string(),
            query,
        );
        Ok(found.map(|e| event_view(e, query.resolve_data)))
    }

    /// [`EventStore::list_events_by_correlation_id`](crate::store::EventStore::list_events_by_correlation_id).
    pub(super) fn read_correlated_events(
        &self,
        correlation_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        let after = query.number_cursor::<u64>()?;
        let Some(run_id) = self.owner_of(correlation_id) else {
            return Ok(empty());
        };
        let found = self.read_run(&run_id, |state, events| {
            let items = events
                .iter()
                .filter(|e| state.correlation_id(&e.kind) == Some(correlation_id))
                .collect();
            let found = Page::of_sorted(items, |e| e.seq, after, |e| e.seq.to_string(), query);
            found.map(|e| event_view(e, query.resolve_data))
        });
        Ok(found.unwrap_or_else(empty))
    }
}

#[async_trait]
impl StepStore for MemoryStore {
    async fn get_activity(&self, run_id: &str, position: u32) -> Result<ActivityState, WorldError> {
        self.read_run(run_id, |state, _| state.activity(position).cloned())
            .flatten()
            .ok_or_else(|| WorldError::not_found("activity", format!("{run_id}#{position}")))
    }

    async fn get_step(
        &self,
        step_id: &str,
        resolve: ResolveData,
    ) -> Result<StepRecord, WorldError> {
        let run_id = self
            .owner_of(step_id)
            .ok_or_else(|| WorldError::not_found("step", step_id))?;
        self.read_run(&run_id, |state, _| {
            let step = state.activities.iter().find(|a| a.id == step_id)?;
            Some(StepRecord {
                run_id: run_id.to_string(),
                step: step.view(resolve),
            })
        })
        .flatten()
        .ok_or_else(|| WorldError::not_found("step", step_id))
    }

    async fn list_steps(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<ActivityState>, WorldError> {
        let after = query.number_cursor::<u32>()?;
        self.read_run(run_id, |state, _| {
            let items = state.activities.iter().collect();
            let found = Page::of_sorted(
                items,
                |a| a.position,
                after,
                |a| a.position.to_string(),
                query,
            );
            found.map(|a| a.view(query.resolve_data))
        })
        .ok_or_else(|| WorldError::not_found("run", run_id))
    }
}

#[async_trait]
impl HookStore for MemoryStore {
    async fn find_hook(&self, token_digest: &str) -> Result<Option<HookRef>, WorldError> {
        Ok(self.hooks.lock().find(token_digest))
    }

    async fn get_hook(&self, hook_id: &str) -> Result<HookRecord, WorldError> {
        let run_id = self
            .owner_of(hook_id)
            .ok_or_else(|| WorldError::not_found("hook", hook_id))?;
        self.read_run(&run_id, |state, _| {
            let hook = state.hooks.iter().find(|h| h.id == hook_id)?;
            Some(HookRecord {
                run_id: run_id.to_string(),
                hook: hook.clone(),
            })
        })
        .flatten()
        .ok_or_else(|| WorldError::not_found("hook", hook_id))
    }

    async fn list_run_hooks(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<HookRecord>, WorldError> {
        let after = query.number_cursor::<u32>()?;
        self.read_run(run_id, |state, _| {
            let mut items: Vec<_> = state.hooks.iter().collect();
            items.sort_by_key(|h| h.position);
            let found = Page::of_sorted(
                items,
                |h| h.position,
                after,
                |h| h.position.to_string(),
                query,
            );
            found.map(|hook| HookRecord {
                run_id: state.id.clone(),
                hook: hook.clone(),
            })
        })
        .ok_or_else(|| WorldError::not_found("run", run_id))
    }

    /// Walks the token index (which holds every waiting hook) instead of every run, and reads
    /// each candidate's run only until the page is full.
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
                Ok::<_, WorldError>((run_id.to_owned(), position))
            })
            .transpose()?;
        // The index lock is released before any run's lock is taken (runs lock first).
        let mut refs: Vec<HookRef> = self.hooks.lock().live();
        refs.sort_by(|a, b| (&a.run_id, a.position).cmp(&(&b.run_id, b.position)));
        if query.order == SortOrder::Descending {
            refs.reverse();
        }
        let limit = query.page_size();
        let data: Vec<HookRecord> = refs
            .into_iter()
            .filter(|r| {
                let key = (r.run_id.clone(), r.position);
                past(&key, after.as_ref(), query.order)
            })
            .filter_map(|r| {
                self.read_run(&r.run_id, |state, _| {
                    let hook = state.hook(r.position)?;
                    (hook.status == HookStatus::Waiting).then(|| HookRecord {
                        run_id: r.run_id.clone(),
                        hook: hook.clone(),
                    })
                })
                .flatten()
            })
            .take(limit.saturating_add(1))
            .collect();
        Ok(Page::from_overfetch(data, limit, |h| {
            format!("{}#{}", h.run_id, h.hook.position)
        }))
    }
}
