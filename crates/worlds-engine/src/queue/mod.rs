//! In-memory priority task queue shared by workers.
//!
//! Tasks are ordered by **priority descending**, then **scheduled time
//! ascending**, then **insertion order** (FIFO among equals). Each task is
//! routed to a task queue: either the default queue (`task_queue == None`) or
//! a named one. Workers take tasks with a [`QueueFilter`] that selects one
//! queue or all of them.
//!
//! # Layout
//!
//! All state lives behind one [`parking_lot::Mutex`]:
//!
//! * `entries`: a `BTreeMap<TaskKey, QueueEntry<T>>` holding every task in
//!   global queue order. [`TaskKey`] *is* the ordering key
//!   `(Reverse(priority), scheduled_at, seq)`, so the first entry is the best
//!   task overall and [`QueueFilter::Any`] is a `pop_first`.
//! * one `BTreeSet<TaskKey>` for the default queue and one per named queue
//!   (created on first push, dropped when it becomes empty), giving the head
//!   of a single queue in O(log n).
//! * `by_run`: a hash map from run id to that run's keys, so that [`TaskQueue::remove_run`]
//!   costs O(k log n) for k tasks of that run. Most runs have a single queued task, kept inline
//!   ([`RunTasks::One`]) so that a push allocates nothing for it; a run with more gets a set.
//!   (It was an ordered set of `(run id, key)` pairs: every push and pop then compared run ids
//!   byte by byte down the tree, the dearest part of a push once a burst of timers had queued
//!   a few hundred tasks.)
//!
//! Push, pop and remove are O(log n).
//!
//! # Waking
//!
//! Waiters are grouped in classes by filter: one [`Notify`] for `Any`, one
//! for `Default`, and one per named queue that currently has waiters (kept in
//! a map with a waiter count and removed when the last waiter leaves). A push
//! into queue `q` calls `notify_one` on the class of `q` and on the `Any`
//! class, i.e. it wakes at most one waiter of each class that can take it.
//!
//! No wake-up is lost because:
//!
//! * a waiter registers its `Notified` future (`enable`) *before* re-checking
//!   the queue under the lock, and a push inserts under the lock *before*
//!   notifying, so a push either happens before the re-check (which then sees
//!   the task) or notifies the registered future;
//! * `notify_one` removes the woken waiter from the list, so k pushes wake k
//!   distinct sleeping waiters of a class; a woken waiter re-checks and takes
//!   a task unless the queue it watches is empty;
//! * a woken waiter whose `pop` future is dropped before it re-checks hands
//!   the notification to the next waiter (`tokio::sync::Notify` forwards
//!   `notify_one` notifications of dropped `Notified` futures), and so does a
//!   waiter that got notified between `enable` and taking a task.
//!
//! Spurious wake-ups (two classes woken for one task, stored permits) only
//! cost a re-check. [`TaskQueue::close`] wakes every waiter with
//! `notify_waiters`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use rustc_hash::FxHashMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

#[cfg(test)]
mod tests;

/// Milliseconds since the Unix epoch.
pub(crate) type Millis = i64;

/// A task waiting in a [`TaskQueue`], with its routing and ordering data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueEntry<T> {
    /// The task payload.
    pub(crate) task: T,
    /// The run the task belongs to; used by [`TaskQueue::remove_run`].
    pub(crate) run_id: Arc<str>,
    /// Higher values are taken first.
    pub(crate) priority: i32,
    /// Earlier times are taken first among tasks of equal priority.
    pub(crate) scheduled_at: Millis,
    /// Name of the task queue; `None` is the default queue.
    pub(crate) task_queue: Option<Arc<str>>,
}

/// Handle to a queued task, returned by [`TaskQueue::push`].
///
/// Keys compare in queue order: a smaller key is taken first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TaskKey {
    priority: Reverse<i32>,
    scheduled_at: Millis,
    seq: u64,
}

/// Selects which tasks a consumer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueFilter<'a> {
    /// The best task across the default queue and all named queues.
    Any,
    /// Only tasks of the named queue.
    Only(&'a str),
    /// Only tasks of the default queue (`task_queue == None`).
    // Part of the queue's complete API, which its unit tests exercise; the engine does not use it.
    #[cfg_attr(not(test), allow(dead_code))]
    Default,
}

/// Notify of the waiters for one named queue.
struct NamedWaiters {
    notify: Arc<Notify>,
    count: usize,
}

/// The queued tasks of one run.
#[derive(Debug)]
enum RunTasks {
    /// One task, the common case: no allocation.
    One(TaskKey),
    /// Several, in queue order.
    Many(BTreeSet<TaskKey>),
}

