//! World metrics: what `World::get_metrics()` reports, and the recorder that counts runs.
//!
//! Run counts come from the events the engine records: the recorder looks at every appended
//! event that changes a run's status (`workflow_started`, `workflow_completed`…) and keeps
//! gauges (queued, running) and counters (completed, failed). Events that do not change a
//! status cost one cheap check and no lock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
#[cfg(feature = "prometheus")]
use prometheus_client::metrics::family::Family;
#[cfg(feature = "prometheus")]
use prometheus_client::metrics::histogram::Histogram;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::model::{Event, EventKind, RunStatus};

/// Length of the rolling window throughput is measured over: 60 s, as the specification sets.
pub const THROUGHPUT_WINDOW_MS: Millis = 60_000;

/// A snapshot of a world's activity, as `World::get_metrics()` reports it.
///
/// ```
/// use worlds_engine::telemetry::WorldMetrics;
/// let idle = WorldMetrics::default();
/// assert_eq!(idle.workload, 0.0);
/// assert_eq!(idle.throughput.per_hour, 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorldMetrics {
    /// Milliseconds since the world was (last) started, on the world's clock; 0 while it is
    /// not started.
    pub uptime: u64,
    /// Worker counts.
    pub workers: WorkerMetrics,
    /// Run counts.
    pub workflows: WorkflowMetrics,
    /// Completed runs per unit of time.
    pub throughput: Throughput,
    /// Busy workers divided by total workers, from 0 to 1; 0 when there are no workers.
    pub workload: f64,
    /// How long runs took from acceptance to their end, counted since the world was created.
    #[serde(default)]
    pub latency: RunLatency,
}

/// Worker counts in [`WorldMetrics`]. Every worker that has not stopped is counted, dedicated
/// task-queue workers included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerMetrics {
    /// `idle + busy`.
    pub total: usize,
    /// Workers waiting for a task.
    pub idle: usize,
    /// Workers executing a task, including one finishing its last task before it stops.
    pub busy: usize,
}

/// Run counts in [`WorldMetrics`].
///
/// `queued` and `running` are the runs in those statuses now; `completed`, `failed`,
/// `cancelled` and `compensated` count the runs that reached that status since the world was
/// created. A failed run that is then compensated counts in `failed` and in `compensated`, so
/// the runs that finished are `completed + failed + cancelled`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowMetrics {
    /// Runs accepted and not yet started (status `pending`).
    pub queued: usize,
    /// Runs started and not finished (status `running`), or running their compensations
    /// (`compensating`). A run waiting on a timer or a step counts as running.
    pub running: usize,
    /// Runs that completed.
    pub completed: u64,
    /// Runs that failed.
    pub failed: u64,
    /// Runs that were cancelled.
    #[serde(default)]
    pub cancelled: u64,
    /// Failed runs whose compensations then ran (also counted in `failed`).
    #[serde(default)]
    pub compensated: u64,
}

impl WorkflowMetrics {
    /// Runs that finished since the world was created: completed, failed (compensated or
    /// not) and cancelled.
    pub fn finished(&self) -> u64 {
        self.completed + self.failed + self.cancelled
    }
}

/// Throughput in [`WorldMetrics`], measured over the last [`THROUGHPUT_WINDOW_MS`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Throughput {
    /// Runs that completed in the last 60 s.
    pub per_minute: u64,
    /// `per_minute × 60`: the last minute's rate extrapolated to an hour, not a count of the
    /// last hour.
    pub per_hour: u64,
}

/// Upper bounds of the [`RunLatency`] buckets, in milliseconds: 5 ms to a day, in steps of
/// 2 to 2.5 below a minute. A last bucket past these holds the rest.
pub const RUN_LATENCY_BOUNDS_MS: [u64; 18] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000,
    3_600_000, 14_400_000, 86_400_000,
];

