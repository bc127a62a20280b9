//! Named steps (`ctx.step("name", || async { .. })`): step code that lives in a workflow as a
//! closure instead of a registered activity.
//!
//! The closure is handed to a worker like an activity attempt, with the same history, retries
//! and timeouts. It cannot be stored, so this process keeps it here, keyed by run and command
//! position, from the moment the workflow issues the step until the step's result is recorded.
//! After a restart the closure exists again only once the workflow replays to that call: a
//! worker that takes an attempt whose closure is missing *parks* it and asks for the run to be
//! replayed; the replay registers the closure, which releases the parked attempt.

use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use super::authoring::activity::ActivityFn;
use super::ActivityTask;

type Key = (Arc<str>, u32);

/// The closures of named steps of this process's runs.
#[derive(Default)]
pub(crate) struct LocalSteps {
    closures: Mutex<FxHashMap<Key, ActivityFn>>,
    /// Attempts taken before their closure was registered.
    parked: Mutex<FxHashMap<Key, ActivityTask>>,
    /// Parked attempts whose closure has arrived, for the executor to queue again.
    released: Mutex<Vec<ActivityTask>>,
}

impl LocalSteps {
    /// Registers (or replaces) the closure of the step at `position` of `run_id`, releasing an
    /// attempt parked for it.
    pub(crate) fn register(&self, run_id: &str, position: u32, step: ActivityFn) {
        let key: Key = (Arc::from(run_id), position);
        // Closure first, then the parked check: `park` looks for the closure while holding the
        // parked map, so an attempt is either run at once or found here.
        self.closures.lock().insert(key.clone(), step);
        if let Some(task) = self.parked.lock().remove(&key) {
            self.released.lock().push(task);
        }
    }

    /// The closure of a step, if registered.
    pub(crate) fn get(&self, run_id: &str, position: u32) -> Option<ActivityFn> {
        self.closures
            .lock()
            .get(&(Arc::from(run_id), position))
            .cloned()
    }

    /// Parks an attempt until its closure is registered (returns `None`). Hands the attempt
    /// back if the closure arrived meanwhile, so the caller can run it at once.
    pub(crate) fn park(&self, task: ActivityTask) -> Option<ActivityTask> {
        let key: Key = (task.run_id.clone(), task.position);
        let mut parked = self.parked.lock();
        if self.closures.lock().contains_key(&key) {
            return Some(task);
        }
        parked.insert(key, task);
        None
    }

    /// Attempts released since the last call.
    pub(crate) fn take_released(&self) -> Vec<ActivityTask> {
        std::mem::take(&mut *self.released.lock())
    }

    /// Forgets a step whose result is recorded.
    pub(crate) fn forget(&self, run_id: &str, position: u32) {
        self.closures.lock().remove(&(Arc::from(run_id), position));
    }

    /// Forgets every step of a finished run.
    pub(crate) fn forget_run(&self, run_id: &str) {
        self.closures.lock().retain(|(run, _), _| &**run != run_id);
        self.parked.lock().retain(|(run, _), _| &**run != run_id);
    }

    /// Closures held now (for tests of the bookkeeping).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.closures.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::Payload;

    fn task(run: &str, position: u32) -> ActivityTask {
        ActivityTask {
            run_id: Arc::from(run),
            workflow_id: run.to_owned(),
            activity_id: format!("step_{position}"),
            position,
            name: Arc::from("named"),
            input: Payload::null(),
            attempt: 1,
            options: None,
        }
    }

    fn closure() -> ActivityFn {
        Arc::new(|_ctx, _input| Box::pin(async { Ok(Payload::null()) }))
    }

    #[test]
    fn a_parked_attempt_is_released_when_its_closure_arrives() {
        let steps = LocalSteps::default();
        assert!(steps.park(task("r", 1)).is_none());
        assert!(steps.take_released().is_empty());
        steps.register("r", 2, closure());
        assert!(steps.take_released().is_empty(), "another position");
        steps.register("r", 1, closure());
        let released = steps.take_released();
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].position, 1);
        // With the closure present, parking hands the attempt straight back.
        assert!(steps.park(task("r", 1)).is_some());
    }

    #[test]
    fn closures_go_when_their_step_or_run_is_done() {
        let steps = LocalSteps::default();
        steps.register("a", 1, closure());
        steps.register("a", 2, closure());
        steps.register("b", 1, closure());
        assert_eq!(steps.len(), 3);
        steps.forget("a", 1);
        assert!(steps.get("a", 1).is_none());
        steps.forget_run("a");
        assert_eq!(steps.len(), 1);
        assert!(steps.get("b", 1).is_some());
    }
}
