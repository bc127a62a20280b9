//! The in-memory store: fast, and gone when the process exits. The lists and lookups by id of
//! steps, hooks and events are in `read.rs`.

mod owners;
mod read;
mod retention;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::{Mutex, RwLock};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::clock::Millis;
use crate::error::WorldError;
use crate::model::{
    Event, EventKind, ListQuery, Page, ResolveData, RunStatus, WorkflowQueryFilter, WorkflowState,
};

use super::hook_index::{touches_hooks, HookIndex};
use super::{
    Appended, EventStore, IdempotencyStore, LeaseStore, RunStore, Timer, TimerKind, TimerStore,
};

/// One run. `state` and `history` are the tip: every accepted event. Readers see only the
/// first `visible` events (all of them, unless a durable store has not yet published the rest:
/// see [`MemoryStore::append_unpublished`]).
///
/// Kept small: one is allocated per run, sleeping ones included, with the run's state beside
/// it (the run id is the key of [`MemoryStore::runs`] instead of a field).
struct Entry {
    /// Shared, so that a run's final state goes to its waiters without a copy: an append
    /// changes it in place unless someone still holds it ([`Arc::make_mut`]).
    state: Arc<WorkflowState>,
    history: Vec<Arc<Event>>,
    /// Events readers may see; 0 for a run whose creation is not published yet. A `u32` (with
    /// the status beside it) keeps an `Entry` within a smaller allocation size class.
    visible: u32,
    /// The status after the visible events (what the status index files the run under).
    visible_status: RunStatus,
    /// Set when the run was removed (`retention.rs`): a writer that found the entry before
    /// then gets a 404 instead of writing to a run no reader can see.
    removed: bool,
}

impl Entry {
    /// The number of events readers may see.
    fn visible(&self) -> usize {
        self.visible as usize
    }

    /// The state readers see: the tip when everything is published, else rebuilt from the
    /// published events (a rare path: a read racing a durable write). `None` if the run's
    /// creation is not published.
    fn visible_state(&self) -> Option<std::borrow::Cow<'_, WorkflowState>> {
        if self.removed {
            return None;
        }
        if self.visible() == self.history.len() {
            return Some(std::borrow::Cow::Borrowed(&*self.state));
        }
        if self.visible == 0 {
            return None;
        }
        WorkflowState::from_history(&self.history[..self.visible()])
            .ok()
            .map(std::borrow::Cow::Owned)
    }
}

type Shared = Arc<Mutex<Entry>>;

/// A run of a [`MemoryStore`], as returned by its unpublished writes, to publish them later.
#[derive(Clone)]
pub(crate) struct RunHandle {
    run_id: Arc<str>,
    entry: Shared,
}

/// The indexes over all runs. Kept apart from the runs themselves so that appending to one run
/// (the hot path) locks only that run; the indexes are touched when a run is created or changes
/// status. Every entry shares the run's one `Arc<str>` id instead of holding a copy.
#[derive(Default)]
struct Index {
    /// Run ids; run ids are ULIDs, so this is also creation order.
    ids: BTreeSet<Arc<str>>,
    /// Workflow id → run, for runs whose workflow id is not their run id. Most runs keep the
    /// default (their run id): they are found by run id and take no entry here.
    by_workflow_id: FxHashMap<Arc<str>, Arc<str>>,
    /// Runs that have an entry in `by_workflow_id`.
    custom_workflow_id: FxHashSet<Arc<str>>,
    by_status: FxHashMap<RunStatus, BTreeSet<Arc<str>>>,
    by_name: FxHashMap<String, BTreeSet<Arc<str>>>,
    by_parent: FxHashMap<String, BTreeSet<Arc<str>>>,
    /// Idempotency key → the newest run started with it, and when. Keys are chosen by callers,
    /// so this map keeps std's keyed hasher.
    by_idempotency_key: HashMap<String, (Arc<str>, Millis)>,
    /// Finished runs by `(ended_at, run id)`, for retention (`retention.rs`).
    ended: BTreeSet<(Millis, Arc<str>)>,
    /// When each run in `ended` ended, to find its entry there again.
    ended_at: FxHashMap<Arc<str>, Millis>,
}