/// Run latency in [`WorldMetrics`]: the time from a run's acceptance to its end (completed,
/// failed or cancelled), for runs whose acceptance this process saw. The counts only grow,
/// so the latency of an interval is the difference of two readings
/// ([`since`](RunLatency::since)).
///
/// ```
/// use worlds_engine::telemetry::RunLatency;
/// let mut before = RunLatency::default();
/// before.observe(40);
/// let mut after = before.clone();
/// after.observe(200);
/// after.observe(300);
/// let interval = after.since(&before);
/// assert_eq!(interval.count, 2);
/// assert_eq!(interval.mean_ms(), Some(250));
/// // Both fall in the 100–250 ms and 250–500 ms buckets; the estimate lies within the second.
/// assert_eq!(interval.quantile_ms(0.95), Some(475));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLatency {
    /// Runs measured.
    pub count: u64,
    /// Their latencies added up, in milliseconds.
    pub total_ms: u64,
    /// Runs per bucket: `buckets[i]` counts latencies up to [`RUN_LATENCY_BOUNDS_MS`]`[i]`
    /// and above the bound before it; the last holds those past every bound. Empty until a
    /// run is measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<u64>,
}

impl RunLatency {
    /// Counts one run that took `ms`.
    pub fn observe(&mut self, ms: u64) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; RUN_LATENCY_BOUNDS_MS.len() + 1];
        }
        let bucket = RUN_LATENCY_BOUNDS_MS.partition_point(|bound| *bound < ms);
        self.buckets[bucket] += 1;
        self.count += 1;
        self.total_ms = self.total_ms.saturating_add(ms);
    }

    /// What was measured after `earlier`, a reading of the same world taken before this one.
    pub fn since(&self, earlier: &RunLatency) -> RunLatency {
        let buckets = if self.buckets.is_empty() {
            Vec::new()
        } else {
            (0..self.buckets.len())
                .map(|i| {
                    let before = earlier.buckets.get(i).copied().unwrap_or(0);
                    self.buckets[i].saturating_sub(before)
                })
                .collect()
        };
        RunLatency {
            count: self.count.saturating_sub(earlier.count),
            total_ms: self.total_ms.saturating_sub(earlier.total_ms),
            buckets,
        }
    }

    /// The mean latency, `None` when no run was measured.
    pub fn mean_ms(&self) -> Option<u64> {
        self.total_ms.checked_div(self.count)
    }

    /// The latency that a share `q` (0 to 1) of the runs stayed within, estimated from the
    /// buckets as Prometheus' `histogram_quantile` does: linearly within the bucket it falls
    /// in. `None` when no run was measured; runs past the last bound count as taking the last
    /// bound.
    pub fn quantile_ms(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let wanted = self.count as f64 * q.clamp(0.0, 1.0);
        let mut seen = 0u64;
        for (i, n) in self.buckets.iter().enumerate() {
            let Some(upper) = RUN_LATENCY_BOUNDS_MS.get(i) else {
                break;
            };
            if *n > 0 && (seen + n) as f64 >= wanted {
                let lower = if i == 0 {
                    0
                } else {
                    RUN_LATENCY_BOUNDS_MS[i - 1]
                };
                let within = ((wanted - seen as f64) / *n as f64).max(0.0);
                return Some(lower + ((upper - lower) as f64 * within).round() as u64);
            }
            seen += n;
        }
        RUN_LATENCY_BOUNDS_MS.last().copied()
    }
}

/// Labels of a run-duration histogram: the status the run ended in.
#[cfg(feature = "prometheus")]
pub(crate) type StatusLabel = [(&'static str, &'static str); 1];

/// Run durations by final status, in seconds.
#[cfg(feature = "prometheus")]
pub(crate) type RunDurations = Family<StatusLabel, Histogram, fn() -> Histogram>;

/// The run-duration histogram, with the buckets of [`RunLatency`] in seconds.
#[cfg(feature = "prometheus")]
fn run_duration_histogram() -> Histogram {
    Histogram::new(RUN_LATENCY_BOUNDS_MS.map(|ms| ms as f64 / 1_000.0))
}

