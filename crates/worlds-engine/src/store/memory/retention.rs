//! Retention in the memory store: finished runs by end time (the index's `ended` set), and
//! removing a run from every map that knows it.

use std::sync::Arc;

use async_trait::async_trait;

use crate::clock::Millis;
use crate::error::WorldError;
use crate::model::WorkflowState;
use crate::store::retention::{EndedCursor, EndedRun, Kept, Removal, RemoveRun, RetentionStore};

use super::MemoryStore;

impl MemoryStore {
    /// Removes the run like [`RetentionStore::remove_run`]. `persist` is called with the run's
    /// state once the checks pass, before anything is forgotten, while the run's lock is held
    /// (so no write to the run can come between): a durable store records the removal there,
    /// and if that fails, nothing is removed.
    pub(crate) fn remove_ended_with(
        &self,
        run_id: &str,
        ended_before: Millis,
        persist: impl FnOnce(&WorkflowState) -> Result<(), WorldError>,
    ) -> Result<Removal, WorldError> {
        let Some((id, shared)) = self.entry_with_id(run_id) else {
            return Ok(Removal::Gone);
        };
        // The state of the run's relatives, read before its lock is taken (a run's lock is
        // never held while another run's is taken). A finished parent or child does not come
        // back unless reopened by hand, and a new child needs an unfinished parent, which the
        // checks below refuse.
        let (parent_id, children) = {
            let entry = shared.lock();
            (entry.state.parent_id.clone(), entry.state.children.clone())
        };
        if let Some(parent_id) = parent_id {
            if self.is_unfinished(&parent_id) {
                return Ok(Removal::Kept(Kept::ParentRunning { parent_id }));
            }
        }
        if let Some(child_id) = children.into_iter().find(|child| self.is_unfinished(child)) {
            return Ok(Removal::Kept(Kept::ChildRunning { child_id }));
        }
        // Index, then run: the order `list_runs` and `publish` take them in.
        let index = self.index.lock();
        let entry = shared.lock();
        if entry.removed {
            return Ok(Removal::Gone);
        }
        let state = entry.state.clone();
        if !state.status.is_terminal() || !entry.visible_status.is_terminal() {
            return Ok(Removal::Kept(Kept::Unfinished));
        }
        let ended_at = state.completed_at.unwrap_or(state.updated_at);
        if ended_at >= ended_before {
            return Ok(Removal::Kept(Kept::EndedLater { ended_at }));
        }
        persist(&state)?;
        let events = self.forget_locked(run_id, &id, index, entry, state);
        Ok(Removal::Removed { events })
    }

    /// Forgets the run `run_id` whatever its status or relatives, like a removal: a durable
    /// store replaying a removal it recorded (the checks passed when it was made), or one that
    /// found the run's files gone (another process removed it). Returns false if there was no
    /// such run.
    pub(crate) fn forget_run(&self, run_id: &str) -> bool {
        let Some((id, shared)) = self.entry_with_id(run_id) else {
            return false;
        };
        let index = self.index.lock();
        let entry = shared.lock();
        if entry.removed {
            return false;
        }
        let state = entry.state.clone();
        self.forget_locked(run_id, &id, index, entry, state);
        true
    }

    /// Forgets a run whose index and entry locks the caller holds (released here); returns the
    /// events its history held.
    fn forget_locked(
        &self,
        run_id: &str,
        id: &Arc<str>,
        mut index: parking_lot::MutexGuard<'_, super::Index>,
        mut entry: parking_lot::MutexGuard<'_, super::Entry>,
        state: Arc<WorkflowState>,
    ) -> u64 {
        let id = id.clone();
        entry.removed = true;
        let events = entry.history.len() as u64;
        entry.history = Vec::new();
        // A reader that took the entry before the removal reads nothing of it, rather than
        // past the end of a history that is gone.
        entry.visible = 0;
        drop(entry);

        index.remove_run(&id, &state);
        for set in index.by_status.values_mut() {
            set.remove(&id);
        }
        if let Some(at) = index.ended_at.remove(&id) {
            index.ended.remove(&(at, id.clone()));
        }
        if let Some(parent) = &state.parent_id {
            if index
                .by_parent
                .get(parent)
                .is_some_and(|set| set.is_empty())
            {
                index.by_parent.remove(parent);
            }
        }
        self.runs.write().remove(&id);
        drop(index);

        self.hooks.lock().forget_run(run_id);
        for activity in &state.activities {
            self.owners.forget(&activity.id, &id);
        }
        for hook in &state.hooks {
            self.owners.forget(&hook.id, &id);
        }
        for child in &state.children {
            self.owners.forget(child, &id);
        }
        {
            let mut timers = self.timers.lock();
            if let Some((run, list)) = timers.by_run.remove_entry(run_id) {
                for (fire_at, kind) in list {
                    timers.all.remove(&(fire_at, run.clone(), kind));
                }
            }
        }
        self.streams.forget_run(run_id);
        events
    }

    /// True if the run exists and has not finished (as readers see it).
    fn is_unfinished(&self, run_id: &str) -> bool {
        self.entry(run_id).is_some_and(|shared| {
            let entry = shared.lock();
            !entry.removed
                && (!entry.visible_status.is_terminal() || !entry.state.status.is_terminal())
        })
    }

    /// The finished runs of [`RetentionStore::ended_runs`].
    pub(crate) fn list_ended(
        &self,
        before: Millis,
        after: Option<&EndedCursor>,
        limit: usize,
    ) -> Vec<EndedRun> {
        let ids: Vec<Arc<str>> = {
            let index = self.index.lock();
            let from =
                after.map(|cursor| (cursor.ended_at, Arc::<str>::from(cursor.run_id.as_str())));
            let mut found = Vec::new();
            let mut range: Box<dyn Iterator<Item = &(Millis, Arc<str>)>> = match &from {
                Some(from) => Box::new(index.ended.range((
                    std::ops::Bound::Excluded(from.clone()),
                    std::ops::Bound::Unbounded,
                ))),
                None => Box::new(index.ended.iter()),
            };
            while found.len() < limit {
                match range.next() {
                    Some((at, id)) if *at < before => found.push(id.clone()),
                    _ => break,
                }
            }
            found
        };
        let runs = self.runs.read();
        ids.iter()
            .filter_map(|id| runs.get(id))
            .filter_map(|shared| {
                let entry = shared.lock();
                let state = &entry.state;
                (!entry.removed && entry.visible_status.is_terminal()).then(|| EndedRun {
                    run_id: state.id.clone(),
                    name: state.name.clone(),
                    status: entry.visible_status,
                    quarantined: state.quarantine.is_some(),
                    created_at: state.created_at,
                    ended_at: state.completed_at.unwrap_or(state.updated_at),
                    has_idempotency_key: state.idempotency_key.is_some(),
                })
            })
            .collect()
    }
}

#[async_trait]
impl RetentionStore for MemoryStore {
    async fn ended_runs(
        &self,
        before: Millis,
        after: Option<&EndedCursor>,
        limit: usize,
    ) -> Result<Vec<EndedRun>, WorldError> {
        Ok(self.list_ended(before, after, limit))
    }

    async fn remove_runs(&self, runs: &[RemoveRun]) -> Result<Vec<Removal>, WorldError> {
        runs.iter()
            .map(|run| self.remove_ended_with(&run.run_id, run.ended_before, |_| Ok(())))
            .collect()
    }
}
