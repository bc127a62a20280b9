//! A worker's follow-up: the next task of a run, made by the task a worker is executing, stays
//! with that worker and runs as soon as its task ends, instead of going through the queue.
//!
//! After a step completes, its run's workflow task is due at once; after a workflow task
//! schedules a step, that step is due at once. Through the queue each costs an insertion, the
//! wake-up of another worker (often on another thread) and a removal, and the run's tasks
//! interleave with every other run's, so a burst of runs all finish late together. Kept by the
//! worker, the follow-up costs none of that and a run moves on while its data is warm: after a
//! burst of timers, runs finish one after another instead of all at the end.
//!
//! The queue's promises hold:
//!
//! * **one follow-up per task**: the first task that the executing task makes and that this
//!   worker may take (its task queue is the worker's) is kept; later ones are queued;
//! * **better work first**: when the queue holds a task this worker could take with a higher
//!   priority, the follow-up is queued instead;
//! * **no monopoly**: after [`MAX_STREAK`] follow-ups in a row, a worker's next task comes from
//!   the queue, so one long chain of steps cannot keep it from the runs waiting there;
//! * **never from step code**: a step's code may start runs or resume hooks, and what it makes
//!   must not wait for the step to end: step code runs with no follow-up open ([`closed`]);
//! * **never lost**: a worker asked to stop puts its follow-up back in the queue, and the
//!   liveness monitor does the same for a worker it declares dead (the slot is shared with it).
//!
//! A kept task was counted as pending when it was made, like a queued one, and is executing as
//! far as anyone counting is concerned: nothing waits on it differently.

use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::queue::{QueueEntry, QueueFilter, TaskQueue};

use super::Task;

/// Follow-ups a worker runs in a row before it takes its next task from the queue.
pub(crate) const MAX_STREAK: u32 = 16;

tokio::task_local! {
    /// The follow-up of the worker whose task is executing; `None` inside step code.
    static CURRENT: Option<Arc<FollowUp>>;
}

/// One worker's follow-up slot.
pub(crate) struct FollowUp {
    /// The task queue the worker serves; `None` takes from every queue.
    task_queue: Option<Arc<str>>,
    state: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    kept: Option<QueueEntry<Task>>,
    /// The worker was declared dead: nothing more is kept.
    closed: bool,
    /// Follow-ups run in a row since the worker last took a task from the queue.
    streak: u32,
}

impl FollowUp {
    /// The slot of a worker that serves `task_queue` (`None`: every queue).
    pub(crate) fn new(task_queue: Option<&str>) -> Arc<FollowUp> {
        Arc::new(FollowUp {
            task_queue: task_queue.map(Arc::from),
            state: Mutex::new(Slot::default()),
        })
    }

    /// Runs `task`, a worker's task, with this slot open to what it makes.
    pub(crate) fn scope<F: Future>(self: &Arc<Self>, task: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(Some(self.clone()), task)
    }

    /// The worker took a task from the queue: a new streak begins.
    pub(crate) fn served_the_queue(&self) {
        self.state.lock().streak = 0;
    }

    /// Takes the kept task, to run it now.
    pub(crate) fn next(&self) -> Option<QueueEntry<Task>> {
        let mut slot = self.state.lock();
        let kept = slot.kept.take();
        if kept.is_some() {
            slot.streak += 1;
        }
        kept
    }

    /// Takes the kept task to put it back in the queue and keeps nothing from now on: the
    /// worker was declared dead, and its task may still make one before it is aborted.
    pub(crate) fn close(&self) -> Option<QueueEntry<Task>> {
        let mut slot = self.state.lock();
        slot.closed = true;
        slot.kept.take()
    }

    /// What the worker takes from the queue: its own task queue, or every queue.
    pub(crate) fn filter(&self) -> QueueFilter<'_> {
        match &self.task_queue {
            Some(q) => QueueFilter::Only(q),
            None => QueueFilter::Any,
        }
    }

    /// Keeps `entry` if the rules allow; gives it back otherwise.
    fn keep(&self, entry: QueueEntry<Task>, queue: &TaskQueue<Task>) -> Option<QueueEntry<Task>> {
        let mine = match (&self.task_queue, &entry.task_queue) {
            (None, _) => true,
            (Some(served), Some(q)) => served == q,
            (Some(_), None) => false,
        };
        if !mine {
            return Some(entry);
        }
        let mut slot = self.state.lock();
        if slot.closed || slot.kept.is_some() || slot.streak >= MAX_STREAK {
            return Some(entry);
        }
        if queue
            .best_priority(self.filter())
            .is_some_and(|best| best > entry.priority)
        {
            return Some(entry);
        }
        slot.kept = Some(entry);
        None
    }
}

