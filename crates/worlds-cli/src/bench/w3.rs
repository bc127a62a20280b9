//! W3, timers: start N workflows that each sleep durably (2 s) and then run one step; report
//! the wall time and the lateness of each result past the sleep, from its start call.

use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt};
use worlds_engine::prelude::*;
use worlds_engine::{Event, EventKind};

use super::report::{percentile, round};
use super::{check, ms, progress, start_world, step, Report, Settings};

/// Default number of workflows.
const N: usize = 500;
/// Default steps after the sleep.
const K: usize = 1;

/// Runs W3.
pub(crate) async fn run(settings: &Settings) -> anyhow::Result<Report> {
    let (n, k) = (settings.n.unwrap_or(N), settings.k.unwrap_or(K));
    let sleep = settings.sleep;
    progress(&format!(
        "W3: {n} concurrent workflows: sleep {} ms, then {k} step(s), {} workers",
        sleep.as_millis(),
        settings.workers
    ));
    let step = step();
    let flow = {
        let step = step.clone();
        workflow("w3", move |ctx: WorkflowContext, k: u64| {
            let step = step.clone();
            async move {
                ctx.sleep(sleep).await?;
                let mut value = 0;
                for _ in 0..k {
                    value = ctx.run(&step, value).await?;
                }
                Ok::<_, WorkflowError>(value)
            }
        })
    };
    let world = start_world(settings, n, vec![(&step).into(), (&flow).into()]).await?;

    // The results are awaited together on this (the client's) thread rather than in tasks
    // spawned on the runtime, where they would queue behind the engine's own work and record
    // completions late.
    let started = Instant::now();
    let epoch = Epoch::now();
    let mut waiting = FuturesUnordered::new();
    for _ in 0..n {
        let t0 = Instant::now();
        let handle = world
            .execute(&flow, k as u64, WorkflowOptions::default())
            .await?;
        waiting.push(async move {
            let value = handle.result().await?;
            Ok::<_, WorldError>((value, t0, Instant::now(), handle))
        });
    }
    let starts_took = started.elapsed();
    let mut lateness = Vec::with_capacity(n);
    let mut finished_runs = Vec::with_capacity(n);
    let mut last = started;
    while let Some(finished) = waiting.next().await {
        let (value, t0, done, handle) = finished?;
        check(value, k as u64)?;
        lateness.push(ms(done.duration_since(t0)) - ms(sleep));
        last = last.max(done);
        finished_runs.push((handle, epoch.ms(t0), epoch.ms(done)));
    }
    let wall = last.duration_since(started);
    let mut parts = Parts::default();
    for (handle, t0, done) in &finished_runs {
        let history = handle.query().await?.history;
        parts.add(&history, *t0, *done, ms(sleep));
    }
    super::stop_world(world).await?;

    let mut report = Report::new(settings.backend.name(), "W3", n, k, wall.as_secs_f64());
    report.p50_ms = percentile(&lateness, 50.0).map(|v| round(v, 3));
    report.p99_ms = percentile(&lateness, 99.0).map(|v| round(v, 3));
    let max = lateness.iter().copied().fold(0.0, f64::max);
    report.notes = format!(
        "ctx.sleep({} ms) then {k} step(s); p50/p99 = lateness past the sleep from each start call; max lateness {max:.3} ms; the {n} start calls took {:.1} ms; lateness in parts, p50 / p99 over runs, from history timestamps (whole ms): {}; {} workers",
        sleep.as_millis(),
        ms(starts_took),
        parts.describe(),
        settings.workers
    );
    Ok(report)
}

/// Converts this process's `Instant`s to milliseconds since the Unix epoch (the clock history
/// timestamps are on), from one reading of both clocks.
struct Epoch {
    instant: Instant,
    epoch_ms: f64,
}

impl Epoch {
    fn now() -> Epoch {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Epoch {
            instant: Instant::now(),
            epoch_ms: since.as_secs_f64() * 1000.0,
        }
    }

    fn ms(&self, at: Instant) -> f64 {
        self.epoch_ms + ms(at.saturating_duration_since(self.instant))
            - ms(self.instant.saturating_duration_since(at))
    }
}

/// Where each run's lateness went: the timer armed after the start call, fired after its
/// time, the run finished after the timer fired, the client saw the end after it was recorded.
#[derive(Default)]
struct Parts {
    started: Vec<f64>,
    armed: Vec<f64>,
    fired: Vec<f64>,
    finished: Vec<f64>,
    seen: Vec<f64>,
}

impl Parts {
    fn add(&mut self, history: &[Event], t0: f64, done: f64, sleep_ms: f64) {
        let fire_at = history.iter().find_map(|e| match e.kind {
            EventKind::TimerScheduled { fire_at, .. } => Some(fire_at as f64),
            _ => None,
        });
        let fired = history
            .iter()
            .find(|e| matches!(e.kind, EventKind::TimerFired { .. }))
            .map(|e| e.timestamp as f64);
        let completed = history
            .iter()
            .find(|e| matches!(e.kind, EventKind::WorkflowCompleted { .. }))
            .map(|e| e.timestamp as f64);
        let started = history
            .iter()
            .find(|e| matches!(e.kind, EventKind::WorkflowStarted { .. }))
            .map(|e| e.timestamp as f64);
        if let (Some(started), Some(fire_at), Some(fired), Some(completed)) =
            (started, fire_at, fired, completed)
        {
            self.started.push(started - t0);
            self.armed.push(fire_at - sleep_ms - t0);
            self.fired.push(fired - fire_at);
            self.finished.push(completed - fired);
            self.seen.push(done - completed);
        }
    }

    fn describe(&self) -> String {
        let pair = |values: &[f64]| {
            let at = |p| percentile(values, p).map_or(f64::NAN, |v| round(v, 1));
            format!("{} / {}", at(50.0), at(99.0))
        };
        format!(
            "run started after the start call {} ms, timer armed after the start call {} ms, fired after its time {} ms, run ended after the timer fired {} ms, end seen by the client after it was recorded {} ms",
            pair(&self.started),
            pair(&self.armed),
            pair(&self.fired),
            pair(&self.finished),
            pair(&self.seen)
        )
    }
}
