//! The workers page's charts: the world's metrics sampled every few seconds into a ring (the
//! last hour), drawn as SVG polylines — runs finished per interval, their latency (mean and
//! 95th percentile of the runs that ended in the interval), runs queued and running, workers
//! and busy workers as autoscaling moves them.
//!
//! The sampler is a task that lives as long as the dashboard's router: it holds the ring and
//! the world only weakly (it must not keep a world its owner wants back), and stops at the
//! first tick after either is gone.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use worlds_engine::clock::Millis;
use worlds_engine::telemetry::RunLatency;
use worlds_engine::World;

/// How often the metrics are sampled.
const EVERY: Duration = Duration::from_secs(5);
/// Samples kept: an hour's worth.
const KEPT: usize = 720;

/// One reading of the world's metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) at: Millis,
    /// Runs completed, failed (compensated or not) and cancelled since the world was created.
    pub(crate) finished: u64,
    pub(crate) queued: usize,
    pub(crate) running: usize,
    pub(crate) workers: usize,
    pub(crate) busy: usize,
    /// Latency of the runs that ended, since the world was created.
    pub(crate) latency: RunLatency,
}

/// The samples of the last hour.
#[derive(Default)]
pub(crate) struct Samples {
    ring: Mutex<VecDeque<Sample>>,
}

impl Samples {
    pub(crate) fn push(&self, sample: Sample) {
        let mut ring = self.ring.lock();
        if ring.len() == KEPT {
            ring.pop_front();
        }
        ring.push_back(sample);
    }

    pub(crate) fn all(&self) -> Vec<Sample> {
        self.ring.lock().iter().cloned().collect()
    }
}

impl Sample {
    /// The reading `metrics` make at `at`.
    pub(crate) fn of(at: Millis, metrics: &worlds_engine::telemetry::WorldMetrics) -> Sample {
        Sample {
            at,
            finished: metrics.workflows.finished(),
            queued: metrics.workflows.queued,
            running: metrics.workflows.running,
            workers: metrics.workers.total,
            busy: metrics.workers.busy,
            latency: metrics.latency.clone(),
        }
    }
}

fn read(world: &World) -> Sample {
    Sample::of(world.clock().now_ms(), &world.get_metrics())
}

/// Samples `world` into `samples` every few seconds while `samples` is alive (and a Tokio
/// runtime is there to run the task).
pub(crate) fn spawn_sampler(world: &Arc<World>, samples: &Arc<Samples>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let samples: Weak<Samples> = Arc::downgrade(samples);
    let world: Weak<World> = Arc::downgrade(world);
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        loop {
            tick.tick().await;
            let (Some(samples), Some(world)) = (samples.upgrade(), world.upgrade()) else {
                return;
            };
            samples.push(read(&world));
        }
    });
}

/// A chart: a title and its lines, ready for the template.
pub(crate) struct Chart {
    pub(crate) title: &'static str,
    /// The largest value, the top of the chart.
    pub(crate) max: u64,
    pub(crate) lines: Vec<Line>,
}

/// One series as SVG `points` in a 600 × 100 box.
pub(crate) struct Line {
    pub(crate) label: &'static str,
    pub(crate) class: &'static str,
    pub(crate) points: String,
}

/// The page's charts from `samples` (oldest first) and a reading taken now.
pub(crate) fn charts(mut samples: Vec<Sample>, now: Sample) -> Vec<Chart> {
    samples.push(now);
    let finished: Vec<Option<u64>> = samples
        .windows(2)
        .map(|w| Some(w[1].finished.saturating_sub(w[0].finished)))
        .collect();
    let latency: Vec<RunLatency> = samples
        .windows(2)
        .map(|w| w[1].latency.since(&w[0].latency))
        .collect();
    let mean = latency.iter().map(RunLatency::mean_ms).collect();
    let p95 = latency.iter().map(|l| l.quantile_ms(0.95)).collect();
    let series = |f: fn(&Sample) -> usize| -> Vec<Option<u64>> {
        samples.iter().map(|s| Some(f(s) as u64)).collect()
    };
    vec![
        chart("Runs finished per 5 s", vec![("finished", "ok", finished)]),
        chart(
            "Run latency, ms",
            vec![("mean", "open", mean), ("95th percentile", "slow", p95)],
        ),
        chart(
            "Runs queued and running",
            vec![
                ("queued", "queued", series(|s| s.queued)),
                ("running", "open", series(|s| s.running)),
            ],
        ),
        chart(
            "Workers",
            vec![
                ("workers", "workers", series(|s| s.workers)),
                ("busy", "busy", series(|s| s.busy)),
            ],
        ),
    ]
}