impl Index {
    /// Files a new run (whose id is `id`) under its id, workflow id, name, parent and
    /// idempotency key, refusing a taken run id or workflow id. Not under a status: the caller
    /// files it.
    fn add_run(&mut self, id: &Arc<str>, state: &WorkflowState) -> Result<(), WorldError> {
        if self.ids.contains(id) {
            return Err(WorldError::conflict(format!(
                "a run with id {id} already exists"
            )));
        }
        let workflow_id = state.workflow_id.as_str();
        // Taken by a run with that custom workflow id, or by a run whose run id it is and
        // whose workflow id is that run id.
        let existing = self.by_workflow_id.get(workflow_id).or_else(|| {
            self.ids
                .get(workflow_id)
                .filter(|run| !self.custom_workflow_id.contains(&***run))
        });
        if let Some(existing) = existing {
            return Err(WorldError::conflict(format!(
                "workflow id '{workflow_id}' is already used by run {existing}; workflow ids must be unique"
            )));
        }
        self.ids.insert(id.clone());
        if workflow_id != &**id {
            self.by_workflow_id
                .insert(Arc::from(workflow_id), id.clone());
            self.custom_workflow_id.insert(id.clone());
        }
        self.by_name
            .entry(state.name.clone())
            .or_default()
            .insert(id.clone());
        if let Some(parent) = &state.parent_id {
            self.by_parent
                .entry(parent.clone())
                .or_default()
                .insert(id.clone());
        }
        if let Some(key) = &state.idempotency_key {
            let newer = self
                .by_idempotency_key
                .get(key)
                .is_none_or(|(_, at)| *at <= state.created_at);
            if newer {
                self.by_idempotency_key
                    .insert(key.clone(), (id.clone(), state.created_at));
            }
        }
        Ok(())
    }

    /// Takes back what [`add_run`](Self::add_run) filed for the run `id` (whose state is
    /// `state`): its creation was never published.
    fn remove_run(&mut self, id: &Arc<str>, state: &WorkflowState) {
        self.ids.remove(id);
        if self.custom_workflow_id.remove(id) {
            self.by_workflow_id.remove(state.workflow_id.as_str());
        }
        if let Some(set) = self.by_name.get_mut(&state.name) {
            set.remove(id);
        }
        if let Some(parent) = &state.parent_id {
            if let Some(set) = self.by_parent.get_mut(parent) {
                set.remove(id);
            }
        }
        if let Some(key) = &state.idempotency_key {
            if self
                .by_idempotency_key
                .get(key)
                .is_some_and(|(run, _)| run == id)
            {
                self.by_idempotency_key.remove(key);
            }
        }
    }

    /// Files the run under `now`, removing it from the statuses it may have been filed under;
    /// a finished run also under `ended_at`, its end time.
    fn set_status(
        &mut self,
        run_id: &Arc<str>,
        was: &[RunStatus],
        now: RunStatus,
        ended_at: Millis,
    ) {
        // Not from the set it goes into: taking it out only to put it back costs a search in
        // a set that holds every run with that status.
        for status in was.iter().filter(|s| **s != now) {
            if let Some(set) = self.by_status.get_mut(status) {
                set.remove(run_id);
            }
        }
        self.by_status
            .entry(now)
            .or_default()
            .insert(run_id.clone());
        if let Some(at) = self.ended_at.remove(run_id) {
            self.ended.remove(&(at, run_id.clone()));
        }
        if now.is_terminal() {
            self.ended.insert((ended_at, run_id.clone()));
            self.ended_at.insert(run_id.clone(), ended_at);
        }
    }
}

/// A timer as kept in [`Timers::all`]: [`Timer`]'s fields in its order, the run id shared.
type TimerKey = (Millis, Arc<str>, TimerKind);

/// The durable timers. A run usually has one timer at a time (a sleep, a retry), so each run
/// keeps a small vector, not a set.
#[derive(Default)]
struct Timers {
    /// Every timer, earliest first (the order of [`Timer`]).
    all: BTreeSet<TimerKey>,
    /// Each run's timers, to remove them with the run.
    by_run: FxHashMap<Arc<str>, Vec<(Millis, TimerKind)>>,
}

