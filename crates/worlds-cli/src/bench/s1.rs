//! S1, the edge of scale on a durable backend: fill a store with N finished runs (1 000 000 by
//! default; one in a thousand failed), close the world, then open the store in a fresh process
//! and ask for the failed runs. Reports how long closing and opening took, the memory of the
//! opened world per run, and the query's time; on PostgreSQL also the whole
//! `worlds runs list --status failed --limit 50` command. Not a contract workload: the targets of
//! the storage work (open ≤ 15 s, `--status failed --limit 50` ≤ 50 ms).
//!
//! The open is timed in a child process (this binary again, with [`CHILD_PLACE_VAR`] naming the
//! directory, or the schema on PostgreSQL), so that its peak memory is the opened world's alone,
//! not the fill's.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use worlds_engine::prelude::*;
use worlds_engine::{RunStatus, WorkflowQueryFilter};

use crate::cli::Backend;

use super::{config, progress, report, Report, Settings};

/// Set in the child process that opens the filled store: to the world's directory, or to its
/// schema on PostgreSQL.
pub(crate) const CHILD_PLACE_VAR: &str = "WORLDS_BENCH_S1_PLACE";

/// Set to keep the filled directory (for profiling an open), instead of removing it.
const KEEP_VAR: &str = "WORLDS_BENCH_S1_KEEP";

/// Default number of runs.
const N: usize = 1_000_000;
/// One run in this many fails.
const FAIL_EVERY: u64 = 1000;
/// Starts in flight at once.
const IN_FLIGHT: usize = 1024;
/// Queries timed.
const SAMPLES: usize = 7;
/// The query's page size.
const PAGE: usize = 50;

/// The directory (or schema) of the child role, if this process is the child of an S1 run.
pub(crate) fn child_place() -> Option<String> {
    std::env::var(CHILD_PLACE_VAR).ok()
}

/// What the child measured, one JSON line on its stdout.
#[derive(Debug, Serialize, Deserialize)]
struct Opened {
    open_s: f64,
    runs: usize,
    failed_found: usize,
    rss_before_mb: f64,
    peak_rss_mb: f64,
    query_ms: Vec<f64>,
}

/// The workflow: returns its input, or fails for one input in [`FAIL_EVERY`].
fn flow() -> Workflow<u64, u64> {
    workflow("s1", |_ctx: WorkflowContext, i: u64| async move {
        if i.is_multiple_of(FAIL_EVERY) {
            return Err(WorkflowError::msg(format!("run {i} fails on purpose")));
        }
        Ok(i)
    })
}

