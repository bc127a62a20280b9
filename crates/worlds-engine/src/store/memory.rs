//! The in-memory store: fast, and gone when the process exits.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::clock::Millis;
use crate::error::WorldError;
use crate::model::{
    ActivityState, Event, Page, ResolveData, RunStatus, WorkflowQueryFilter, WorkflowState,
};

use super::{Appended, RunStore, Timer, TimerStore};

/// Default page size of [`RunStore::list_runs`] when the filter sets no limit.
const DEFAULT_PAGE: usize = 100;

struct Entry {
    state: WorkflowState,
    history: Vec<Event>,
}

#[derive(Default)]
struct Inner {
    /// Runs by id; run ids are ULIDs, so this is also creation order.
    runs: BTreeMap<String, Entry>,
    by_workflow_id: HashMap<String, String>,
    by_status: HashMap<RunStatus, BTreeSet<String>>,
    by_name: HashMap<String, BTreeSet<String>>,
    by_parent: HashMap<String, BTreeSet<String>>,
    timers: BTreeSet<Timer>,
    timers_by_run: HashMap<String, BTreeSet<Timer>>,
}

impl Inner {
    fn resolve_id<'a>(&'a self, id: &'a str) -> Option<&'a str> {
        if self.runs.contains_key(id) {
            Some(id)
        } else {
            self.by_workflow_id.get(id).map(String::as_str)
        }
    }

    fn set_status(&mut self, run_id: &str, from: RunStatus, to: RunStatus) {
        if from == to {
            return;
        }
        if let Some(set) = self.by_status.get_mut(&from) {
            set.remove(run_id);
        }
        self.by_status
            .entry(to)
            .or_default()
            .insert(run_id.to_owned());
    }
}