/// Keeps everything in process memory, with indexes by status, name and parent so queries do
/// not scan every run. Used by tests, by `Persistence::Memory`, and as the reference backend.
///
/// Each run has its own lock, so steps of different runs record concurrently.
#[derive(Default)]
pub struct MemoryStore {
    runs: RwLock<FxHashMap<Arc<str>, Shared>>,
    index: Mutex<Index>,
    timers: Mutex<Timers>,
    /// Taken after a run's lock, never before one.
    hooks: Mutex<HookIndex>,
    /// The run each step id, hook id and child run id was recorded in, for the lookups by id
    /// (see `read.rs`). Ids are unique (ULIDs); should one repeat, the first run to record it
    /// keeps it. Taken after a run's lock, never before one.
    owners: owners::Owners,
    /// The runs' streams (see `store/streams/memory.rs`).
    pub(in crate::store) streams: super::streams::MemoryStreams,
    /// The schedules (see `store/schedules/memory.rs`).
    pub(in crate::store) schedules: super::schedules::MemorySchedules,
    pub(in crate::store) keys: super::keys::MemoryKeys,
    /// The pauses in force (see `store/pauses/memory.rs`).
    pub(in crate::store) pauses: super::pauses::MemoryPauses,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn entry(&self, run_id: &str) -> Option<Shared> {
        self.runs.read().get(run_id).cloned()
    }

    /// The run and its shared id.
    fn entry_with_id(&self, run_id: &str) -> Option<(Arc<str>, Shared)> {
        self.runs
            .read()
            .get_key_value(run_id)
            .map(|(id, entry)| (id.clone(), entry.clone()))
    }

    /// The run's shared id if the run exists, else a new one.
    fn shared_id(&self, run_id: &str) -> Arc<str> {
        match self.runs.read().get_key_value(run_id) {
            Some((id, _)) => id.clone(),
            None => Arc::from(run_id),
        }
    }

    /// The run with this run id, or else this workflow id.
    fn resolve(&self, id: &str) -> Option<Shared> {
        if let Some(entry) = self.entry(id) {
            return Some(entry);
        }
        let run_id = self.index.lock().by_workflow_id.get(id).cloned()?;
        self.entry(&run_id)
    }

    /// Creates a run from its first event, checked (conflicts included) like
    /// [`RunStore::create_run`], but invisible to readers until [`publish`](Self::publish)ed.
    /// The workflow id is taken at once.
    pub(crate) fn create_unpublished(&self, mut first: Event) -> Result<RunHandle, WorldError> {
        first.seq = 0;
        let state = WorkflowState::from_first_event(&first)?;
        let id: Arc<str> = Arc::from(state.id.as_str());
        // The index lock is taken first and held while the run is inserted, so two creations
        // of one workflow id cannot both pass the uniqueness check.
        let mut index = self.index.lock();
        index.add_run(&id, &state)?;
        let visible_status = state.status;
        let entry = Entry {
            state: Arc::new(state),
            history: vec![Arc::new(first)],
            visible: 0,
            visible_status,
            removed: false,
        };
        let entry = Arc::new(Mutex::new(entry));
        self.runs.write().insert(id.clone(), entry.clone());
        Ok(RunHandle { run_id: id, entry })
    }