impl RunTasks {
    fn add(&mut self, key: TaskKey) {
        match self {
            RunTasks::One(first) => *self = RunTasks::Many(BTreeSet::from([*first, key])),
            RunTasks::Many(keys) => {
                keys.insert(key);
            }
        }
    }

    /// Removes `key`; true if the run has no task left.
    fn remove(&mut self, key: &TaskKey) -> bool {
        match self {
            RunTasks::One(only) => only == key,
            RunTasks::Many(keys) => {
                keys.remove(key);
                keys.is_empty()
            }
        }
    }

    /// The keys, in queue order.
    fn into_keys(self) -> Vec<TaskKey> {
        match self {
            RunTasks::One(key) => vec![key],
            RunTasks::Many(keys) => keys.into_iter().collect(),
        }
    }

    #[cfg(test)]
    fn keys(&self) -> Vec<TaskKey> {
        match self {
            RunTasks::One(key) => vec![*key],
            RunTasks::Many(keys) => keys.iter().copied().collect(),
        }
    }
}

struct State<T> {
    entries: BTreeMap<TaskKey, QueueEntry<T>>,
    default_queue: BTreeSet<TaskKey>,
    named: FxHashMap<Arc<str>, BTreeSet<TaskKey>>,
    by_run: FxHashMap<Arc<str>, RunTasks>,
    next_seq: u64,
    closed: bool,
    any_waiters: usize,
    default_waiters: usize,
    named_waiters: HashMap<Arc<str>, NamedWaiters>,
}

impl<T> State<T> {
    fn new() -> Self {
        Self {
            entries: BTreeMap::new(),
            default_queue: BTreeSet::new(),
            named: FxHashMap::default(),
            by_run: FxHashMap::default(),
            next_seq: 0,
            closed: false,
            any_waiters: 0,
            default_waiters: 0,
            named_waiters: HashMap::new(),
        }
    }

    fn insert(&mut self, entry: QueueEntry<T>) -> TaskKey {
        let key = TaskKey {
            priority: Reverse(entry.priority),
            scheduled_at: entry.scheduled_at,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        match &entry.task_queue {
            None => self.default_queue.insert(key),
            Some(name) => self.named.entry(name.clone()).or_default().insert(key),
        };
        match self.by_run.get_mut(&*entry.run_id) {
            Some(tasks) => tasks.add(key),
            None => {
                self.by_run.insert(entry.run_id.clone(), RunTasks::One(key));
            }
        }
        self.entries.insert(key, entry);
        key
    }

    /// Removes `key` from the per-queue set of `task_queue`.
    fn unlink_queue(&mut self, task_queue: Option<&str>, key: &TaskKey) {
        match task_queue {
            None => {
                self.default_queue.remove(key);
            }
            Some(name) => {
                if let Some(set) = self.named.get_mut(name) {
                    set.remove(key);
                    if set.is_empty() {
                        self.named.remove(name);
                    }
                }
            }
        }
    }

    /// Removes `key` from the run index.
    fn unlink_run(&mut self, run_id: &str, key: &TaskKey) {
        if let Some(tasks) = self.by_run.get_mut(run_id) {
            if tasks.remove(key) {
                self.by_run.remove(run_id);
            }
        }
    }

    fn remove(&mut self, key: &TaskKey) -> Option<QueueEntry<T>> {
        let entry = self.entries.remove(key)?;
        self.unlink_queue(entry.task_queue.as_deref(), key);
        self.unlink_run(&entry.run_id, key);
        Some(entry)
    }

    fn head(&self, filter: QueueFilter<'_>) -> Option<TaskKey> {
        match filter {
            QueueFilter::Any => self.entries.first_key_value().map(|(k, _)| *k),
            QueueFilter::Default => self.default_queue.first().copied(),
            QueueFilter::Only(name) => self.named.get(name).and_then(|s| s.first().copied()),
        }
    }

    fn pop(&mut self, filter: QueueFilter<'_>) -> Option<QueueEntry<T>> {
        let key = self.head(filter)?;
        self.remove(&key)
    }

    fn len_of(&self, task_queue: Option<&str>) -> usize {
        match task_queue {
            None => self.default_queue.len(),
            Some(name) => self.named.get(name).map_or(0, BTreeSet::len),
        }
    }

    /// Counts a new waiter for `filter`; returns the notify of a named queue.
    fn register(&mut self, filter: QueueFilter<'_>) -> Option<Arc<Notify>> {
        match filter {
            QueueFilter::Any => {
                self.any_waiters += 1;
                None
            }
            QueueFilter::Default => {
                self.default_waiters += 1;
                None
            }
            QueueFilter::Only(name) => {
                if let Some(w) = self.named_waiters.get_mut(name) {
                    w.count += 1;
                    return Some(w.notify.clone());
                }
                let notify = Arc::new(Notify::new());
                self.named_waiters.insert(
                    Arc::from(name),
                    NamedWaiters {
                        notify: notify.clone(),
                        count: 1,
                    },
                );
                Some(notify)
            }
        }
    }

    fn unregister(&mut self, filter: QueueFilter<'_>) {
        match filter {
            QueueFilter::Any => self.any_waiters -= 1,
            QueueFilter::Default => self.default_waiters -= 1,
            QueueFilter::Only(name) => {
                if let Some(w) = self.named_waiters.get_mut(name) {
                    w.count -= 1;
                    if w.count == 0 {
                        self.named_waiters.remove(name);
                    }
                }
            }
        }
    }
}

/// Wake-ups to send once the lock is released.
struct Wakes {
    any: usize,
    default: usize,
    named: Vec<(Arc<Notify>, usize)>,
}

/// Priority queue of tasks shared by workers; share it through an `Arc`.
///
/// See the [module docs](self) for ordering, complexity and waking.
pub(crate) struct TaskQueue<T> {
    state: Mutex<State<T>>,
    any: Notify,
    default: Notify,
}

impl<T: Send + 'static> Default for TaskQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for TaskQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("TaskQueue")
            .field("len", &state.entries.len())
            .field("named_queues", &state.named.len())
            .field("closed", &state.closed)
            .finish()
    }
}

