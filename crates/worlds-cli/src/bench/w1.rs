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