    /// Appends events like [`EventStore::append`] — checked against every event accepted so far,
    /// published or not, and given the next `seq` — but invisible to readers until
    /// [`publish`](Self::publish)ed.
    pub(crate) fn append_unpublished(
        &self,
        run_id: &str,
        mut events: Vec<Event>,
    ) -> Result<(Appended, RunHandle), WorldError> {
        let (id, shared) = self
            .entry_with_id(run_id)
            .ok_or_else(|| WorldError::not_found("run", run_id))?;
        let (status, events, ended) = {
            let mut entry = shared.lock();
            if entry.removed {
                return Err(WorldError::not_found("run", run_id));
            }
            // Held from the check to the update, so two runs cannot both take one token.
            let mut hooks = touches_hooks(&events).then(|| self.hooks.lock());
            if let Some(hooks) = &hooks {
                hooks.check(run_id, &events)?;
            }
            // All or nothing. Each event is checked against the state the earlier ones left,
            // and applied. If one is refused after others were applied, the state is rebuilt
            // from the untouched history: O(history), but only on that rare path.
            let first_seq = entry.history.len() as u64;
            if first_seq + events.len() as u64 > u64::from(u32::MAX) {
                return Err(WorldError::invalid(
                    "events",
                    format!(
                        "run {run_id} has {first_seq} events, the most one history can hold; continue the work in a new run"
                    ),
                ));
            }
            for (i, event) in events.iter_mut().enumerate() {
                if let Err(refused) = entry.state.check(&event.kind) {
                    if i > 0 {
                        entry.state = Arc::new(WorkflowState::from_history(&entry.history)?);
                    }
                    return Err(refused);
                }
                event.seq = first_seq + i as u64;
                Arc::make_mut(&mut entry.state).apply(event);
            }
            if let Some(hooks) = &mut hooks {
                hooks.apply(run_id, &events, &entry.state);
            }
            drop(hooks);
            self.record_owners(&id, &events);
            let events: Vec<Arc<Event>> = events.into_iter().map(Arc::new).collect();
            entry.history.extend(events.iter().cloned());
            let ended = entry
                .state
                .status
                .is_terminal()
                .then(|| entry.state.clone());
            (entry.state.status, events, ended)
        };
        let run = RunHandle {
            run_id: id,
            entry: shared,
        };
        Ok((
            Appended {
                events,
                status,
                ended,
            },
            run,
        ))
    }

    /// Takes back a run whose creation was never published (its write failed): it is gone
    /// from every index, its workflow id free again.
    pub(crate) fn discard_created(&self, run: &RunHandle) {
        let state = {
            let entry = run.entry.lock();
            if entry.visible != 0 {
                return;
            }
            entry.state.clone()
        };
        let mut index = self.index.lock();
        index.remove_run(&run.run_id, &state);
        self.runs.write().remove(&run.run_id);
    }

    /// Takes back the run's events that were never published (their write failed): the
    /// history ends at what readers see, the state and hook index are rebuilt from it. Returns
    /// how many events were dropped.
    pub(crate) fn discard_unpublished(&self, run: &RunHandle) -> Result<usize, WorldError> {
        let mut entry = run.entry.lock();
        let visible = entry.visible();
        let dropped = entry.history.len() - visible;
        if dropped == 0 || visible == 0 {
            return Ok(0);
        }
        let touched = entry.history[visible..]
            .iter()
            .any(|e| touches_hooks(std::slice::from_ref(&**e)));
        entry.history.truncate(visible);
        entry.state = Arc::new(WorkflowState::from_history(&entry.history)?);
        if touched {
            self.hooks.lock().rebuild_run(&run.run_id, &entry.state);
        }
        Ok(dropped)
    }

    /// Makes the run's first `upto` events visible to readers (no-op for those already are),
    /// and files it under its visible status.
    pub(crate) fn publish(&self, run: &RunHandle, upto: u64) {
        let (was, now) = {
            let mut entry = run.entry.lock();
            let upto = (upto as usize).min(entry.history.len());
            if upto <= entry.visible() {
                return;
            }
            let was = (entry.visible > 0).then_some(entry.visible_status);
            let mut status = entry.visible_status;
            for event in &entry.history[entry.visible()..upto] {
                if let Some(changed) = event.kind.status_change() {
                    status = changed;
                }
            }
            if upto == entry.history.len() {
                status = entry.state.status;
            }
            entry.visible = u32::try_from(upto).unwrap_or(u32::MAX);
            entry.visible_status = status;
            (was, status)
        };
        if was != Some(now) {
            // Index first, then the run: the order `list_runs` takes them in. The status is
            // read again under both locks, so concurrent publishes cannot leave the index stale.
            let mut index = self.index.lock();
            let (current, ended_at, removed) = {
                let entry = run.entry.lock();
                let state = &entry.state;
                let ended_at = state.completed_at.unwrap_or(state.updated_at);
                (entry.visible_status, ended_at, entry.removed)
            };
            if removed {
                return;
            }
            let mut filed: Vec<RunStatus> = was.into_iter().collect();
            filed.push(now);
            index.set_status(&run.run_id, &filed, current, ended_at);
        }
    }