/// Runs S1 (the parent role).
pub(crate) async fn run(settings: &Settings) -> anyhow::Result<Report> {
    if settings.backend == Backend::Memory {
        bail!("S1 opens a store again: it needs `--backend hybrid`, `file` or `postgres`");
    }
    let n = settings.n.unwrap_or(N);
    progress(&format!(
        "S1: {n} finished runs (1 in {FAIL_EVERY} failed), close, open in a fresh process, query"
    ));
    let flow = flow();
    let config = config(settings, 0, None)?;
    let place = match settings.backend {
        Backend::Postgres => config.database.schema.clone(),
        _ => config.persistence_path.to_string_lossy().into_owned(),
    };
    let world = open(config).await?;
    world.register(&flow)?;
    world.start().await?;
    let filling = Instant::now();
    futures::stream::iter(0..n as u64)
        .map(|i| {
            let (world, flow) = (&world, &flow);
            async move {
                let handle = world.execute(flow, i, WorkflowOptions::default()).await?;
                // A failed run is what the query looks for.
                let _ = handle.result().await;
                Ok::<_, WorldError>(())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_for_each(|()| async { Ok(()) })
        .await?;
    let fill = filling.elapsed();
    progress(&format!(
        "S1: filled in {:.1} s; closing",
        fill.as_secs_f64()
    ));
    let closing = Instant::now();
    world.shutdown().await?;
    drop(world);
    let close = closing.elapsed();

    progress("S1: opening in a fresh process");
    let opened = open_in_child(settings, &place);
    // On PostgreSQL: the store right after the fill, then at rest, once vacuumed.
    let mut command = None;
    let mut vacuumed = None;
    if let (Ok(_), Backend::Postgres) = (&opened, settings.backend) {
        let before = time_runs_list(settings, &place)?;
        progress("S1: VACUUM (ANALYZE) of the runs table, as autovacuum would");
        vacuum(settings, &place).await?;
        let after = open_in_child(settings, &place)?;
        command = Some((before, time_runs_list(settings, &place)?));
        vacuumed = Some(after);
    }
    if settings.backend != Backend::Postgres {
        if std::env::var_os(KEEP_VAR).is_some() {
            progress(&format!("S1: the directory is kept: {place}"));
        } else {
            std::fs::remove_dir_all(&place).with_context(|| format!("could not remove {place}"))?;
        }
    }
    let opened = opened?;
    if opened.runs != n {
        bail!("the reopened world holds {} runs, not {n}", opened.runs);
    }
    let mut query = opened.query_ms.clone();
    query.sort_by(f64::total_cmp);
    let median = query[query.len() / 2];
    let per_run_bytes = (opened.peak_rss_mb - opened.rss_before_mb) * 1024.0 * 1024.0 / n as f64;

    let mut report = Report::new(settings.backend.name(), "S1", n, 0, opened.open_s);
    report.workflows_per_s = None;
    report.steps_per_s = None;
    report.p50_ms = Some(report::round(median, 3));
    report.peak_rss_mb = Some(opened.peak_rss_mb);
    let (opening, memory) = if settings.backend == Backend::Postgres {
        (
            "connects and checks the schema; nothing is loaded",
            String::new(),
        )
    } else {
        (
            "every run loaded",
            format!(": {per_run_bytes:.0} bytes per run"),
        )
    };
    report.notes = format!(
        "wall_s = open: a fresh process opens the store ({opening}); p50_ms = median of {SAMPLES} queries of the failed runs, {PAGE} a page ({} found on the page; all {:?} ms); peak_rss_mb = that process's VmHWM ({:.1} MiB before opening{memory}); the fill took {:.1} s ({IN_FLIGHT} runs in flight) and closing the world after it {:.3} s; {} workers",
        opened.failed_found,
        opened.query_ms,
        opened.rss_before_mb,
        fill.as_secs_f64(),
        close.as_secs_f64(),
        settings.workers
    );
    if let (Some((before, after)), Some(vacuumed)) = (command, vacuumed) {
        report.notes.push_str(&format!(
            "; the whole command `worlds runs list --status failed --limit 50` (process start, connection, query, output): {before:?} ms; after VACUUM (ANALYZE) of the runs table (autovacuum's work on a server that runs it: every run's row was rewritten at each status change), the query {:?} ms and the command {after:?} ms",
            vacuumed.query_ms
        ));
    }
    Ok(report)
}

/// `VACUUM (ANALYZE)` of the runs table in `schema`: what autovacuum does after a burst of
/// writes on a server that runs it.
async fn vacuum(settings: &Settings, schema: &str) -> anyhow::Result<()> {
    let options = worlds_postgres::PostgresOptions {
        schema: schema.to_owned(),
        ..worlds_postgres::PostgresOptions::default()
    };
    worlds_postgres::vacuum_runs(&settings.database_url, &options).await?;
    Ok(())
}

/// Opens a benchmark world on `config`'s store (not started).
async fn open(config: WorldConfig) -> anyhow::Result<World> {
    let world = if config.persistence == Persistence::Postgres {
        worlds_postgres::open(config).await
    } else {
        World::new(config)
    };
    world.context("could not open the world")
}

/// Times `worlds runs list --status failed --limit 50` on the PostgreSQL schema `schema`, a few
/// times, as a user would run it: this binary in a process of its own.
fn time_runs_list(settings: &Settings, schema: &str) -> anyhow::Result<Vec<f64>> {
    let mut times = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let started = Instant::now();
        let output = Command::new(std::env::current_exe().context("no path to this program")?)
            .args([
                "runs",
                "list",
                "--status",
                "failed",
                "--limit",
                &PAGE.to_string(),
            ])
            .args(["--database-url", &settings.database_url, "--schema", schema])
            .stdin(Stdio::null())
            .output()
            .context("could not run `worlds runs list`")?;
        times.push(report::round(super::ms(started.elapsed()), 1));
        if !output.status.success() {
            bail!(
                "`worlds runs list` failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
    Ok(times)
}

/// Runs this binary as the child that opens the store at `place` and queries it; returns what
/// it measured.
fn open_in_child(settings: &Settings, place: &str) -> anyhow::Result<Opened> {
    let output = Command::new(std::env::current_exe().context("no path to this program")?)
        .args([
            "bench",
            "--workload",
            "s1",
            "--backend",
            settings.backend.name(),
        ])
        .args(["--database-url", &settings.database_url])
        .env(CHILD_PLACE_VAR, place)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("could not start the child process")?;
    if !output.status.success() {
        bail!(
            "the process that opens the directory failed ({})",
            output.status
        );
    }
    let line = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(line.trim()).with_context(|| format!("unexpected child output {line:?}"))
}

/// The child role: opens the world on `place` (not started, so nothing runs), times a query of
/// the failed runs, and prints what it measured.
pub(crate) async fn child(settings: &Settings, place: &str) -> anyhow::Result<()> {
    let rss_before_mb = report::rss_mb().unwrap_or(0.0);
    let settings = Settings {
        schema: Some(place.to_owned()),
        ..settings.clone()
    };
    let config = config(&settings, 0, Some(PathBuf::from(place)))?;
    let opening = Instant::now();
    let world = open(config).await?;
    let open_s = opening.elapsed().as_secs_f64();
    let peak_rss_mb = report::peak_rss_mb().unwrap_or(0.0);
    let runs = world
        .count_runs(WorkflowQueryFilter::new(), usize::MAX)
        .await?;
    let mut query_ms = Vec::with_capacity(SAMPLES);
    let mut failed_found = 0;
    for _ in 0..SAMPLES {
        let asking = Instant::now();
        let page = world
            .list_runs(
                WorkflowQueryFilter::new()
                    .status(RunStatus::Failed)
                    .limit(PAGE),
            )
            .await?;
        query_ms.push(report::round(super::ms(asking.elapsed()), 3));
        failed_found = page.data.len();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let opened = Opened {
        open_s,
        runs,
        failed_found,
        rss_before_mb,
        peak_rss_mb,
        query_ms,
    };
    println!("{}", serde_json::to_string(&opened)?);
    Ok(())
}