impl<T: Send + 'static> TaskQueue<T> {
    /// Creates an empty, open queue.
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State::new()),
            any: Notify::new(),
            default: Notify::new(),
        }
    }

    /// Enqueues one task and wakes a waiter that can take it. O(log n).
    ///
    /// Pushing into a closed queue still enqueues the task: it can be taken
    /// by [`try_pop`](Self::try_pop), [`pop`](Self::pop) or
    /// [`drain`](Self::drain).
    pub(crate) fn push(&self, entry: QueueEntry<T>) -> TaskKey {
        let (key, wakes) = {
            let mut state = self.state.lock();
            let mut wakes = Wakes {
                any: 0,
                default: 0,
                named: Vec::new(),
            };
            Self::plan_wake(&state, entry.task_queue.as_deref(), 1, &mut wakes);
            (state.insert(entry), wakes)
        };
        self.wake(wakes);
        key
    }

    /// Enqueues several tasks under one lock and wakes up to one waiter per
    /// task in each class that can take it.
    pub(crate) fn push_many(&self, entries: impl IntoIterator<Item = QueueEntry<T>>) {
        let wakes = {
            let mut state = self.state.lock();
            let mut total = 0usize;
            let mut default = 0usize;
            let mut named: HashMap<Arc<str>, usize> = HashMap::new();
            for entry in entries {
                total += 1;
                match &entry.task_queue {
                    None => default += 1,
                    Some(name) => {
                        if state.named_waiters.contains_key(&**name) {
                            *named.entry(name.clone()).or_default() += 1;
                        }
                    }
                }
                state.insert(entry);
            }
            let mut wakes = Wakes {
                any: total.min(state.any_waiters),
                default: default.min(state.default_waiters),
                named: Vec::with_capacity(named.len()),
            };
            for (name, n) in named {
                if let Some(w) = state.named_waiters.get(&name) {
                    wakes.named.push((w.notify.clone(), n.min(w.count)));
                }
            }
            wakes
        };
        self.wake(wakes);
    }

    /// Records in `wakes` the notifications for `n` tasks pushed to
    /// `task_queue`, capped by the number of registered waiters.
    fn plan_wake(state: &State<T>, task_queue: Option<&str>, n: usize, wakes: &mut Wakes) {
        wakes.any += n.min(state.any_waiters);
        match task_queue {
            None => wakes.default += n.min(state.default_waiters),
            Some(name) => {
                if let Some(w) = state.named_waiters.get(name) {
                    wakes.named.push((w.notify.clone(), n.min(w.count)));
                }
            }
        }
    }

    fn wake(&self, wakes: Wakes) {
        for _ in 0..wakes.default {
            self.default.notify_one();
        }
        for (notify, n) in wakes.named {
            for _ in 0..n {
                notify.notify_one();
            }
        }
        for _ in 0..wakes.any {
            self.any.notify_one();
        }
    }

    /// The priority of the best task matching `filter`, if any. O(log n).
    pub(crate) fn best_priority(&self, filter: QueueFilter<'_>) -> Option<i32> {
        self.state.lock().head(filter).map(|key| key.priority.0)
    }

    /// Takes the best task matching `filter`, without waiting. O(log n).
    // Part of the queue's complete API, which its unit tests exercise; the engine does not use it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn try_pop(&self, filter: QueueFilter<'_>) -> Option<QueueEntry<T>> {
        self.state.lock().pop(filter)
    }

    /// Takes the best task matching `filter`, waiting until one is pushed.
    ///
    /// Returns `None` once the queue is closed and holds no task matching
    /// `filter`. Cancel safe: dropping the future never loses a task nor a
    /// wake-up meant for another waiter.
    pub(crate) async fn pop(&self, filter: QueueFilter<'_>) -> Option<QueueEntry<T>> {
        let named = {
            let mut state = self.state.lock();
            if let Some(entry) = state.pop(filter) {
                return Some(entry);
            }
            if state.closed {
                return None;
            }
            state.register(filter)
        };
        let _registration = Registration {
            queue: self,
            filter,
        };
        let notify: &Notify = match (&named, filter) {
            (Some(notify), _) => notify,
            (None, QueueFilter::Any) => &self.any,
            (None, _) => &self.default,
        };
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            // Register before re-checking so a push in between is not missed.
            notified.as_mut().enable();
            {
                let mut state = self.state.lock();
                if let Some(entry) = state.pop(filter) {
                    return Some(entry);
                }
                if state.closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Removes the task with `key`, if it is still queued. O(log n).
    // Part of the queue's complete API, which its unit tests exercise; the engine does not use it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn remove(&self, key: TaskKey) -> Option<QueueEntry<T>> {
        self.state.lock().remove(&key)
    }

    /// Removes every queued task of `run_id` and returns them in queue order.
    /// O(k log n) for k removed tasks.
    pub(crate) fn remove_run(&self, run_id: &str) -> Vec<QueueEntry<T>> {
        let mut state = self.state.lock();
        let Some(tasks) = state.by_run.remove(run_id) else {
            return Vec::new();
        };
        let keys = tasks.into_keys();
        let mut removed = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(entry) = state.entries.remove(&key) {
                state.unlink_queue(entry.task_queue.as_deref(), &key);
                removed.push(entry);
            }
        }
        removed
    }

    /// Number of queued tasks across all task queues.
    // The engine asks only on behalf of the test harness (feature `test-util`).
    #[cfg_attr(not(any(test, feature = "test-util")), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.state.lock().entries.len()
    }

    /// Whether no task is queued.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.state.lock().entries.is_empty()
    }

    /// True if more waiters that could take a task of `task_queue` (`None`: the default queue)
    /// are waiting than tasks are queued: a task pushed now would be taken at once, with every
    /// task queued before it taken too.
    pub(crate) fn idle_taker(&self, task_queue: Option<&str>) -> bool {
        let state = self.state.lock();
        let takers = state.any_waiters
            + match task_queue {
                None => state.default_waiters,
                Some(name) => state.named_waiters.get(name).map_or(0, |w| w.count),
            };
        takers > state.entries.len()
    }

    /// Number of tasks in one task queue; `None` is the default queue.
    // The engine asks only on behalf of the test harness (feature `test-util`).
    #[cfg_attr(not(any(test, feature = "test-util")), allow(dead_code))]
    pub(crate) fn len_of(&self, task_queue: Option<&str>) -> usize {
        self.state.lock().len_of(task_queue)
    }

    /// Closes the queue and wakes every waiter.
    ///
    /// Afterwards [`pop`](Self::pop) no longer waits: it returns the
    /// remaining matching tasks, then `None`.
    // Part of the queue's complete API, which its unit tests exercise; the engine does not use it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn close(&self) {
        let named: Vec<Arc<Notify>> = {
            let mut state = self.state.lock();
            state.closed = true;
            state
                .named_waiters
                .values()
                .map(|w| w.notify.clone())
                .collect()
        };
        self.any.notify_waiters();
        self.default.notify_waiters();
        for notify in named {
            notify.notify_waiters();
        }
    }

    /// Whether [`close`](Self::close) was called.
    // Part of the queue's complete API, which its unit tests exercise; the engine does not use it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Removes and returns every queued task, in queue order. O(n).
    // Part of the queue's complete API, which its unit tests exercise; the engine does not use it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn drain(&self) -> Vec<QueueEntry<T>> {
        let mut state = self.state.lock();
        state.default_queue.clear();
        state.named.clear();
        state.by_run.clear();
        std::mem::take(&mut state.entries).into_values().collect()
    }
}

/// Counts a waiting [`TaskQueue::pop`] until it returns or is dropped.
struct Registration<'q, 'f, T> {
    queue: &'q TaskQueue<T>,
    filter: QueueFilter<'f>,
}

impl<T> Drop for Registration<'_, '_, T> {
    fn drop(&mut self) {
        self.queue.state.lock().unregister(self.filter);
    }
}