    /// The run's events from `from_seq` on, published or not (see [`EventStore::history_tip`]).
    pub(crate) fn history_tip(
        &self,
        run_id: &str,
        from_seq: u64,
    ) -> Result<Vec<Arc<Event>>, WorldError> {
        let shared = self
            .entry(run_id)
            .ok_or_else(|| WorldError::not_found("run", run_id))?;
        let entry = shared.lock();
        let from = (from_seq as usize).min(entry.history.len());
        Ok(entry.history[from..].to_vec())
    }

    /// Files the step, hook and child ids these events introduce under their run.
    fn record_owners(&self, run_id: &Arc<str>, events: &[Event]) {
        for event in events {
            let id = match &event.kind {
                EventKind::ActivityScheduled { activity_id, .. } => activity_id,
                EventKind::HookCreated { hook_id, .. }
                | EventKind::HookConflict { hook_id, .. } => hook_id,
                EventKind::ChildWorkflowStarted { child_id, .. } => child_id,
                _ => continue,
            };
            self.owners.record(id, run_id);
        }
    }

    /// True if every event of the run is visible (or the run does not exist).
    pub(crate) fn is_published(&self, run_id: &str) -> bool {
        self.entry(run_id).is_none_or(|shared| {
            let entry = shared.lock();
            entry.visible() == entry.history.len()
        })
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
    async fn create_run(&self, first: Event) -> Result<(), WorldError> {
        let run = self.create_unpublished(first)?;
        self.publish(&run, 1);
        Ok(())
    }

    /// Takes the index lock once for the whole batch.
    async fn create_runs(&self, firsts: Vec<Event>) -> Vec<Result<(), WorldError>> {
        let mut results = Vec::with_capacity(firsts.len());
        let mut created = Vec::with_capacity(firsts.len());
        let mut index = self.index.lock();
        for mut first in firsts {
            first.seq = 0;
            let added = WorkflowState::from_first_event(&first).and_then(|state| {
                let id: Arc<str> = Arc::from(state.id.as_str());
                index.add_run(&id, &state).map(|()| (id, state))
            });
            match added {
                Ok((id, state)) => {
                    let ended_at = state.completed_at.unwrap_or(state.updated_at);
                    index.set_status(&id, &[], state.status, ended_at);
                    let entry = Entry {
                        visible_status: state.status,
                        state: Arc::new(state),
                        history: vec![Arc::new(first)],
                        visible: 1,
                        removed: false,
                    };
                    created.push((id, entry));
                    results.push(Ok(()));
                }
                Err(refused) => results.push(Err(refused)),
            }
        }
        let mut runs = self.runs.write();
        for (id, entry) in created {
            runs.insert(id, Arc::new(Mutex::new(entry)));
        }
        results
    }

    async fn get_run(&self, id: &str, resolve: ResolveData) -> Result<WorkflowState, WorldError> {
        let shared = self
            .resolve(id)
            .ok_or_else(|| WorldError::not_found("run", id))?;
        let entry = shared.lock();
        entry
            .visible_state()
            .map(|state| state.view(resolve))
            .ok_or_else(|| WorldError::not_found("run", id))
    }

    async fn list_runs(
        &self,
        filter: &WorkflowQueryFilter,
    ) -> Result<Page<WorkflowState>, WorldError> {
        let limit = filter.limit.unwrap_or(crate::model::DEFAULT_PAGE_SIZE);
        let offset = filter.offset.unwrap_or(0);
        let index = self.index.lock();
        let runs = self.runs.read();
        let empty = BTreeSet::new();

        // Start from the narrowest index the filter allows, then check the rest per run.
        let mut candidates: Option<Vec<&BTreeSet<Arc<str>>>> = None;
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
                && filter
                    .workflow_id_prefix
                    .as_ref()
                    .is_none_or(|p| state.workflow_id.starts_with(p.as_str()))
                && filter.started_after.is_none_or(|t| state.created_at >= t)
                && filter.started_before.is_none_or(|t| state.created_at < t)
                && filter
                    .quarantined
                    .is_none_or(|q| state.quarantine.is_some() == q)
                && filter
                    .code_version
                    .as_ref()
                    .is_none_or(|v| state.code_version.as_ref() == Some(v))
        };
        let oldest_first = filter.oldest_first;
        let past_cursor = |id: &str| {
            filter.cursor.as_deref().is_none_or(|c| match oldest_first {
                true => id > c,
                false => id < c,
            })
        };
        // Run ids sort by creation time: newest first is the sets read backwards.
        fn ordered<'a>(
            ids: impl DoubleEndedIterator<Item = &'a Arc<str>> + 'a,
            oldest_first: bool,
        ) -> Box<dyn Iterator<Item = &'a Arc<str>> + 'a> {
            match oldest_first {
                true => Box::new(ids),
                false => Box::new(ids.rev()),
            }
        }
        let ids: Box<dyn Iterator<Item = &Arc<str>>> = match candidates {
            None => ordered(index.ids.iter(), oldest_first),
            Some(sets) if sets.len() == 1 => ordered(sets[0].iter(), oldest_first),
            Some(sets) => {
                let mut merged: Vec<&Arc<str>> = sets.into_iter().flatten().collect();
                merged.sort_unstable();
                ordered(merged.into_iter(), oldest_first)
            }
        };
        let data: Vec<WorkflowState> = ids
            .filter(|id| past_cursor(id))
            .filter_map(|id| runs.get(id))
            .filter_map(|shared| {
                let entry = shared.lock();
                let state = entry.visible_state()?;
                matches(&state).then(|| state.view(filter.resolve_data))
            })
            .skip(offset)
            .take(limit.saturating_add(1))
            .collect();
        Ok(Page::from_overfetch(data, limit, |s| s.id.clone()))
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
                ids.extend(set.iter().map(|id| id.to_string()));
            }
        }
        ids.sort();
        Ok(ids)
    }
}