/// A series: its label, its CSS class, and a value per interval (`None`: nothing to show).
type Series = (&'static str, &'static str, Vec<Option<u64>>);

fn chart(title: &'static str, series: Vec<Series>) -> Chart {
    let max = series
        .iter()
        .flat_map(|(_, _, values)| values.iter().flatten().copied())
        .max()
        .unwrap_or(0)
        .max(1);
    let lines = series
        .into_iter()
        .map(|(label, class, values)| Line {
            label,
            class,
            points: points(&values, max),
        })
        .collect();
    Chart { title, max, lines }
}

/// `x,y` pairs for a polyline of `values` in a 600 × 100 box, the newest at the right edge;
/// intervals without a value are left out (the line crosses them). A lone point is given
/// twice, so that its round line cap shows it as a dot.
fn points(values: &[Option<u64>], max: u64) -> String {
    let n = values.len();
    let mut pairs: Vec<String> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (i, v)))
        .map(|(i, v)| {
            let x = if n <= 1 {
                600.0
            } else {
                i as f64 * 600.0 / (n - 1) as f64
            };
            let y = 100.0 - (v as f64 / max as f64) * 100.0;
            format!("{x:.1},{y:.1}")
        })
        .collect();
    if pairs.len() == 1 {
        pairs.push(pairs[0].clone());
    }
    pairs.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: Millis, finished: u64, queued: usize, workers: usize) -> Sample {
        Sample {
            at,
            finished,
            queued,
            running: 0,
            workers,
            busy: 0,
            latency: RunLatency::default(),
        }
    }

    #[test]
    fn series_scale_to_their_largest_value() {
        let all = |v: &[u64]| v.iter().map(|v| Some(*v)).collect::<Vec<_>>();
        assert_eq!(
            points(&all(&[0, 5, 10]), 10),
            "0.0,100.0 300.0,50.0 600.0,0.0"
        );
        assert_eq!(points(&all(&[3]), 3), "600.0,0.0 600.0,0.0", "a dot");
        assert_eq!(points(&[Some(4), None, Some(2)], 4), "0.0,0.0 600.0,50.0");
        let charts = charts(
            vec![sample(0, 0, 4, 2), sample(5_000, 10, 2, 4)],
            sample(10_000, 15, 0, 8),
        );
        assert_eq!(charts[0].max, 10, "finished per interval: 10 then 5");
        assert_eq!(charts[0].lines[0].points, "0.0,0.0 600.0,50.0");
        assert_eq!(charts[2].max, 4);
        assert_eq!(charts[3].max, 8);
    }

    #[test]
    fn latency_is_charted_per_interval_and_left_out_where_no_run_ended() {
        let at = |at: Millis, took: &[u64]| {
            let mut s = sample(at, 0, 0, 0);
            s.latency = RunLatency::default();
            for ms in took {
                s.latency.observe(*ms);
            }
            s
        };
        // 0–5 s: runs of 20 and 40 ms; 5–10 s: none; 10–15 s: one of 400 ms.
        let charts = charts(
            vec![at(0, &[]), at(5_000, &[20, 40]), at(10_000, &[20, 40])],
            at(15_000, &[20, 40, 400]),
        );
        let latency = &charts[1];
        // p95: 47 ms (within 25–50) then 488 ms (within 250–500); means 30 and 400 ms.
        assert_eq!(latency.max, 488);
        assert_eq!(latency.lines[0].label, "mean");
        assert_eq!(
            latency.lines[0].points, "0.0,93.9 600.0,18.0",
            "30 ms, gap, 400 ms"
        );
        assert_eq!(
            latency.lines[1].points, "0.0,90.4 600.0,0.0",
            "47 ms, gap, 488 ms"
        );
    }

    #[test]
    fn the_ring_keeps_the_last_hour() {
        let samples = Samples::default();
        for i in 0..(KEPT + 10) {
            samples.push(sample(i as Millis, 0, 0, 0));
        }
        let all = samples.all();
        assert_eq!(all.len(), KEPT);
        assert_eq!(all[0].at, 10);
    }
}