/// Offers `entry` to the follow-up of the worker whose task made it. Returns it when it must
/// be queued: no worker's task is executing here, step code made it, or the rules say so.
pub(crate) fn offer(entry: QueueEntry<Task>, queue: &TaskQueue<Task>) -> Option<QueueEntry<Task>> {
    let slot = CURRENT.try_with(Clone::clone).ok().flatten();
    match slot {
        Some(slot) => slot.keep(entry, queue),
        None => Some(entry),
    }
}

/// Runs `future` (step code) with no follow-up open: what it makes is queued at once.
pub(crate) fn closed<F: Future>(future: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(None, future)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(run: &str, priority: i32, task_queue: Option<&str>) -> QueueEntry<Task> {
        QueueEntry {
            task: Task::Workflow {
                run_id: Arc::from(run),
            },
            run_id: Arc::from(run),
            priority,
            scheduled_at: 0,
            task_queue: task_queue.map(Arc::from),
        }
    }

    fn run_of(entry: &Option<QueueEntry<Task>>) -> Option<&str> {
        entry.as_ref().map(|e| &*e.run_id)
    }

    /// Each case: the worker's queue, what is queued already, the offers in order; then which
    /// offers are queued rather than kept.
    #[tokio::test]
    async fn what_a_worker_keeps() {
        type Case = (
            &'static str,
            Option<&'static str>,
            Vec<(&'static str, i32, Option<&'static str>)>,
            Vec<(&'static str, i32, Option<&'static str>)>,
            Option<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "the first is kept",
                None,
                vec![],
                vec![("a", 0, None), ("b", 0, None)],
                Some("a"),
            ),
            (
                "equal priority waiting: kept",
                None,
                vec![("q", 0, None)],
                vec![("a", 0, None)],
                Some("a"),
            ),
            (
                "better work waiting: queued",
                None,
                vec![("q", 5, None)],
                vec![("a", 0, None)],
                None,
            ),
            (
                "better work elsewhere: kept",
                Some("gpu"),
                vec![("q", 5, None)],
                vec![("a", 0, Some("gpu"))],
                Some("a"),
            ),
            (
                "another queue's task: queued",
                Some("gpu"),
                vec![],
                vec![("a", 0, None), ("b", 0, Some("cpu"))],
                None,
            ),
            (
                "an unassigned worker takes any queue",
                None,
                vec![],
                vec![("a", 0, Some("cpu"))],
                Some("a"),
            ),
        ];
        for (name, served, queued, offers, kept) in cases {
            let queue = TaskQueue::new();
            for (run, priority, q) in queued {
                queue.push(task(run, priority, q));
            }
            let slot = FollowUp::new(served);
            let offered = offers.len();
            let given_back = slot
                .scope(async {
                    offers
                        .into_iter()
                        .filter_map(|(run, priority, q)| offer(task(run, priority, q), &queue))
                        .count()
                })
                .await;
            let next = slot.next();
            assert_eq!(run_of(&next), kept, "{name}");
            assert_eq!(given_back, offered - usize::from(kept.is_some()), "{name}");
        }
    }

    #[tokio::test]
    async fn outside_a_task_and_inside_step_code_nothing_is_kept() {
        let queue = TaskQueue::new();
        assert!(offer(task("a", 0, None), &queue).is_some(), "no task");
        let slot = FollowUp::new(None);
        let inside_step = slot
            .scope(closed(async { offer(task("a", 0, None), &queue) }))
            .await;
        assert!(inside_step.is_some(), "step code");
        assert!(slot.next().is_none());
    }

    #[tokio::test]
    async fn a_streak_ends_after_the_limit_and_a_task_from_the_queue_starts_a_new_one() {
        let queue = TaskQueue::new();
        let slot = FollowUp::new(None);
        slot.served_the_queue();
        let mut run = 0;
        while slot
            .scope(async { offer(task("a", 0, None), &queue) })
            .await
            .is_none()
        {
            assert!(slot.next().is_some());
            run += 1;
        }
        assert_eq!(run, MAX_STREAK);
        slot.served_the_queue();
        assert!(slot
            .scope(async { offer(task("a", 0, None), &queue) })
            .await
            .is_none());
    }

    #[tokio::test]
    async fn a_closed_slot_gives_its_task_back_and_keeps_nothing_more() {
        let queue = TaskQueue::new();
        let slot = FollowUp::new(None);
        assert!(slot
            .scope(async { offer(task("a", 0, None), &queue) })
            .await
            .is_none());
        assert_eq!(run_of(&slot.close()), Some("a"));
        assert!(slot
            .scope(async { offer(task("b", 0, None), &queue) })
            .await
            .is_some());
        assert!(slot.next().is_none());
    }
}
