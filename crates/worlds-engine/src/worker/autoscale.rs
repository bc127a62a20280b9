//! The autoscaler: grows and shrinks the default worker pool with the workload.
//!
//! Every `scale_interval` (10 s by default, on a background tick of the world's clock) it
//! looks at the workers of the default pool — dedicated task-queue workers are neither counted
//! nor scaled — and computes `workload = busy / total`, where `total` counts idle and busy
//! workers (not those already stopping). Then, as the specification sets:
//!
//! * scale up when `workload >= scale_threshold && total < max_workers`, by
//!   `min(ceil((max - total) / 2), max - total)`;
//! * scale down when `workload <= scale_down_threshold && total > min_workers`, by
//!   `min(floor((total - min) / 2), total - min)`. The floor makes this 0 when `total` is one
//!   above `min_workers`: the pool then stays one worker over its minimum. That is the
//!   specification's formula, kept as is.
//!
//! One addition: if the pool is below `min_workers` (it should not be; the liveness monitor
//! replaces dead workers), it is topped back up.
//!
//! Scaling down stops idle workers first, newest first; a busy worker chosen for stopping
//! finishes its task first (status `stopping`). Each decision that changes the pool is logged
//! at info level with the workload, the worker count, the action and the count.

use std::sync::{Arc, Weak};

use tokio_util::sync::CancellationToken;

use crate::clock::duration_ms;
use crate::config::WorldConfig;
use crate::engine::Engine;
use crate::telemetry::metrics::workload;

use super::{PoolInner, WorkerStatus};

/// The autoscaler's parameters, from the world configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ScalePolicy {
    pub(crate) min_workers: usize,
    pub(crate) max_workers: usize,
    pub(crate) scale_threshold: f64,
    pub(crate) scale_down_threshold: f64,
}

impl ScalePolicy {
    pub(crate) fn of(config: &WorldConfig) -> Self {
        Self {
            min_workers: config.min_workers,
            max_workers: config.max_workers,
            scale_threshold: config.scale_threshold,
            scale_down_threshold: config.scale_down_threshold,
        }
    }
}

/// What the autoscaler does at one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scale {
    /// Start this many workers.
    Up(usize),
    /// Stop this many workers (at least 1).
    Down(usize),
    /// Leave the pool as it is.
    Hold,
}

/// The scaling decision for `busy` busy workers out of `total`, with the workload it is based
/// on. Pure: see the module documentation for the formulas.
pub(crate) fn decide(busy: usize, total: usize, policy: &ScalePolicy) -> (f64, Scale) {
    let load = workload(busy, total);
    let (min, max) = (policy.min_workers, policy.max_workers);
    let scale = if total < min {
        Scale::Up(min - total)
    } else if load >= policy.scale_threshold && total < max {
        let room = max - total;
        Scale::Up(room.div_ceil(2).min(room))
    } else if load <= policy.scale_down_threshold && total > min {
        let spare = total - min;
        match (spare / 2).min(spare) {
            0 => Scale::Hold,
            n => Scale::Down(n),
        }
    } else {
        Scale::Hold
    };
    (load, scale)
}

/// Evaluates the workload every `scale_interval` until `stop`.
pub(super) async fn run(pool: Weak<PoolInner>, engine: Arc<Engine>, stop: CancellationToken) {
    let every = duration_ms(engine.config().scale_interval.0).max(1);
    let policy = ScalePolicy::of(engine.config());
    loop {
        let tick = engine
            .clock()
            .sleep_until_background(engine.now_ms().saturating_add(every));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick => {}
        }
        let Some(pool) = pool.upgrade() else {
            return;
        };
        pool.autoscale(&engine, &policy);
    }
}

