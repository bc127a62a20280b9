//! R1, a world that runs for months: every simulated day N workflows of K steps run and end,
//! then the clock moves a day on and a retention sweep (completed runs kept 7 days) removes what
//! the policy lets go. The store's size, the process's memory and the time to reopen the store
//! should stop growing after the first week. Time is virtual (the world's clock), so 90 days
//! take minutes; the work each day is real.
//!
//! Also measured: W2-style latency (one workflow of K steps after another) while a sweep runs,
//! against the same with no sweep, in the same sitting.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use worlds_engine::clock::VirtualClock;
use worlds_engine::prelude::*;
use worlds_engine::store::HybridStore;

use super::{chain, check, config, progress, step, Report, Settings};
use crate::cli::Backend;

/// Default workflows per simulated day.
const N: usize = 2_000;
/// Default steps per workflow.
const K: usize = 3;
/// Simulated days.
const DAYS: u64 = 90;
/// How long completed runs are kept.
const KEEP_DAYS: u64 = 7;
/// Every how many days the store is closed and opened again, timed.
const REOPEN_EVERY: u64 = 15;
/// Latency probes per measurement (with and without a sweep running).
const PROBES: usize = 1_000;
/// Days whose sweeps are measured, from day `KEEP_DAYS + 2` (the first whose sweep removes a
/// full day): their probes are pooled, so a p99 rests on more than one sweep.
const MEASURED_DAYS: u64 = 3;
/// Starts in flight at once.
const IN_FLIGHT: usize = 512;
const DAY: Duration = Duration::from_secs(86_400);
/// The virtual clock's start: 2026-01-01.
const T0: i64 = 1_767_225_600_000;

/// One simulated day's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Day {
    /// Days since the start.
    pub(crate) day: u64,
    /// Bytes of the store: the data directory, or the schema's tables and indexes.
    pub(crate) store_bytes: u64,
    /// Resident memory of this process (VmRSS), MiB.
    pub(crate) rss_mb: f64,
    /// Runs the day's sweep removed.
    pub(crate) removed: u64,
    /// Seconds the day's sweep took.
    pub(crate) sweep_s: f64,
    /// Seconds to close and open the store again, on the days it was timed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reopen_s: Option<f64>,
}

