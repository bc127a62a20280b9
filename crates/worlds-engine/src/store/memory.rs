//! The in-memory store: fast, and gone when the process exits.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;

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
    history: Vec<Arc<Event>>,
}

type Shared = Arc<Mutex<Entry>>;

/// The indexes over all runs. Kept apart from the runs themselves so that appending to one run
/// (the hot path) locks only that run; the indexes are touched when a run is created or changes
/// status.
#[derive(Default)]
struct Index {
    /// Run ids; run ids are ULIDs, so this is also creation order.
    ids: BTreeSet<String>,
    by_workflow_id: HashMap<String, String>,
    by_status: HashMap<RunStatus, BTreeSet<String>>,
    by_name: HashMap<String, BTreeSet<String>>,
    by_parent: HashMap<String, BTreeSet<String>>,
}

impl Index {
    /// Files the run under `now`, removing it from the statuses it may have been filed under.
    fn set_status(&mut self, run_id: &str, was: &[RunStatus], now: RunStatus) {
        for status in was {
            if let Some(set) = self.by_status.get_mut(status) {
                set.remove(run_id);
            }
        }
        self.by_status
            .entry(now)
            .or_default()
            .insert(run_id.to_owned());
    }
}

#[derive(Default)]
struct Timers {
    all: BTreeSet<Timer>,
    by_run: HashMap<String, BTreeSet<Timer>>,
}

/// Keeps everything in process memory, with indexes by status, name and parent so queries do
/// not scan every run. Used by tests, by `Persistence::Memory`, and as the reference backend.
///
/// Each run has its own lock, so steps of different runs record concurrently.
#[derive(Default)]
pub struct MemoryStore {
    runs: RwLock<FxHashMap<String, Shared>>,
    index: Mutex<Index>,
    timers: Mutex<Timers>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn entry(&self, run_id: &str) -> Option<Shared> {
        self.runs.read().get(run_id).cloned()
    }

    /// The run with this run id, or else this workflow id.
    fn resolve(&self, id: &str) -> Option<Shared> {
        if let Some(entry) = self.entry(id) {
            return Some(entry);
        }
        let run_id = self.index.lock().by_workflow_id.get(id).cloned()?;
        self.entry(&run_id)
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("runs", &self.runs.read().len())
            .finish()
    }
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn create_run(&self, mut first: Event) -> Result<(), WorldError> {
        first.seq = 0;
        let state = WorkflowState::from_first_event(&first)?;
        let id = state.id.clone();
        // The index lock is taken first and held while the run is inserted, so two creations
        // of one workflow id cannot both pass the uniqueness check.
        let mut index = self.index.lock();
        if index.ids.contains(&id) {
            return Err(WorldError::conflict(format!(
                "a run with id {id} already exists"
            )));
        }
        if let Some(existing) = index.by_workflow_id.get(&state.workflow_id) {
            return Err(WorldError::conflict(format!(
                "workflow id '{}' is already used by run {existing}; workflow ids must be unique",
                state.workflow_id
            )));
        }
        index.ids.insert(id.clone());
        index
            .by_workflow_id
            .insert(state.workflow_id.clone(), id.clone());
        index
            .by_status
            .entry(state.status)
            .or_default()
            .insert(id.clone());
        index
            .by_name
            .entry(state.name.clone())
            .or_default()
            .insert(id.clone());
        if let Some(parent) = &state.parent_id {
            index
                .by_parent
                .entry(parent.clone())
                .or_default()
                .insert(id.clone());
        }
        let entry = Entry {
            state,
            history: vec![Arc::new(first)],
        };
        self.runs.write().insert(id, Arc::new(Mutex::new(entry)));
        Ok(())
    }

    async fn append(&self, run_id: &str, mut events: Vec<Event>) -> Result<Appended, WorldError> {
        let shared = self
            .entry(run_id)
            .ok_or_else(|| WorldError::not_found("run", run_id))?;
        let (before, after, events) = {
            let mut entry = shared.lock();
            let before = entry.state.status;
            // All or nothing. Each event is checked against the state the earlier ones left,
            // and applied. If one is refused after others were applied, the state is rebuilt
            // from the untouched history: O(history), but only on that rare path.
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
            let events: Vec<Arc<Event>> = events.into_iter().map(Arc::new).collect();
            entry.history.extend(events.iter().cloned());
            (before, entry.state.status, events)
        };
        if before != after {
            // Index first, then the run: the order `list_runs` takes them in. The status is
            // read again under both locks, so concurrent appends cannot leave the index stale.
            let mut index = self.index.lock();
            let now = shared.lock().state.status;
            index.set_status(run_id, &[before, after], now);
        }
        Ok(Appended {
            events,
            status: after,
        })
    }

