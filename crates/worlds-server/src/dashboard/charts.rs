//! The workers page's charts: the world's metrics sampled every few seconds into a ring (the
//! last hour), drawn as SVG polylines — runs finished per interval, runs queued and running,
//! workers and busy workers as autoscaling moves them.
//!
//! The sampler is a task that lives as long as the dashboard's router: it holds the ring and
//! the world only weakly (it must not keep a world its owner wants back), and stops at the
//! first tick after either is gone.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use worlds_engine::clock::Millis;
use worlds_engine::World;

/// How often the metrics are sampled.
const EVERY: Duration = Duration::from_secs(5);
/// Samples kept: an hour's worth.
const KEPT: usize = 720;

/// One reading of the world's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) at: Millis,
    /// Runs completed and failed since the world was created.
    pub(crate) finished: u64,
    pub(crate) queued: usize,
    pub(crate) running: usize,
    pub(crate) workers: usize,
    pub(crate) busy: usize,
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
        self.ring.lock().iter().copied().collect()
    }
}

fn read(world: &World) -> Sample {
    let metrics = world.get_metrics();
    Sample {
        at: world.clock().now_ms(),
        finished: metrics.workflows.completed + metrics.workflows.failed,
        queued: metrics.workflows.queued,
        running: metrics.workflows.running,
        workers: metrics.workers.total,
        busy: metrics.workers.busy,
    }
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
    let finished: Vec<u64> = samples
        .windows(2)
        .map(|w| w[1].finished.saturating_sub(w[0].finished))
        .collect();
    let series =
        |f: fn(&Sample) -> usize| -> Vec<u64> { samples.iter().map(|s| f(s) as u64).collect() };
    vec![
        chart("Runs finished per 5 s", vec![("finished", "ok", finished)]),
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

fn chart(title: &'static str, series: Vec<(&'static str, &'static str, Vec<u64>)>) -> Chart {
    let max = series
        .iter()
        .flat_map(|(_, _, values)| values.iter().copied())
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

/// `x,y` pairs for a polyline of `values` in a 600 × 100 box, the newest at the right edge.
fn points(values: &[u64], max: u64) -> String {
    let n = values.len();
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let x = if n <= 1 {
                600.0
            } else {
                i as f64 * 600.0 / (n - 1) as f64
            };
            let y = 100.0 - (*v as f64 / max as f64) * 100.0;
            format!("{x:.1},{y:.1}")
        })
        .collect::<Vec<_>>()
        .join(" ")
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
        }
    }

    #[test]
    fn series_scale_to_their_largest_value() {
        assert_eq!(points(&[0, 5, 10], 10), "0.0,100.0 300.0,50.0 600.0,0.0");
        assert_eq!(points(&[3], 3), "600.0,0.0");
        let charts = charts(
            vec![sample(0, 0, 4, 2), sample(5_000, 10, 2, 4)],
            sample(10_000, 15, 0, 8),
        );
        assert_eq!(charts[0].max, 10, "finished per interval: 10 then 5");
        assert_eq!(charts[0].lines[0].points, "0.0,0.0 600.0,50.0");
        assert_eq!(charts[1].max, 4);
        assert_eq!(charts[2].max, 8);
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