/// Runs R1.
pub(crate) async fn run(settings: &Settings) -> anyhow::Result<Report> {
    let n = settings.n.unwrap_or(N);
    let k = settings.k.unwrap_or(K);
    let days = settings.days.unwrap_or(DAYS);
    progress(&format!(
        "R1: {days} simulated days of {n} workflows of {k} steps, completed runs kept {KEEP_DAYS} days"
    ));
    let step = step();
    let flow = chain("r1", &step);
    let clock = VirtualClock::new(T0);
    // Moves with real time between the day jumps (below), under one lock with them.
    let jumps = Arc::new(std::sync::Mutex::new(()));
    let flowing = keep_time_flowing(&clock, &jumps);
    let mut config = config(settings, IN_FLIGHT, None)?;
    config.retention.completed = (DAY * KEEP_DAYS as u32).into();
    // The benchmark sweeps once a day itself, to time each sweep.
    config.retention.sweep_interval = (DAY * 10_000).into();
    if let Some(share) = settings.sweep_share {
        config.retention.sweep_share = share;
    }
    // The logs' own retention, as an operator sets it beside the runs' (a line per run
    // created, in day files or rows).
    config.logs.max_files = Some(KEEP_DAYS as usize);
    let started = Instant::now();
    let (mut world, mut hybrid) = open(&config, &clock, &step, &flow).await?;
    let mut curve = Vec::new();
    let (mut idle_ms, mut during_ms) = (Vec::new(), Vec::new());
    for day in 1..=days {
        futures::stream::iter(0..n)
            .map(|_| {
                let (world, flow) = (&world, &flow);
                async move {
                    let handle = world
                        .execute(flow, k as u64, WorkflowOptions::default())
                        .await?;
                    check(handle.result().await?, k as u64)
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        let measure = (KEEP_DAYS + 2..KEEP_DAYS + 2 + MEASURED_DAYS).contains(&day);
        if measure {
            idle_ms.extend(probe(&world, &flow, k, PROBES, None).await?);
        }
        {
            let _jump = jumps
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            clock.advance(DAY);
        }
        let sweeping = Instant::now();
        let id = world.prune().await?;
        if measure {
            // The same probes while this day's sweep removes the day's runs.
            during_ms.extend(probe(&world, &flow, k, PROBES, Some(&id)).await?);
        }
        let report = world.prune_report_when_done(&id).await?;
        let sweep_s = sweeping.elapsed().as_secs_f64();
        if settings.backend == Backend::Postgres {
            // Autovacuum works on wall-clock time: a simulated day lasts seconds here, so the
            // benchmark vacuums after each sweep what a day of autovacuum would have.
            vacuum(&config, settings).await?;
        }
        if let Some(store) = &hybrid {
            // Likewise the hybrid store's background compaction and segment collection (a
            // round every 5 s of wall-clock time): brought up to date once per simulated day.
            tokio::task::block_in_place(|| -> anyhow::Result<()> {
                store.compact()?;
                while store.collect_segment()?.is_some() {}
                Ok(())
            })?;
        }
        let reopen_s = if day % REOPEN_EVERY == 0 || day == days {
            let reopening = Instant::now();
            world.shutdown().await?;
            drop(world);
            drop(hybrid);
            (world, hybrid) = open(&config, &clock, &step, &flow).await?;
            Some(reopening.elapsed().as_secs_f64())
        } else {
            None
        };
        let sample = Day {
            day,
            store_bytes: store_bytes(&config, settings).await?,
            rss_mb: super::report::rss_mb().unwrap_or(0.0),
            removed: report.removed,
            sweep_s: round(sweep_s),
            reopen_s: reopen_s.map(round),
        };
        progress(&format!(
            "R1 day {day}: {} MiB stored, {:.0} MiB resident, sweep removed {} in {:.2} s{}",
            sample.store_bytes >> 20,
            sample.rss_mb,
            sample.removed,
            sample.sweep_s,
            sample
                .reopen_s
                .map(|s| format!(", reopened in {s:.2} s"))
                .unwrap_or_default()
        ));
        curve.push(sample);
    }
    let wall = started.elapsed();
    flowing.abort();
    drop(hybrid);
    super::stop_world(world).await?;

    let mut report = Report::new(settings.backend.name(), "R1", n, k, wall.as_secs_f64());
    report.peak_rss_mb = super::report::peak_rss_mb();
    report.steps_per_s = None;
    report.workflows_per_s = None;
    let probes = (idle_ms.len(), during_ms.len());
    let (idle, sweeping) = (quantiles(idle_ms), quantiles(during_ms));
    report.p50_ms = idle.first().copied();
    report.p99_ms = idle.get(1).copied();
    report.notes = format!(
        "{days} simulated days on a virtual clock, {n} workflows of {k} steps per day, completed runs kept {KEEP_DAYS} days, one sweep per day (on PostgreSQL followed by a VACUUM of the swept tables and the log entries, on hybrid by a compaction and the segment rewrites due, standing in for a day of background housekeeping); p50/p99 = W2-style latency (one workflow after another, before the day's sweep) on days {}..={}, {} probes; the same while those days' sweeps ran, {} probes: p50 {:?} ms, p99 {:?} ms",
        KEEP_DAYS + 2,
        KEEP_DAYS + 1 + MEASURED_DAYS,
        probes.0,
        probes.1,
        sweeping.first(),
        sweeping.get(1)
    );
    report.curve = Some(curve);
    Ok(report)
}

/// Keeps `clock` moving at the speed of real time between the day jumps, so that a world's
/// own waits (a step's retry delay after a store error, a lease's renewal) come as they would
/// in a world whose time flows, instead of only at the next simulated day, which the benchmark
/// takes only once every run of the day has ended. A few seconds a day, against days of
/// retention. Each step holds `jumps`, as the day jumps do: a step read before a jump and
/// written after it would undo the jump.
fn keep_time_flowing(
    clock: &VirtualClock,
    jumps: &Arc<std::sync::Mutex<()>>,
) -> tokio::task::JoinHandle<()> {
    const STEP: Duration = Duration::from_millis(100);
    let (clock, jumps) = (clock.clone(), jumps.clone());
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(STEP);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let _jump = jumps
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            clock.advance(STEP);
        }
    })
}

