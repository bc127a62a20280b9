//! V1, the deploy check: N (10 000) unfinished runs of K (3) steps each, parked on a durable
//! timer, are replayed by [`World::verify`] against the code registered now — once unchanged
//! (nothing may be reported) and once after a change that breaks exactly the runs of even input
//! (their first step is another one now). Reports the time of each pass; the check fails the
//! workload if the report is not exactly right.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use futures::{StreamExt, TryStreamExt};
use worlds_engine::prelude::*;
use worlds_engine::VerifyOptions;

use super::{config, progress, step, Report, Settings};

/// Default number of runs.
const N: usize = 10_000;
/// Default steps per run before it parks.
const K: usize = 3;
/// Starts in flight at once.
const IN_FLIGHT: usize = 512;

/// `k` steps (the first one `other` for even inputs once `changed` is set), then a day's sleep.
fn parked(
    step: &Activity<u64, u64>,
    other: &Activity<u64, u64>,
    changed: &Arc<AtomicBool>,
    k: u64,
) -> Workflow<u64, u64> {
    let (step, other, changed) = (step.clone(), other.clone(), changed.clone());
    workflow("v1", move |ctx: WorkflowContext, n: u64| {
        let (step, other, changed) = (step.clone(), other.clone(), changed.clone());
        async move {
            let mut value = n;
            for i in 0..k {
                let which = if i == 0 && n.is_multiple_of(2) && changed.load(Ordering::Relaxed) {
                    &other
                } else {
                    &step
                };
                value = ctx.run(which, value).await?;
            }
            ctx.sleep(Duration::from_secs(86_400)).await?;
            Ok::<_, WorkflowError>(value)
        }
    })
}

/// Runs V1.
pub(crate) async fn run(settings: &Settings) -> anyhow::Result<Report> {
    let (n, k) = (settings.n.unwrap_or(N), settings.k.unwrap_or(K));
    progress(&format!(
        "V1: verify {n} unfinished runs of {k} steps, unchanged and changed"
    ));
    let (step, other) = (
        step(),
        activity("other", |_ctx: ActivityContext, n: u64| async move {
            Ok::<_, StepError>(n + 2)
        }),
    );
    let changed = Arc::new(AtomicBool::new(false));
    let flow = parked(&step, &other, &changed, k as u64);
    let config = config(settings, n, None)?;
    let durable = matches!(config.persistence, Persistence::File | Persistence::Hybrid);
    let world = if config.persistence == Persistence::Postgres {
        worlds_postgres::open(config.clone()).await
    } else {
        World::new(config.clone())
    }
    .context("could not create the world")?;
    world.register(&step)?.register(&other)?.register(&flow)?;
    world.start().await?;
    let ids: Vec<(u64, String)> = futures::stream::iter(0..n as u64)
        .map(|i| {
            let (world, flow) = (&world, &flow);
            async move {
                let handle = world.execute(flow, i, WorkflowOptions::default()).await?;
                anyhow::Ok((i, handle.id))
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await?;
    loop {
        let metrics = world.get_metrics();
        if metrics.workflows.running as usize >= n
            && metrics.workflows.queued == 0
            && metrics.workers.busy == 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The deploy: a new process (world) on the same store, its workflows registered, not
    // started — verify reads histories, it runs nothing.
    let checker = if durable {
        world.shutdown().await?;
        drop(world);
        let checker = World::new(config.clone()).context("could not reopen the world")?;
        checker.register(&step)?.register(&other)?.register(&flow)?;
        checker
    } else {
        world
    };
    let started = Instant::now();
    let unchanged = checker.verify(VerifyOptions::default()).await?;
    let unchanged_s = started.elapsed().as_secs_f64();
    if !unchanged.is_clean() || unchanged.runs() != n {
        bail!(
            "verify of unchanged code reported {} runs, not clean ones:\n{unchanged}",
            unchanged.runs()
        );
    }
    changed.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let report = checker.verify(VerifyOptions::default()).await?;
    let changed_s = started.elapsed().as_secs_f64();
    let mut diverged: Vec<&str> = report
        .workflows
        .values()
        .flat_map(|w| w.diverged.iter().map(|d| d.run_id.as_str()))
        .collect();
    diverged.sort_unstable();
    let mut expected: Vec<&str> = ids
        .iter()
        .filter(|(i, _)| i.is_multiple_of(2))
        .map(|(_, id)| id.as_str())
        .collect();
    expected.sort_unstable();
    if diverged != expected {
        bail!(
            "verify after the change reported {} runs; exactly the {} runs of even input diverge",
            diverged.len(),
            expected.len()
        );
    }
    let rss = super::report::peak_rss_mb();
    if durable {
        let dir = checker.config().persistence_path.clone();
        drop(checker);
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("could not remove {}", dir.display()))?;
    } else {
        checker.shutdown().await?;
    }
    let mut result = Report::new(
        settings.backend.name(),
        "V1",
        n,
        k,
        unchanged_s.max(changed_s),
    );
    result.peak_rss_mb = rss;
    result.steps_per_s = None;
    result.notes = format!(
        "verify of {n} unfinished runs ({k} steps and a pending timer each{}): unchanged code {unchanged_s:.2} s, 0 reported; changed code {changed_s:.2} s, exactly the {} runs of even input reported; wall_s = the slower pass",
        if durable { ", read back by a new world on the same directory" } else { "" },
        expected.len()
    );
    Ok(result)
}
