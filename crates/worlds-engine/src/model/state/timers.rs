//! Timers: [`EventKind::TimerScheduled`] and [`EventKind::TimerFired`], and the run's timers
//! not yet fired ([`PendingTimers`]). A run that finishes, retries or is reopened forgets its
//! timers ([`PendingTimers::clear`]).

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::error::WorldError;

use super::{EventKind, WorkflowState};

/// A run's timers not yet fired, as `(position, fire time)` sorted by position: a run waits on
/// one timer or a few at a time, so a vector sized to them is smaller than a map (this state is
/// kept in memory for every run, sleeping ones included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(super) struct PendingTimers(Box<[(u32, Millis)]>);

impl PendingTimers {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn find(&self, position: u32) -> Result<usize, usize> {
        self.0.binary_search_by_key(&position, |(p, _)| *p)
    }

    pub(super) fn contains(&self, position: u32) -> bool {
        self.find(position).is_ok()
    }

    /// Adds a timer (or moves it). A run holds few timers at a time: the slice is rebuilt
    /// exactly to size, which keeps the state of a sleeping run small.
    pub(super) fn insert(&mut self, position: u32, fire_at: Millis) {
        match self.find(position) {
            Ok(i) => self.0[i].1 = fire_at,
            Err(i) => {
                let mut timers = std::mem::take(&mut self.0).into_vec();
                timers.insert(i, (position, fire_at));
                self.0 = timers.into_boxed_slice();
            }
        }
    }

    pub(super) fn remove(&mut self, position: u32) {
        if let Ok(i) = self.find(position) {
            let mut timers = std::mem::take(&mut self.0).into_vec();
            timers.remove(i);
            self.0 = timers.into_boxed_slice();
        }
    }

    /// Forgets every timer.
    pub(super) fn clear(&mut self) {
        self.0 = Box::default();
    }
}

impl WorkflowState {
    /// Timers scheduled and not yet fired, as (position, fire time).
    pub fn pending_timers(&self) -> impl Iterator<Item = (u32, Millis)> + '_ {
        self.pending_timers.0.iter().copied()
    }
}

/// Whether a timer event may be appended to `state` now.
pub(super) fn check(state: &WorkflowState, kind: &EventKind) -> Result<(), WorldError> {
    match kind {
        EventKind::TimerScheduled { position, .. } => {
            state.takes_step_events()?;
            if state.pending_timers.contains(*position) {
                Err(WorldError::conflict(format!(
                    "run {} already has a timer at position {position}",
                    state.id
                )))
            } else {
                Ok(())
            }
        }
        EventKind::TimerFired { position } => {
            state.takes_step_events()?;
            if state.pending_timers.contains(*position) {
                Ok(())
            } else {
                Err(WorldError::conflict(format!(
                    "run {} has no pending timer at position {position}",
                    state.id
                )))
            }
        }
        _ => unreachable!("{} is not a timer event", kind.type_name()),
    }
}

/// What a timer event accepted by [`check`] changes.
pub(super) fn apply(state: &mut WorkflowState, kind: &EventKind) {
    match kind {
        EventKind::TimerScheduled {
            position, fire_at, ..
        } => {
            state.pending_timers.insert(*position, *fire_at);
        }
        EventKind::TimerFired { position } => {
            state.pending_timers.remove(*position);
        }
        _ => unreachable!("{} is not a timer event", kind.type_name()),
    }
}
