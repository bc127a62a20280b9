//! W2, latency: N workflows one after another, K sequential steps each; latency from the start
//! call to the result.

use std::time::Instant;

use worlds_engine::prelude::*;

use super::report::{percentile, round};
use super::{chain, check, ms, progress, start_world, step, Report, Settings};

/// Default number of workflows.
const N: usize = 200;
/// Default steps per workflow.
const K: usize = 3;

/// Runs W2.
pub(crate) async fn run(settings: &Settings) -> anyhow::Result<Report> {
    let (n, k) = (settings.n.unwrap_or(N), settings.k.unwrap_or(K));
    progress(&format!(
        "W2: {n} sequential workflows x {k} steps, {} workers",
        settings.workers
    ));
    let step = step();
    let flow = chain("w2", &step);
    let world = start_world(settings, n, vec![(&step).into(), (&flow).into()]).await?;

    let mut latencies = Vec::with_capacity(n);
    let started;
    let wall;
    if settings.via_http {
        let world = std::sync::Arc::new(world);
        let remote = super::http::Remote::serve(&world).await?;
        started = Instant::now();
        for _ in 0..n {
            let t0 = Instant::now();
            check(remote.run("w2", k as u64).await?, k as u64)?;
            latencies.push(ms(t0.elapsed()));
        }
        wall = started.elapsed();
        remote.stop().await;
        super::stop_world(super::http::unshare(world)?).await?;
    } else {
        started = Instant::now();
        for _ in 0..n {
            let t0 = Instant::now();
            let handle = world
                .execute(&flow, k as u64, WorkflowOptions::default())
                .await?;
            check(handle.result().await?, k as u64)?;
            latencies.push(ms(t0.elapsed()));
        }
        wall = started.elapsed();
        super::stop_world(world).await?;
    }

    let mut report = Report::new(settings.backend.name(), "W2", n, k, wall.as_secs_f64());
    report.p50_ms = percentile(&latencies, 50.0).map(|v| round(v, 3));
    report.p99_ms = percentile(&latencies, 99.0).map(|v| round(v, 3));
    let max = latencies.iter().copied().fold(0.0, f64::max);
    let how = if settings.via_http {
        "sequential over loopback HTTP: POST /v1/runs?wait_ms (start and wait in one call)"
    } else {
        "sequential in-process world.execute + handle.result"
    };
    report.notes = format!(
        "{how}; max latency {max:.3} ms; {} workers",
        settings.workers
    );
    Ok(report)
}