/// Opens (or reopens) the world on `config` with the virtual clock, registers and starts it;
/// with the hybrid store it opened, to drive its housekeeping.
async fn open(
    config: &WorldConfig,
    clock: &VirtualClock,
    step: &Activity<u64, u64>,
    flow: &Workflow<u64, u64>,
) -> anyhow::Result<(World, Option<Arc<HybridStore>>)> {
    let clock: Arc<dyn worlds_engine::clock::Clock> = Arc::new(clock.clone());
    let (world, hybrid) = match config.persistence {
        Persistence::Postgres => (
            worlds_postgres::open_with_clock(config.clone(), clock)
                .await
                .context("could not open the world")?,
            None,
        ),
        Persistence::Hybrid => {
            let store = Arc::new(
                HybridStore::open(&config.persistence_path)
                    .context("could not open the hybrid store")?,
            );
            let world = World::with_store(config.clone(), clock, store.clone());
            (world, Some(store))
        }
        _ => (
            World::with_clock(config.clone(), clock).context("could not open the world")?,
            None,
        ),
    };
    world.register(step)?;
    world.register(flow)?;
    world.start().await?;
    Ok((world, hybrid))
}

/// The latencies in ms of up to `count` workflows run one after another (while sweep `until`
/// is unfinished, if given).
async fn probe(
    world: &World,
    flow: &Workflow<u64, u64>,
    k: usize,
    count: usize,
    until: Option<&str>,
) -> anyhow::Result<Vec<f64>> {
    let mut took = Vec::with_capacity(count);
    for _ in 0..count {
        if let Some(sweep) = until {
            if world.prune_report(sweep).await?.done {
                break;
            }
        }
        let start = Instant::now();
        let handle = world
            .execute(flow, k as u64, WorkflowOptions::default())
            .await?;
        check(handle.result().await?, k as u64)?;
        took.push(super::ms(start.elapsed()));
    }
    Ok(took)
}

/// (p50, p99) of `took`, rounded; empty when it is.
fn quantiles(mut took: Vec<f64>) -> Vec<f64> {
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)];
    if took.is_empty() {
        Vec::new()
    } else {
        vec![round(at(0.5)), round(at(0.99))]
    }
}

/// The store's size on disk: the directory, or the schema's relations.
async fn store_bytes(config: &WorldConfig, settings: &Settings) -> anyhow::Result<u64> {
    if settings.backend == Backend::Postgres {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&settings.database_url)
            .await
            .context("could not connect to measure the schema")?;
        let bytes: Option<i64> = sqlx::query_scalar(
            "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c \
             JOIN pg_namespace s ON s.oid = c.relnamespace \
             WHERE s.nspname = $1 AND c.relkind IN ('r', 'm')",
        )
        .bind(&config.database.schema)
        .fetch_one(&mut conn)
        .await?;
        return Ok(bytes.unwrap_or(0).max(0) as u64);
    }
    Ok(dir_bytes(&config.persistence_path))
}

/// `VACUUM` of the tables a sweep deletes from, and of the log entries the logs' own retention
/// deletes (a day's at a time), in the world's schema: what the server's autovacuum does, on a
/// server that may run without it (this machine's does; `worlds doctor` warns of it).
async fn vacuum(config: &WorldConfig, settings: &Settings) -> anyhow::Result<()> {
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&settings.database_url)
        .await
        .context("could not connect to vacuum the schema")?;
    // The schema name is checked (a plain lower-case identifier) when the world opens it.
    let schema = &config.database.schema;
    for table in [
        "runs", "events", "steps", "hooks", "timers", "streams", "chunks", "logs", "members",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(format!("VACUUM \"{schema}\".{table}")))
            .execute(&mut conn)
            .await
            .with_context(|| format!("could not vacuum {table}"))?;
    }
    Ok(())
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&entry.path()),
            Ok(_) => entry.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
