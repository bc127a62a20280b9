//! Pauses: holding new work of a workflow or a task queue while an operator says so.
//!
//! A pause on a **workflow** holds its runs that have not started: such a run is accepted and
//! stored (pending), but its first workflow task does not start it. A pause on a **task
//! queue** holds the runs routed to it that have not started, and every step attempt on it
//! that has not started. What runs goes on: started runs take their next workflow tasks
//! (they record results, sleep, end), and step attempts already executing finish.
//!
//! The pauses are the store's ([`PauseStore`](crate::store::PauseStore)); this process keeps
//! them in memory, reads them again after each change it makes and every
//! [`REFRESH`](Pauses::REFRESH) on the world's clock (a change made by another process
//! reaches this one within that), and checks them where work starts: `load` before a pending
//! run's start, `run_activity` before an attempt's. What it held waits in memory, by target,
//! and is queued again when the pause is lifted. Nothing held is lost with the process: a
//! held run is pending in the store and a held attempt is a step not started, both queued
//! again by recovery, and held again if the pause still stands.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::{ActivityTask, Engine};
use crate::error::WorldError;
use crate::model::{Pause, PauseTarget};
use crate::telemetry::logs::world_log;

/// The pauses in force as this process last read them, and the work they hold here.
#[derive(Default)]
pub(crate) struct Pauses {
    /// True while any pause is in force: the check where work starts costs one load when
    /// none is.
    any: AtomicBool,
    state: Mutex<State>,
}

/// A step attempt held, with the task queue it goes back to.
type HeldStep = (ActivityTask, Option<Arc<str>>);

#[derive(Default)]
struct State {
    current: BTreeMap<PauseTarget, Pause>,
    /// Pending runs held, by the pause holding them (a set: a flood of starts during an
    /// incident is what a pause is for, and a run is checked again each time it is queued).
    runs: BTreeMap<PauseTarget, HashSet<Arc<str>>>,
    /// Step attempts held, with the queue they go back to.
    steps: BTreeMap<PauseTarget, Vec<HeldStep>>,
}

/// What lifting pauses gives back to be queued again.
#[derive(Default)]
pub(crate) struct Released {
    pub(crate) runs: Vec<Arc<str>>,
    pub(crate) steps: Vec<HeldStep>,
}

impl Pauses {
    /// How often the pauses are read again, for those set or lifted by another process.
    pub(crate) const REFRESH: Duration = Duration::from_secs(2);

    /// The pause holding a run of `workflow` routed to `task_queue` that has not started.
    pub(crate) fn holding_run(&self, workflow: &str, task_queue: Option<&str>) -> Option<Pause> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let state = self.state.lock();
        state
            .current
            .get(&PauseTarget::Workflow(workflow.to_owned()))
            .or_else(|| {
                task_queue.and_then(|q| state.current.get(&PauseTarget::TaskQueue(q.to_owned())))
            })
            .cloned()
    }

    /// The pause holding a step attempt on `task_queue` that has not started.
    pub(crate) fn holding_step(&self, task_queue: Option<&str>) -> Option<Pause> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let queue = task_queue?;
        self.state
            .lock()
            .current
            .get(&PauseTarget::TaskQueue(queue.to_owned()))
            .cloned()
    }

    /// Holds the pending run `run_id` under `target`'s pause, unless that pause was lifted
    /// since it was checked (then returns false: run it).
    pub(crate) fn hold_run(&self, target: &PauseTarget, run_id: &str) -> bool {
        let mut state = self.state.lock();
        if !state.current.contains_key(target) {
            return false;
        }
        let held = state.runs.entry(target.clone()).or_default();
        if !held.contains(run_id) {
            held.insert(Arc::from(run_id));
        }
        true
    }

    /// Holds a step attempt under `target`'s pause, or gives it back if that pause was lifted
    /// since it was checked.
    pub(crate) fn hold_step(
        &self,
        target: &PauseTarget,
        task: ActivityTask,
        queue: Option<Arc<str>>,
    ) -> Option<ActivityTask> {
        let mut state = self.state.lock();
        if !state.current.contains_key(target) {
            return Some(task);
        }
        state
            .steps
            .entry(target.clone())
            .or_default()
            .push((task, queue));
        None
    }

    /// Takes `pauses` as the ones in force; returns the work held by those no longer in force.
    pub(crate) fn replace(&self, pauses: Vec<Pause>) -> Released {
        let mut state = self.state.lock();
        state.current = pauses.into_iter().map(|p| (p.target.clone(), p)).collect();
        self.any.store(!state.current.is_empty(), Ordering::Release);
        let mut released = Released::default();
        let State {
            current,
            runs,
            steps,
        } = &mut *state;
        runs.retain(|target, held| {
            let keep = current.contains_key(target);
            if !keep {
                released.runs.extend(held.drain());
            }
            keep
        });
        steps.retain(|target, held| {
            let keep = current.contains_key(target);
            if !keep {
                released.steps.append(held);
            }
            keep
        });
        released
    }

    /// How many runs and step attempts this process holds under `target`.
    #[cfg(test)]
    pub(crate) fn held(&self, target: &PauseTarget) -> (usize, usize) {
        let state = self.state.lock();
        (
            state.runs.get(target).map_or(0, HashSet::len),
            state.steps.get(target).map_or(0, Vec::len),
        )
    }
}