#[async_trait]
impl IdempotencyStore for MemoryStore {
    async fn find_by_idempotency_key(
        &self,
        key: &str,
        since: Millis,
    ) -> Result<Option<String>, WorldError> {
        let index = self.index.lock();
        Ok(index
            .by_idempotency_key
            .get(key)
            .filter(|(_, at)| *at >= since)
            .map(|(run_id, _)| run_id.to_string()))
    }
}

#[async_trait]
impl EventStore for MemoryStore {
    async fn append(&self, run_id: &str, events: Vec<Event>) -> Result<Appended, WorldError> {
        let (appended, run) = self.append_unpublished(run_id, events)?;
        if let Some(last) = appended.events.last() {
            self.publish(&run, last.seq + 1);
        }
        Ok(appended)
    }

    async fn history(&self, run_id: &str, from_seq: u64) -> Result<Vec<Arc<Event>>, WorldError> {
        let shared = self
            .entry(run_id)
            .ok_or_else(|| WorldError::not_found("run", run_id))?;
        let entry = shared.lock();
        if entry.visible == 0 {
            return Err(WorldError::not_found("run", run_id));
        }
        let from = (from_seq as usize).min(entry.visible());
        Ok(entry.history[from..entry.visible()].to_vec())
    }

    async fn list_events(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        self.read_events(run_id, query)
    }

    async fn list_events_by_correlation_id(
        &self,
        correlation_id: &str,
        query: &ListQuery,
    ) -> Result<Page<Arc<Event>>, WorldError> {
        self.read_correlated_events(correlation_id, query)
    }
}

/// One process: every unfinished run is this process's to drive (the defaults).
impl LeaseStore for MemoryStore {}

#[async_trait]
impl TimerStore for MemoryStore {
    async fn add_timer(&self, timer: Timer) -> Result<(), WorldError> {
        let run_id = self.shared_id(&timer.run_id);
        let mut timers = self.timers.lock();
        if timers
            .all
            .insert((timer.fire_at, run_id.clone(), timer.kind.clone()))
        {
            let list = timers.by_run.entry(run_id).or_default();
            if list.capacity() == 0 {
                // A run rarely has more than one timer at a time: no room for four.
                list.reserve_exact(1);
            }
            list.push((timer.fire_at, timer.kind));
        }
        Ok(())
    }

