//! W1, throughput: start N workflows as fast as possible, each running K sequential steps;
//! time from the first start to the last result.

use std::time::Instant;

use worlds_engine::prelude::*;

use super::{chain, check, progress, start_world, step, Report, Settings};

/// Default number of workflows.
pub(crate) const N: usize = 1000;
/// Default steps per workflow.
pub(crate) const K: usize = 10;

/// Runs W1.
pub(crate) async fn run(settings: &Settings) -> anyhow::Result<Report> {
    let (n, k) = (settings.n.unwrap_or(N), settings.k.unwrap_or(K));
    progress(&format!(
        "W1: {n} concurrent workflows x {k} steps, {} workers",
        settings.workers
    ));
    let step = step();
    let flow = chain("w1", &step);
    let world = start_world(settings, n, vec![(&step).into(), (&flow).into()]).await?;

    // All starts are in flight at once, as the contract's clients do: on a durable store their
    // records share group commits instead of waiting for one sync each.
    if settings.via_http {
        return via_http(settings, world, n, k).await;
    }
    let started = Instant::now();
    let starts = (0..n).map(|_| world.execute(&flow, k as u64, WorkflowOptions::default()));
    let handles = futures::future::try_join_all(starts).await?;
    let all_started = started.elapsed();
    for handle in handles {
        check(handle.result().await?, k as u64)?;
    }
    let wall = started.elapsed();
    super::stop_world(world).await?;

    let mut report = Report::new(settings.backend.name(), "W1", n, k, wall.as_secs_f64());
    report.notes = format!(
        "in-process: {n} concurrent world.execute calls (all started after {:.1} ms), then each handle.result(); {} workers",
        super::ms(all_started),
        settings.workers
    );
    Ok(report)
}

/// Requests a `--via http` client keeps in flight: as many connections as it keeps alive.
const IN_FLIGHT: usize = 64;

/// W1 through the HTTP API: the starts with [`IN_FLIGHT`] requests in flight, then the results
/// likewise (as a client with a connection pool of that size would).
async fn via_http(settings: &Settings, world: World, n: usize, k: usize) -> anyhow::Result<Report> {
    use futures::{StreamExt, TryStreamExt};
    let world = std::sync::Arc::new(world);
    let remote = super::http::Remote::serve(&world).await?;
    let started = Instant::now();
    let runs: Vec<String> = futures::stream::iter(0..n)
        .map(|_| remote.start("w1", k as u64))
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await?;
    let all_started = started.elapsed();
    let outputs: Vec<u64> = futures::stream::iter(&runs)
        .map(|run| remote.result(run))
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await?;
    for output in outputs {
        check(output, k as u64)?;
    }
    let wall = started.elapsed();
    remote.stop().await;
    super::stop_world(super::http::unshare(world)?).await?;
    let mut report = Report::new(settings.backend.name(), "W1", n, k, wall.as_secs_f64());
    report.notes = format!(
        "over loopback HTTP, {IN_FLIGHT} requests in flight: {n} POST /v1/runs (all started after {:.1} ms), then each GET result; {} workers",
        super::ms(all_started),
        settings.workers
    );
    Ok(report)
}
