//! W3, timers: start N workflows that each sleep durably (2 s) and then run one step; report
//! the wall time and the lateness of each result past the sleep, from its start call.

use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt};
use worlds_engine::prelude::*;

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
    let mut waiting = FuturesUnordered::new();
    for _ in 0..n {
        let t0 = Instant::now();
        let handle = world
            .execute(&flow, k as u64, WorkflowOptions::default())
            .await?;
        waiting.push(async move {
            let value = handle.result().await?;
            Ok::<_, WorldError>((value, t0, Instant::now()))
        });
    }
    let mut lateness = Vec::with_capacity(n);
    let mut last = started;
    while let Some(finished) = waiting.next().await {
        let (value, t0, done) = finished?;
        check(value, k as u64)?;
        lateness.push(ms(done.duration_since(t0)) - ms(sleep));
        last = last.max(done);
    }
    let wall = last.duration_since(started);
    super::stop_world(world).await?;

    let mut report = Report::new(settings.backend.name(), "W3", n, k, wall.as_secs_f64());
    report.p50_ms = percentile(&lateness, 50.0).map(|v| round(v, 3));
    report.p99_ms = percentile(&lateness, 99.0).map(|v| round(v, 3));
    let max = lateness.iter().copied().fold(0.0, f64::max);
    report.notes = format!(
        "ctx.sleep({} ms) then {k} step(s); p50/p99 = lateness past the sleep from each start call; max lateness {max:.3} ms; {} workers",
        sleep.as_millis(),
        settings.workers
    );
    Ok(report)
}