/// Counts runs by status from the events the engine records.
pub(crate) struct MetricsRecorder {
    inner: Mutex<Counts>,
    started_at: Mutex<Option<Millis>>,
    /// Step outcomes, counted without a lock.
    steps: StepCounts,
    /// Moves on at every status change, for whoever watches ([`MetricsRecorder::changes`]).
    changed: tokio::sync::watch::Sender<u64>,
    /// Time from acceptance to the final status, for runs accepted by this process. Only the
    /// Prometheus export reads it, so without that feature it is not kept.
    #[cfg(feature = "prometheus")]
    durations: RunDurations,
    /// Each status's histogram in `durations`, looked up once: finding it by its label costs
    /// a hash and a lock at every run's end.
    #[cfg(feature = "prometheus")]
    duration_of: [std::sync::OnceLock<Histogram>; RunStatus::ALL.len()],
}

// Derivable without the `prometheus` feature; written out for the histogram's constructor.
#[cfg_attr(not(feature = "prometheus"), allow(clippy::derivable_impls))]
impl Default for MetricsRecorder {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            started_at: Mutex::default(),
            steps: StepCounts::default(),
            changed: tokio::sync::watch::Sender::new(0),
            #[cfg(feature = "prometheus")]
            durations: Family::new_with_constructor(run_duration_histogram),
            #[cfg(feature = "prometheus")]
            duration_of: Default::default(),
        }
    }
}

/// Step events seen, for the Prometheus export; and what retention sweeps removed.
#[derive(Default)]
struct StepCounts {
    attempts: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    runs_removed: AtomicU64,
    events_removed: AtomicU64,
}

/// Counts kept for the Prometheus export beyond [`WorldMetrics`]. Still counted without the
/// `prometheus` feature (a few relaxed atomic additions), so that the counting has one shape.
#[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DetailCounts {
    /// Runs that reached `cancelled`.
    pub(crate) cancelled: u64,
    /// Runs that reached `compensated`.
    pub(crate) compensated: u64,
    /// Step attempts started.
    pub(crate) step_attempts: u64,
    /// Steps that completed.
    pub(crate) steps_completed: u64,
    /// Steps that failed for good (no retry left).
    pub(crate) steps_failed: u64,
    /// Finished runs a retention sweep of this process removed.
    pub(crate) runs_removed: u64,
    /// Events of their histories.
    pub(crate) events_removed: u64,
}

#[derive(Default)]
struct Counts {
    /// Status and last applied `seq` of every run that is not finished, plus finished runs
    /// for a while (see `finished`).
    runs: FxHashMap<Arc<str>, Tracked>,
    queued: usize,
    running: usize,
    completed: u64,
    failed: u64,
    cancelled: u64,
    compensated: u64,
    /// Completion times within the throughput window, oldest first.
    recent: VecDeque<Millis>,
    /// Latency of the runs that ended, since the world was created.
    latency: RunLatency,
    /// Runs that reached a terminal status, with when. Their entries in `runs` are kept for a
    /// window so that a status change recorded earlier but reported late (two appends to one
    /// run racing on two threads) is recognised as stale by its `seq` and ignored.
    finished: VecDeque<(Millis, Arc<str>)>,
}

#[derive(Clone, Copy)]
struct Tracked {
    status: RunStatus,
    seq: u64,
    /// When the run was accepted, if this process saw it happen.
    created_at: Option<Millis>,
}

impl Counts {
    /// Applies a status change; returns how long the run took if it just ended (completed,
    /// failed or cancelled) and its acceptance was seen.
    fn apply(&mut self, run_id: &str, seq: u64, status: RunStatus, at: Millis) -> Option<Millis> {
        self.apply_created(run_id, seq, status, at, None, None)
    }