impl PoolInner {
    /// One evaluation: counts the default pool, decides, and applies the decision.
    pub(super) fn autoscale(self: &Arc<Self>, engine: &Arc<Engine>, policy: &ScalePolicy) {
        let mut workers = self.workers.lock();
        if !workers.open {
            return;
        }
        // (is busy, spawn order, index) of each active default-pool worker.
        let mut active: Vec<(bool, u64, usize)> = Vec::new();
        for (i, w) in workers.list.iter().enumerate() {
            if w.shared.task_queue.is_some() || w.shared.stop.is_cancelled() {
                continue;
            }
            match w.shared.status() {
                WorkerStatus::Idle => active.push((false, w.shared.seq, i)),
                WorkerStatus::Busy => active.push((true, w.shared.seq, i)),
                WorkerStatus::Stopping | WorkerStatus::Stopped => {}
            }
        }
        let total = active.len();
        let busy = active.iter().filter(|(b, _, _)| *b).count();
        let (load, scale) = decide(busy, total, policy);
        match scale {
            Scale::Hold => {
                tracing::debug!(workload = load, workers = total, busy, "autoscaler: hold");
            }
            Scale::Up(count) => {
                let started = (0..count)
                    .filter(|_| self.spawn_locked(&mut workers, engine, None))
                    .count();
                tracing::info!(
                    workload = load,
                    workers = total + started,
                    action = "scale_up",
                    count = started,
                    "autoscaler: scaled up"
                );
            }
            Scale::Down(count) => {
                // Idle before busy, newest first.
                active.sort_by_key(|(busy, seq, _)| (*busy, std::cmp::Reverse(*seq)));
                for &(_, _, i) in active.iter().take(count) {
                    let w = &workers.list[i].shared;
                    w.retire.store(true, std::sync::atomic::Ordering::Release);
                    w.state.lock().info.status = WorkerStatus::Stopping;
                    w.stop.cancel();
                }
                tracing::info!(
                    workload = load,
                    workers = total - count,
                    action = "scale_down",
                    count,
                    "autoscaler: scaled down"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(min: usize, max: usize) -> ScalePolicy {
        ScalePolicy {
            min_workers: min,
            max_workers: max,
            scale_threshold: 0.7,
            scale_down_threshold: 0.3,
        }
    }

    #[test]
    fn decisions_follow_the_specified_formulas() {
        // (busy, total, min, max, expected)
        let cases: &[(usize, usize, usize, usize, Scale)] = &[
            // Scale up by ceil((max - current) / 2).
            (2, 2, 2, 10, Scale::Up(4)),
            (6, 6, 2, 10, Scale::Up(2)),
            (8, 8, 2, 10, Scale::Up(1)),
            (9, 9, 2, 10, Scale::Up(1)),
            (7, 10, 2, 10, Scale::Hold), // at max
            (5, 7, 2, 10, Scale::Up(2)), // 0.714 >= 0.7
            (3, 5, 2, 10, Scale::Hold),  // 0.6: between the thresholds
            // Scale down by floor((current - min) / 2).
            (0, 10, 2, 10, Scale::Down(4)),
            (0, 6, 2, 10, Scale::Down(2)),
            (0, 4, 2, 10, Scale::Down(1)),
            (0, 3, 2, 10, Scale::Hold), // floor(1 / 2) = 0: stays one above min
            (0, 2, 2, 10, Scale::Hold), // at min
            (3, 10, 2, 10, Scale::Down(4)), // 0.3 <= 0.3
            (4, 10, 2, 10, Scale::Hold), // 0.4
            (2, 6, 2, 10, Scale::Hold), // 0.333
            // Below min: topped up.
            (0, 0, 2, 10, Scale::Up(2)),
            (1, 1, 2, 10, Scale::Up(1)),
            // A pool of one.
            (1, 1, 1, 1, Scale::Hold),
            (0, 1, 1, 1, Scale::Hold),
            (1, 1, 1, 3, Scale::Up(1)),
        ];
        for &(busy, total, min, max, expected) in cases {
            let (_, got) = decide(busy, total, &policy(min, max));
            assert_eq!(
                got, expected,
                "busy {busy} of {total}, min {min}, max {max}"
            );
        }
    }

    #[test]
    fn workload_is_busy_over_total() {
        assert_eq!(decide(3, 4, &policy(2, 10)).0, 0.75);
        assert_eq!(decide(0, 0, &policy(2, 10)).0, 0.0);
    }

    #[test]
    fn scale_up_wins_when_both_thresholds_match() {
        let p = ScalePolicy {
            min_workers: 1,
            max_workers: 4,
            scale_threshold: 1.0,
            scale_down_threshold: 1.0,
        };
        assert_eq!(decide(2, 2, &p).1, Scale::Up(1));
        assert_eq!(
            decide(4, 4, &p).1,
            Scale::Down(1),
            "at max, a full pool shrinks"
        );
    }

    #[test]
    fn shrinking_an_idle_pool_converges_one_above_min() {
        let p = policy(2, 10);
        let mut total = 10;
        let mut seen = vec![total];
        while let (_, Scale::Down(n)) = decide(0, total, &p) {
            total -= n;
            seen.push(total);
        }
        assert_eq!(seen, vec![10, 6, 4, 3]);
    }
}