impl Engine {
    /// Reads the pauses from the store and queues again what those lifted held here.
    pub(crate) async fn refresh_pauses(&self) -> Result<(), WorldError> {
        let pauses = self.store.list_pauses().await?;
        let released = self.pauses.replace(pauses);
        for run_id in released.runs {
            self.runs.schedule(&run_id);
        }
        for (task, queue) in released.steps {
            self.runs.enqueue_activity(task, queue);
        }
        Ok(())
    }

    /// Pauses `target` (see the module docs), recorded as set by `by` for `reason`.
    pub(crate) async fn pause(
        &self,
        target: PauseTarget,
        by: &str,
        reason: &str,
    ) -> Result<Pause, WorldError> {
        let pause = Pause {
            target,
            by: by.to_owned(),
            reason: reason.to_owned(),
            since: self.now_ms(),
        };
        pause.check()?;
        self.store.save_pause(&pause).await?;
        world_log!(
            self.logs,
            INFO,
            World,
            "paused",
            target = pause.target.to_string(),
            by = pause.by,
            reason = pause.reason,
        );
        self.refresh_pauses().await?;
        Ok(pause)
    }

    /// Lifts the pause on `target`, by `by`; returns it, or `None` if there was none. What it
    /// held in this process is queued at once; in others, within [`Pauses::REFRESH`].
    pub(crate) async fn resume(
        &self,
        target: &PauseTarget,
        by: &str,
    ) -> Result<Option<Pause>, WorldError> {
        target.check()?;
        let lifted = self.store.remove_pause(target).await?;
        if let Some(pause) = &lifted {
            world_log!(
                self.logs,
                INFO,
                World,
                "resumed",
                target = pause.target.to_string(),
                by = by,
                paused_by = pause.by,
                paused_since = pause.since,
            );
        }
        self.refresh_pauses().await?;
        Ok(lifted)
    }

    /// The pauses in force, as the store holds them.
    pub(crate) async fn list_pauses(&self) -> Result<Vec<Pause>, WorldError> {
        self.store.list_pauses().await
    }

    /// Reads the pauses again every [`Pauses::REFRESH`], for those another process changed.
    pub(crate) async fn pause_loop(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let every = crate::clock::duration_ms(Pauses::REFRESH);
        loop {
            let next = self.now_ms().saturating_add(every);
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.clock.sleep_until_background(next) => {}
            }
            if let Err(e) = self.refresh_pauses().await {
                tracing::warn!(error = %e, "could not read the pauses again; those in force as last read still hold");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(target: PauseTarget) -> Pause {
        Pause {
            target,
            by: "ops".into(),
            reason: "incident".into(),
            since: 1,
        }
    }

    #[test]
    fn a_pause_holds_its_workflow_or_queue_until_it_is_lifted() {
        let pauses = Pauses::default();
        let checkout = PauseTarget::Workflow("checkout".into());
        let emails = PauseTarget::TaskQueue("emails".into());
        assert!(pauses.holding_run("checkout", None).is_none());
        pauses.replace(vec![pause(checkout.clone()), pause(emails.clone())]);
        assert_eq!(
            pauses
                .holding_run("checkout", Some("other"))
                .map(|p| p.target),
            Some(checkout.clone())
        );
        assert_eq!(
            pauses
                .holding_run("refund", Some("emails"))
                .map(|p| p.target),
            Some(emails.clone())
        );
        assert!(pauses.holding_run("refund", None).is_none());
        assert!(pauses.holding_step(None).is_none());
        assert!(pauses.holding_step(Some("emails")).is_some());

        let run: Arc<str> = Arc::from("wrun_a");
        assert!(pauses.hold_run(&checkout, &run));
        assert!(pauses.hold_run(&checkout, &run), "held once");
        assert_eq!(pauses.held(&checkout), (1, 0));
        // Lifting the queue's pause gives back nothing of the workflow's.
        let released = pauses.replace(vec![pause(checkout.clone())]);
        assert!(released.runs.is_empty());
        let released = pauses.replace(Vec::new());
        assert_eq!(released.runs, vec![run.clone()]);
        assert_eq!(pauses.held(&checkout), (0, 0));
        // A pause lifted between the check and the hold: the run goes on.
        assert!(!pauses.hold_run(&checkout, &run));
    }
}