    /// [`apply`](Self::apply), for a run accepted at `created` if known. A run seen for the
    /// first time is keyed by `shared`, if given, rather than by a new copy of its id.
    fn apply_created(
        &mut self,
        run_id: &str,
        seq: u64,
        status: RunStatus,
        at: Millis,
        created: Option<Millis>,
        shared: Option<&Arc<str>>,
    ) -> Option<Millis> {
        let (previous, created_at) = match self.runs.get(run_id) {
            Some(t) if t.seq >= seq => return None,
            Some(t) => (Some(t.status), t.created_at),
            None => (None, created),
        };
        if previous == Some(status) {
            return None;
        }
        match previous {
            Some(RunStatus::Pending) => self.queued = self.queued.saturating_sub(1),
            Some(RunStatus::Running | RunStatus::Compensating) => {
                self.running = self.running.saturating_sub(1)
            }
            _ => {}
        }
        match status {
            RunStatus::Pending => self.queued += 1,
            RunStatus::Running | RunStatus::Compensating => self.running += 1,
            RunStatus::Completed => {
                self.completed += 1;
                self.recent.push_back(at);
            }
            RunStatus::Failed => self.failed += 1,
            RunStatus::Cancelled => self.cancelled += 1,
            RunStatus::Compensated => self.compensated += 1,
        }
        let key: Arc<str> = match self.runs.get_key_value(run_id) {
            Some((key, _)) => key.clone(),
            None => shared.cloned().unwrap_or_else(|| Arc::from(run_id)),
        };
        if status.is_terminal() {
            self.finished.push_back((at, key.clone()));
        }
        self.runs.insert(
            key,
            Tracked {
                status,
                seq,
                created_at,
            },
        );
        self.prune(at);
        let ended = matches!(
            status,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        );
        // A compensated run ended once already, as failed.
        let first_end = !matches!(previous, Some(RunStatus::Compensating));
        let took = created_at
            .filter(|_| ended && first_end)
            .map(|created| at.saturating_sub(created).max(0));
        if let Some(took) = took {
            self.latency.observe(took as u64);
        }
        took
    }

    fn prune(&mut self, now: Millis) {
        let horizon = now.saturating_sub(THROUGHPUT_WINDOW_MS);
        while self.recent.front().is_some_and(|at| *at <= horizon) {
            self.recent.pop_front();
        }
        while self.finished.front().is_some_and(|(at, _)| *at <= horizon) {
            if let Some((_, run_id)) = self.finished.pop_front() {
                // Not if it moved on since (failed → compensating).
                if self
                    .runs
                    .get(&run_id)
                    .is_some_and(|t| t.status.is_terminal())
                {
                    self.runs.remove(&run_id);
                }
            }
        }
    }
}

impl MetricsRecorder {
    /// A run was accepted (its `workflow_queued` event, `seq` 0, is stored).
    pub(crate) fn run_created(&self, run_id: &Arc<str>, at: Millis) {
        self.inner
            .lock()
            .apply_created(run_id, 0, RunStatus::Pending, at, Some(at), Some(run_id));
        self.tell_watchers();
    }

