//! W4, waiting is cheap: start N workflows that each sleep an hour; once every one is started
//! and waiting on its timer, report the process's peak memory and the time it took to get there.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use worlds_engine::prelude::*;

use super::{progress, start_world, Report, Settings};

/// Default number of workflows.
const N: usize = 100_000;
/// How long each workflow sleeps: far longer than the benchmark.
const SLEEP: Duration = Duration::from_secs(3600);
/// Starts in flight at once: the client starts every run concurrently, as the peers' clients
/// do, with a bound so that it does not hold 100 000 pending calls.
const IN_FLIGHT: usize = 1024;

/// Runs W4.
pub(crate) async fn run(settings: &Settings) -> anyhow::Result<Report> {
    let n = settings.n.unwrap_or(N);
    progress(&format!(
        "W4: {n} workflows that sleep {} s, {} workers",
        SLEEP.as_secs(),
        settings.workers
    ));
    let flow = workflow("w4", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep(SLEEP).await?;
        Ok::<_, WorkflowError>(())
    });
    // No room reserved in the run cache: waiting runs beyond its bound are evicted, which is
    // the point of this workload.
    let world = start_world(settings, 0, vec![(&flow).into()]).await?;

    let started = Instant::now();
    // Each start returns once its run is created (durably, on a durable backend); handles are
    // dropped at once, only the runs matter.
    futures::stream::iter(0..n)
        .map(|_| world.execute(&flow, (), WorkflowOptions::default()))
        .buffer_unordered(IN_FLIGHT)
        .try_for_each(|_handle| async { Ok(()) })
        .await?;
    // Wait until every run has started and is parked on its timer: nothing queued, nobody busy.
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
    let wall = started.elapsed();
    let rss = super::report::peak_rss_mb();
    let restart = match world.config().persistence {
        Persistence::File | Persistence::Hybrid => Some(close_and_reopen(world, &flow).await?),
        _ => {
            super::stop_world(world).await?;
            None
        }
    };

    let mut report = Report::new(settings.backend.name(), "W4", n, 0, wall.as_secs_f64());
    report.peak_rss_mb = rss;
    report.steps_per_s = None;
    report.notes = format!(
        "{n} runs started ({IN_FLIGHT} `execute` calls in flight at a time) and waiting on a 1 h durable timer; wall_s = time to get all of them there; peak_rss_mb = VmHWM of the whole process; {} workers",
        settings.workers
    );
    if let Some(restart) = restart {
        report.notes.push_str(&format!(
            "; then close_s = {:.3} (shutdown and close: the last compaction), reopen_s = {:.3} (open the directory again, every run loaded), start_s = {:.3} (start: every run's timer re-armed)",
            restart.close.as_secs_f64(),
            restart.reopen.as_secs_f64(),
            restart.start.as_secs_f64()
        ));
    }
    Ok(report)
}

/// How long a durable world holding W4's runs took to close and to come back.
struct Restart {
    close: Duration,
    reopen: Duration,
    start: Duration,
}

/// Closes `world` (its store compacts one last time), opens its directory again and starts it,
/// timing each; then removes the directory.
async fn close_and_reopen(world: World, flow: &Workflow<(), ()>) -> anyhow::Result<Restart> {
    let config = world.config().clone();
    let closing = Instant::now();
    world.shutdown().await?;
    drop(world);
    let close = closing.elapsed();
    let opening = Instant::now();
    let reopened = World::new(config)?;
    let reopen = opening.elapsed();
    reopened.register(flow)?;
    let starting = Instant::now();
    reopened.start().await?;
    let start = starting.elapsed();
    super::stop_world(reopened).await?;
    Ok(Restart {
        close,
        reopen,
        start,
    })
}