    async fn get_run(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError> {
        let shared = self
            .resolve(id)
            .ok_or_else(|| WorldError::not_found("run", id))?;
        let entry = shared.lock();
        Ok(entry.state.view(resolve))
    }

    async fn get_activity(&self, run_id: &str, position: u32) -> Result<ActivityState, WorldError> {
        self.entry(run_id)
            .and_then(|shared| shared.lock().state.activity(position).cloned())
            .ok_or_else(|| WorldError::not_found("activity", format!("{run_id}#{position}")))
    }

    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Arc<Event>>, WorldError> {
        let shared = self
            .entry(run_id)
            .ok_or_else(|| WorldError::not_found("run", run_id))?;
        let entry = shared.lock();
        let from = (from_seq as usize).min(entry.history.len());
        Ok(entry.history[from..].to_vec())
    }

    async fn list_runs(
        &self,
        filter: &WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError> {
        let limit = filter.limit.unwrap_or(DEFAULT_PAGE);
        let offset = filter.offset.unwrap_or(0);
        let index = self.index.lock();
        let runs = self.runs.read();
        let empty = BTreeSet::new();

        // Start from the narrowest index the filter allows, then check the rest per run.
        let mut candidates: Option<Vec<&BTreeSet<String>>> = None;
        if let Some(parent) = &filter.parent_id {
            candidates = Some(vec![index.by_parent.get(parent).unwrap_or(&empty)]);
        } else if let Some(name) = &filter.workflow_name {
            candidates = Some(vec![index.by_name.get(name).unwrap_or(&empty)]);
        } else if let Some(status) = &filter.status {
            let sets = RunStatus::ALL
                .into_iter()
                .filter(|s| status.matches(*s))
                .map(|s| index.by_status.get(&s).unwrap_or(&empty))
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
            None => Box::new(index.ids.iter().rev()),
            Some(sets) if sets.len() == 1 => Box::new(sets[0].iter().rev()),
            Some(sets) => {
                let mut merged: Vec<&String> = sets.into_iter().flatten().collect();
                merged.sort_unstable_by(|a, b| b.cmp(a));
                Box::new(merged.into_iter())
            }
        };
        let mut data: Vec<WorkflowState> = ids
            .filter(|id| below_cursor(id))
            .filter_map(|id| runs.get(id))
            .filter_map(|shared| {
                let entry = shared.lock();
                matches(&entry.state).then(|| entry.state.view(filter.resolve_data))
            })
            .skip(offset)
            .take(limit.saturating_add(1))
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
        let index = self.index.lock();
        let mut ids = Vec::new();
        for status in [
            RunStatus::Pending,
            RunStatus::Running,
            RunStatus::Compensating,
        ] {
            if let Some(set) = index.by_status.get(&status) {
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
        let mut timers = self.timers.lock();
        timers
            .by_run
            .entry(timer.run_id.clone())
            .or_default()
            .insert(timer.clone());
        timers.all.insert(timer);
        Ok(())
    }

    async fn take_due_timers(&self, now: Millis, limit: usize) -> Result<Vec<Timer>, WorldError> {
        let mut timers = self.timers.lock();
        let mut due = Vec::new();
        while due.len() < limit {
            let Some(first) = timers.all.first() else {
                break;
            };
            if first.fire_at > now {
                break;
            }
            let Some(timer) = timers.all.pop_first() else {
                break;
            };
            if let Some(set) = timers.by_run.get_mut(&timer.run_id) {
                set.remove(&timer);
                if set.is_empty() {
                    timers.by_run.remove(&timer.run_id);
                }
            }
            due.push(timer);
        }
        Ok(due)
    }

    async fn next_timer_at(&self) -> Result<Option<Millis>, WorldError> {
        Ok(self.timers.lock().all.first().map(|t| t.fire_at))
    }

    async fn remove_run_timers(&self, run_id: &str) -> Result<(), WorldError> {
        let mut timers = self.timers.lock();
        if let Some(set) = timers.by_run.remove(run_id) {
            for timer in set {
                timers.all.remove(&timer);
            }
        }
        Ok(())
    }
}