/// Keeps everything in process memory, with indexes by status, name and parent so queries do
/// not scan every run. Used by tests, by `Persistence::Memory`, and as the reference backend.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("runs", &self.inner.lock().runs.len())
            .finish()
    }
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn create_run(&self, mut first: Event) -> Result<(), WorldError> {
        first.seq = 0;
        let state = WorkflowState::from_first_event(&first)?;
        let mut inner = self.inner.lock();
        if inner.runs.contains_key(&state.id) {
            return Err(WorldError::conflict(format!(
                "a run with id {} already exists",
                state.id
            )));
        }
        if let Some(existing) = inner.by_workflow_id.get(&state.workflow_id) {
            return Err(WorldError::conflict(format!(
                "workflow id '{}' is already used by run {existing}; workflow ids must be unique",
                state.workflow_id
            )));
        }
        let id = state.id.clone();
        inner
            .by_workflow_id
            .insert(state.workflow_id.clone(), id.clone());
        inner
            .by_status
            .entry(state.status)
            .or_default()
            .insert(id.clone());
        inner
            .by_name
            .entry(state.name.clone())
            .or_default()
            .insert(id.clone());
        if let Some(parent) = &state.parent_id {
            inner
                .by_parent
                .entry(parent.clone())
                .or_default()
                .insert(id.clone());
        }
        inner.runs.insert(
            id,
            Entry {
                state,
                history: vec![first],
            },
        );
        Ok(())
    }

    async fn append(&self, run_id: &str, mut events: Vec<Event>) -> Result<Appended, WorldError> {
        let mut inner = self.inner.lock();
        let entry = inner
            .runs
            .get_mut(run_id)
            .ok_or_else(|| WorldError::not_found("run", run_id))?;
        let before = entry.state.status;
        // All or nothing. Each event is checked against the state the earlier ones left, and
        // applied. If one is refused after others were applied, the state is rebuilt from the
        // untouched history: O(history), but only on that rare path.
        let first_seq = entry.history.len() as u64;
        for (i, event) in events.iter_mut().enumerate() {
            if let Err(refused) = entry.state.check(&event.kind) {
                if i > 0 {
                    entry.state = WorkflowState::from_history(&entry.history)?;
                }
                return Err(refused);
            }
            event.seq = first_seq + i as u64;
            entry.state.apply(event);
        }
        entry.history.extend(events.iter().cloned());
        let after = entry.state.status;
        inner.set_status(run_id, before, after);
        Ok(Appended {
            events,
            status: after,
        })
    }

    async fn get_run(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError> {
        let inner = self.inner.lock();
        let run_id = inner
            .resolve_id(id)
            .ok_or_else(|| WorldError::not_found("run", id))?;
        Ok(inner.runs[run_id].state.view(resolve))
    }

    async fn get_activity(&self, run_id: &str, position: u32) -> Result<ActivityState, WorldError> {
        let inner = self.inner.lock();
        inner
            .runs
            .get(run_id)
            .and_then(|e| e.state.activity(position))
            .cloned()
            .ok_or_else(|| WorldError::not_found("activity", format!("{run_id}#{position}")))
    }

    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Event>, WorldError> {
        let inner = self.inner.lock();
        let entry = inner
            .runs
            .get(run_id)
            .ok_or_else(|| WorldError::not_found("run", run_id))?;
        let from = (from_seq as usize).min(entry.history.len());
        Ok(entry.history[from..].to_vec())
    }

    async fn list_runs(
        &self,
        filter: &WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError> {
        let inner = self.inner.lock();
        let limit = filter.limit.unwrap_or(DEFAULT_PAGE);
        let offset = filter.offset.unwrap_or(0);
        let empty = BTreeSet::new();

        // Start from the narrowest index the filter allows, then check the rest per run.
        let mut candidates: Option<Vec<&BTreeSet<String>>> = None;
        if let Some(parent) = &filter.parent_id {
            candidates = Some(vec![inner.by_parent.get(parent).unwrap_or(&empty)]);
        } else if let Some(name) = &filter.workflow_name {
            candidates = Some(vec![inner.by_name.get(name).unwrap_or(&empty)]);
        } else if let Some(status) = &filter.status {
            let sets = RunStatus::ALL
                .into_iter()
                .filter(|s| status.matches(*s))
                .map(|s| inner.by_status.get(&s).unwrap_or(&empty))
                .collect();
            candidates = Some(sets);
        }

        let matches = |state: &WorkflowState| {
            filter
                .status
                .as_ref()
                .is_none_or(|s| s.matches(state.status))
                && filter
                    .workflow_name
                    .as_ref()
                    .is_none_or(|n| *n == state.name)
                && filter
                    .parent_id
                    .as_ref()
                    .is_none_or(|p| state.parent_id.as_ref() == Some(p))
                && filter.started_after.is_none_or(|t| state.created_at >= t)
                && filter.started_before.is_none_or(|t| state.created_at < t)
                && filter
                    .quarantined
                    .is_none_or(|q| state.quarantine.is_some() == q)
        };
        let below_cursor = |id: &str| filter.cursor.as_deref().is_none_or(|c| id < c);

        let ids: Box<dyn Iterator<Item = &String>> = match candidates {
            None => Box::new(inner.runs.keys().rev()),
            Some(sets) if sets.len() == 1 => Box::new(sets[0].iter().rev()),
            Some(sets) => {
                let mut merged: Vec<&String> = sets.into_iter().flatten().collect();
                merged.sort_unstable_by(|a, b| b.cmp(a));
                Box::new(merged.into_iter())
            }
        };
        let mut data: Vec<WorkflowState> = ids
            .filter(|id| below_cursor(id))
            .filter_map(|id| inner.runs.get(id))
            .filter(|e| matches(&e.state))
            .skip(offset)
            .take(limit.saturating_add(1))
            .map(|e| e.state.view(filter.resolve_data))
            .collect();
        let has_more = data.len() > limit;
        data.truncate(limit);
        let cursor = if has_more {
            data.last().map(|s| s.id.clone())
        } else {
            None
        };
        Ok(Page {
            data,
            cursor,
            has_more,
        })
    }

    async fn unfinished_runs(&self) -> Result<Vec<String>, WorldError> {
        let inner = self.inner.lock();
        let mut ids = Vec::new();
        for status in [
            RunStatus::Pending,
            RunStatus::Running,
            RunStatus::Compensating,
        ] {
            if let Some(set) = inner.by_status.get(&status) {
                ids.extend(set.iter().cloned());
            }
        }
        ids.sort();
        Ok(ids)
    }
}

#[async_trait]
impl TimerStore for MemoryStore {
    async fn add_timer(&self, timer: Timer) -> Result<(), WorldError> {
        let mut inner = self.inner.lock();
        inner
            .timers_by_run
            .entry(timer.run_id.clone())
            .or_default()
            .insert(timer.clone());
        inner.timers.insert(timer);
        Ok(())
    }

    async fn take_due_timers(&self, now: Millis, limit: usize) -> Result<Vec<Timer>, WorldError> {
        let mut inner = self.inner.lock();
        let mut due = Vec::new();
        while due.len() < limit {
            let Some(first) = inner.timers.first() else {
                break;
            };
            if first.fire_at > now {
                break;
            }
            let Some(timer) = inner.timers.pop_first() else {
                break;
            };
            if let Some(set) = inner.timers_by_run.get_mut(&timer.run_id) {
                set.remove(&timer);
                if set.is_empty() {
                    inner.timers_by_run.remove(&timer.run_id);
                }
            }
            due.push(timer);
        }
        Ok(due)
    }

    async fn next_timer_at(&self) -> Result<Option<Millis>, WorldError> {
        Ok(self.inner.lock().timers.first().map(|t| t.fire_at))
    }

    async fn remove_run_timers(&self, run_id: &str) -> Result<(), WorldError> {
        let mut inner = self.inner.lock();
        if let Some(set) = inner.timers_by_run.remove(run_id) {
            for timer in set {
                inner.timers.remove(&timer);
            }
        }
        Ok(())
    }
}