    /// A receiver whose value moves on whenever a run recorded here changes status.
    pub(crate) fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Moves the change counter on, at the cost of one atomic load when nobody watches.
    fn tell_watchers(&self) {
        if self.changed.receiver_count() > 0 {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// A run read back from the store on start (recovery). Runs already tracked are left as
    /// they are.
    pub(crate) fn run_adopted(&self, run_id: &str, status: RunStatus, at: Millis) {
        let mut counts = self.inner.lock();
        if !counts.runs.contains_key(run_id) {
            counts.apply(run_id, 0, status, at);
        }
    }

    /// Events were appended to a run: counts its status changes and its steps' outcomes.
    pub(crate) fn record(&self, run_id: &str, events: &[Arc<Event>]) {
        for event in events {
            let counter = match &event.kind {
                EventKind::ActivityStarted { .. } => &self.steps.attempts,
                EventKind::ActivityCompleted { .. } => &self.steps.completed,
                EventKind::ActivityFailed {
                    retrying: false, ..
                } => &self.steps.failed,
                _ => continue,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let mut changes = events
            .iter()
            .filter_map(|e| e.kind.status_change().map(|s| (e.seq, s, e.timestamp)))
            .peekable();
        if changes.peek().is_none() {
            return;
        }
        let mut ended = None;
        {
            let mut counts = self.inner.lock();
            for (seq, status, at) in changes {
                if let Some(took) = counts.apply(run_id, seq, status, at) {
                    ended = Some((status, took));
                }
            }
        }
        self.tell_watchers();
        if let Some((status, took)) = ended {
            self.observe_duration(status, took);
        }
    }

    /// A run reached its final `status` `took` ms after it was accepted. Only the Prometheus
    /// histogram keeps this; without that feature there is nothing to record it in.
    #[cfg_attr(not(feature = "prometheus"), allow(unused_variables))]
    fn observe_duration(&self, status: RunStatus, took: Millis) {
        #[cfg(feature = "prometheus")]
        {
            let slot = RunStatus::ALL
                .iter()
                .position(|s| *s == status)
                .unwrap_or(0);
            self.duration_of[slot]
                .get_or_init(|| {
                    self.durations
                        .get_or_create(&[("status", status.as_str())])
                        .clone()
                })
                .observe(took as f64 / 1_000.0);
        }
    }

    /// Counts beyond [`WorldMetrics`], for the Prometheus export.
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn details(&self) -> DetailCounts {
        let (cancelled, compensated) = {
            let counts = self.inner.lock();
            (counts.cancelled, counts.compensated)
        };
        DetailCounts {
            cancelled,
            compensated,
            step_attempts: self.steps.attempts.load(Ordering::Relaxed),
            steps_completed: self.steps.completed.load(Ordering::Relaxed),
            steps_failed: self.steps.failed.load(Ordering::Relaxed),
            runs_removed: self.steps.runs_removed.load(Ordering::Relaxed),
            events_removed: self.steps.events_removed.load(Ordering::Relaxed),
        }
    }

    /// A retention sweep removed a run of `events` events.
    pub(crate) fn run_removed(&self, events: u64) {
        self.steps.runs_removed.fetch_add(1, Ordering::Relaxed);
        self.steps
            .events_removed
            .fetch_add(events, Ordering::Relaxed);
    }

    /// Run durations by final status.
    #[cfg(feature = "prometheus")]
    pub(crate) fn run_durations(&self) -> &RunDurations {
        &self.durations
    }

    /// The world started at `now`: uptime counts from here.
    pub(crate) fn mark_started(&self, now: Millis) {
        *self.started_at.lock() = Some(now);
    }

    /// The world stopped: uptime is 0 until it starts again.
    pub(crate) fn mark_stopped(&self) {
        *self.started_at.lock() = None;
    }

    /// The metrics at `now`, with the worker counts given.
    pub(crate) fn snapshot(&self, now: Millis, workers: WorkerMetrics) -> WorldMetrics {
        let uptime = self
            .started_at
            .lock()
            .map(|at| now.saturating_sub(at).max(0) as u64)
            .unwrap_or(0);
        let mut counts = self.inner.lock();
        counts.prune(now);
        let per_minute = counts.recent.len() as u64;
        WorldMetrics {
            uptime,
            workers,
            workflows: WorkflowMetrics {
                queued: counts.queued,
                running: counts.running,
                completed: counts.completed,
                failed: counts.failed,
                cancelled: counts.cancelled,
                compensated: counts.compensated,
            },
            throughput: Throughput {
                per_minute,
                per_hour: per_minute * 60,
            },
            workload: workload(workers.busy, workers.total),
            latency: counts.latency.clone(),
        }
    }
}

/// Busy over total, 0 when there are no workers.
pub(crate) fn workload(busy: usize, total: usize) -> f64 {
    if total == 0 {
        0.0
    } else {
        busy as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EventKind, EVENT_FORMAT_VERSION};

    /// Records a status change of run `run` at `seq`, as `record` would for its event.
    fn change(m: &MetricsRecorder, run: &str, seq: u64, status: RunStatus, at: Millis) {
        m.inner.lock().apply(run, seq, status, at);
    }

    fn workflows(m: &MetricsRecorder, now: Millis) -> WorkflowMetrics {
        m.snapshot(now, WorkerMetrics::default()).workflows
    }

    #[test]
    fn latency_is_counted_per_bucket_and_read_per_interval() {
        let mut l = RunLatency::default();
        assert_eq!((l.mean_ms(), l.quantile_ms(0.5)), (None, None));
        for ms in [0, 10, 11, 100, 90_000_000] {
            l.observe(ms);
        }
        let mut expected = vec![0; RUN_LATENCY_BOUNDS_MS.len() + 1];
        expected[0] = 1; // 0: up to 5
        expected[1] = 1; // 10: a bound is inclusive
        expected[2] = 1; // 11: up to 25
        expected[4] = 1; // 100
        expected[RUN_LATENCY_BOUNDS_MS.len()] = 1; // past a day
        assert_eq!(l.buckets, expected);
        assert_eq!(l.quantile_ms(0.0), Some(0));
        assert_eq!(
            l.quantile_ms(0.2),
            Some(5),
            "the first run: the top of its bucket"
        );
        assert_eq!(l.quantile_ms(0.5), Some(18), "half way: within 10–25");
        assert_eq!(l.quantile_ms(0.8), Some(100));
        assert_eq!(l.quantile_ms(1.0), Some(86_400_000), "past the last bound");
        let later = {
            let mut later = l.clone();
            later.observe(3_000);
            later
        };
        let interval = later.since(&l);
        assert_eq!((interval.count, interval.total_ms), (1, 3_000));
        assert_eq!(
            interval.quantile_ms(0.99),
            Some(4_975),
            "within 2 500–5 000"
        );
        assert_eq!(later.since(&RunLatency::default()), later);
    }

    #[test]
    fn watchers_are_told_of_status_changes_only() {
        let m = MetricsRecorder::default();
        let mut changes = m.changes();
        changes.mark_unchanged();
        m.run_created(&Arc::from("a"), 0);
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        let event = |seq, kind| {
            Arc::new(Event {
                id: format!("evnt_{seq}"),
                run_id: "a".into(),
                seq,
                timestamp: 5,
                version: EVENT_FORMAT_VERSION,
                kind,
            })
        };
        m.record("a", &[event(1, EventKind::TimerFired { position: 0 })]);
        assert!(!changes.has_changed().unwrap(), "no status changed");
        m.record(
            "a",
            &[event(2, EventKind::WorkflowCancelled { reason: None })],
        );
        assert!(changes.has_changed().unwrap());
    }

    #[test]
    fn a_run_s_latency_is_counted_once_when_it_ends() {
        let m = MetricsRecorder::default();
        m.run_created(&Arc::from("a"), 100);
        change(&m, "a", 1, RunStatus::Running, 110);
        change(&m, "a", 2, RunStatus::Failed, 150);
        change(&m, "a", 3, RunStatus::Compensating, 160);
        change(&m, "a", 4, RunStatus::Compensated, 400);
        let latency = m.snapshot(400, WorkerMetrics::default()).latency;
        assert_eq!(
            (latency.count, latency.total_ms),
            (1, 50),
            "ended once, as failed"
        );
    }

    #[test]
    fn runs_move_from_queued_to_running_to_finished() {
        let m = MetricsRecorder::default();
        m.run_created(&Arc::from("a"), 0);
        m.run_created(&Arc::from("b"), 0);
        m.run_created(&Arc::from("c"), 0);
        let w = workflows(&m, 0);
        assert_eq!((w.queued, w.running), (3, 0));
        change(&m, "a", 1, RunStatus::Running, 10);
        change(&m, "b", 1, RunStatus::Running, 10);
        let w = workflows(&m, 10);
        assert_eq!((w.queued, w.running), (1, 2));
        change(&m, "a", 5, RunStatus::Completed, 20);
        change(&m, "b", 3, RunStatus::Failed, 20);
        change(&m, "c", 1, RunStatus::Cancelled, 20);
        let expected = WorkflowMetrics {
            queued: 0,
            running: 0,
            completed: 1,
            failed: 1,
            cancelled: 1,
            compensated: 0,
        };
        assert_eq!(workflows(&m, 20), expected);
    }

    #[test]
    fn record_counts_only_status_changes() {
        let m = MetricsRecorder::default();
        m.run_created(&Arc::from("a"), 0);
        let event = |seq, kind| Event {
            id: format!("evnt_{seq}"),
            run_id: "a".into(),
            seq,
            timestamp: 5,
            version: EVENT_FORMAT_VERSION,
            kind,
        };
        m.record(
            "a",
            &[Arc::new(event(1, EventKind::TimerFired { position: 0 }))],
        );
        assert_eq!(workflows(&m, 5).queued, 1);
        m.record(
            "a",
            &[Arc::new(event(
                2,
                EventKind::WorkflowCancelled { reason: None },
            ))],
        );
        assert_eq!(workflows(&m, 5).queued, 0);
    }

    #[test]
    fn a_stale_change_reported_late_is_ignored() {
        let m = MetricsRecorder::default();
        m.run_created(&Arc::from("a"), 0);
        // The cancel (seq 2) is reported before the start (seq 1) that preceded it.
        change(&m, "a", 2, RunStatus::Cancelled, 5);
        change(&m, "a", 1, RunStatus::Running, 4);
        m.run_created(&Arc::from("a"), 0);
        let w = workflows(&m, 5);
        assert_eq!((w.queued, w.running), (0, 0));
    }

    #[test]
    fn adopted_runs_are_counted_once() {
        let m = MetricsRecorder::default();
        m.run_adopted("a", RunStatus::Pending, 0);
        m.run_adopted("b", RunStatus::Running, 0);
        m.run_adopted("b", RunStatus::Running, 0);
        let w = workflows(&m, 0);
        assert_eq!((w.queued, w.running), (1, 1));
    }

    #[test]
    fn compensation_counts_as_running_and_the_failure_once() {
        let m = MetricsRecorder::default();
        m.run_created(&Arc::from("a"), 0);
        change(&m, "a", 1, RunStatus::Running, 0);
        change(&m, "a", 2, RunStatus::Failed, 1);
        change(&m, "a", 3, RunStatus::Compensating, 2);
        let w = workflows(&m, 2);
        assert_eq!((w.running, w.failed), (1, 1));
        change(&m, "a", 4, RunStatus::Compensated, 3);
        let w = workflows(&m, 3);
        assert_eq!((w.running, w.failed, w.completed), (0, 1, 0));
        assert_eq!((w.compensated, w.finished()), (1, 1));
    }

    #[test]
    fn throughput_counts_completions_of_the_last_minute() {
        let m = MetricsRecorder::default();
        for (i, at) in [0, 30_000, 59_999].into_iter().enumerate() {
            let id = format!("r{i}");
            m.run_created(&Arc::from(id.as_str()), at);
            change(&m, &id, 1, RunStatus::Running, at);
            change(&m, &id, 2, RunStatus::Completed, at);
        }
        let t = m.snapshot(59_999, WorkerMetrics::default()).throughput;
        assert_eq!((t.per_minute, t.per_hour), (3, 180));
        // At 60 s the first completion (at 0) is a full window old.
        let at = |now| {
            m.snapshot(now, WorkerMetrics::default())
                .throughput
                .per_minute
        };
        assert_eq!(at(60_000), 2);
        assert_eq!(at(200_000), 0);
        assert_eq!(workflows(&m, 200_000).completed, 3);
        // Finished runs are forgotten once the window has passed.
        assert!(m.inner.lock().runs.is_empty());
    }

    #[test]
    fn uptime_and_workload() {
        let m = MetricsRecorder::default();
        let workers = WorkerMetrics {
            total: 4,
            idle: 1,
            busy: 3,
        };
        assert_eq!(m.snapshot(500, workers).uptime, 0, "not started");
        m.mark_started(1_000);
        let s = m.snapshot(3_500, workers);
        assert_eq!(s.uptime, 2_500);
        assert_eq!(s.workload, 0.75);
        m.mark_stopped();
        assert_eq!(m.snapshot(4_000, workers).uptime, 0);
        assert_eq!(workload(0, 0), 0.0);
    }
}