    async fn take_due_timers(&self, now: Millis, limit: usize) -> Result<Vec<Timer>, WorldError> {
        let mut timers = self.timers.lock();
        let mut due = Vec::new();
        while due.len() < limit {
            let Some(first) = timers.all.first() else {
                break;
            };
            if first.0 > now {
                break;
            }
            let Some((fire_at, run_id, kind)) = timers.all.pop_first() else {
                break;
            };
            if let Some(list) = timers.by_run.get_mut(&run_id) {
                list.retain(|(at, k)| (*at, k) != (fire_at, &kind));
                if list.is_empty() {
                    timers.by_run.remove(&run_id);
                }
            }
            due.push(Timer {
                fire_at,
                run_id: String::from(&*run_id),
                kind,
            });
        }
        Ok(due)
    }

    async fn next_timer_at(&self) -> Result<Option<Millis>, WorldError> {
        Ok(self.timers.lock().all.first().map(|t| t.0))
    }

    async fn remove_run_timers(&self, run_id: &str) -> Result<bool, WorldError> {
        let mut timers = self.timers.lock();
        // A run's entry goes when its last timer is taken, so an entry holds at least one.
        let Some((run_id, list)) = timers.by_run.remove_entry(run_id) else {
            return Ok(false);
        };
        for (fire_at, kind) in list {
            timers.all.remove(&(fire_at, run_id.clone(), kind));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{QueuedRun, EVENT_FORMAT_VERSION};
    use crate::payload::Payload;

    fn event(run_id: &str, kind: EventKind) -> Event {
        Event {
            id: String::new(),
            run_id: run_id.to_owned(),
            seq: 0,
            timestamp: 1,
            version: EVENT_FORMAT_VERSION,
            kind,
        }
    }

    /// Creates run `run_id` and starts it.
    async fn started_run(store: &MemoryStore, run_id: &str) {
        let queued = QueuedRun::new("w", run_id, Payload::null());
        store
            .create_run(event(run_id, EventKind::WorkflowQueued(Box::new(queued))))
            .await
            .unwrap();
        let started = EventKind::WorkflowStarted {
            attempt: 1,
            first_position: 0,
        };
        store
            .append(run_id, vec![event(run_id, started)])
            .await
            .unwrap();
    }

    /// A reader that took a run's entry before a sweep removed the run reads nothing of it
    /// afterwards: its state and history are gone, and nothing is read past their end.
    #[tokio::test]
    async fn an_entry_held_across_a_removal_reads_as_gone() {
        use crate::store::{Removal, RetentionStore};
        let store = MemoryStore::new();
        let run_id = "wrun_held";
        started_run(&store, run_id).await;
        let completed = EventKind::WorkflowCompleted {
            output: Payload::null(),
        };
        store
            .append(run_id, vec![event(run_id, completed)])
            .await
            .unwrap();
        let (_, held) = store.entry_with_id(run_id).unwrap();
        let removed = store.remove_run(run_id, i64::MAX).await.unwrap();
        assert!(
            matches!(removed, Removal::Removed { events: 3 }),
            "{removed:?}"
        );
        let entry = held.lock();
        assert!(entry.visible_state().is_none());
        assert!(entry.history[..entry.visible()].is_empty());
    }

    /// An append changes the run's state where it is: the state is shared (with a finished
    /// run's waiters), and a copy-on-write state still held by a reader would be copied whole
    /// on every append, making each step of a long run cost more than the one before.
    #[tokio::test]
    async fn appends_change_the_run_state_in_place_without_copying_it() {
        let store = MemoryStore::new();
        let run_id = "wrun_in_place";
        started_run(&store, run_id).await;
        let (_, shared) = store.entry_with_id(run_id).unwrap();
        let state_at = Arc::as_ptr(&shared.lock().state);
        for position in 0..200 {
            let scheduled = EventKind::ActivityScheduled {
                position,
                activity_id: format!("step_{position}"),
                name: "a".into(),
                input: Payload::null(),
                options: None,
                inline: false,
            };
            let appended = store
                .append(run_id, vec![event(run_id, scheduled)])
                .await
                .unwrap();
            assert!(appended.ended.is_none());
            // Readers in between take copies of what they read, not the state itself.
            store.get_run(run_id, ResolveData::All).await.unwrap();
            let entry = shared.lock();
            assert_eq!(Arc::strong_count(&entry.state), 1, "after step {position}");
            assert!(
                std::ptr::eq(Arc::as_ptr(&entry.state), state_at),
                "step {position} copied the run's state"
            );
        }
    }
}
