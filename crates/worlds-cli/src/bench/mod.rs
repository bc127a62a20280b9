//! `worlds bench`: the workloads of the benchmark contract, run against a world in this process.
//!
//! Each workload builds a fresh world on the real system clock, runs, shuts the world down and
//! returns a [`Report`]. A "step" is an activity whose function does no work: it returns its
//! input + 1.

mod dashboard;
mod http;
mod members;
mod r1;
mod report;
mod s1;
mod v1;
mod w1;
mod w2;
mod w3;
mod w4;
mod w5;
mod w6;

use std::time::Duration;

use anyhow::{bail, Context as _};
use worlds_engine::prelude::*;

use crate::cli::{Backend, BenchArgs, WorkloadArg};

pub(crate) use report::Report;

/// Workers of a memory world unless `--workers` says otherwise. On the 2-core machines used for
/// the contract runs, W1 throughput hardly depends on it (2, 4, 8 and 16 within noise), and
/// neither does W3 since `World::start` waits for its workers (p99 medians of 12 alternating
/// rounds: 5.88 ms with 16, 6.62 ms with 4).
pub(crate) const DEFAULT_WORKERS: usize = 16;

/// Default number of workers on durable backends (see `--workers`). A worker waits for the sync
/// of each record it must make durable, so on a durable store the number of workers bounds how
/// many records a group commit can gather; workers are tokio tasks, so 1024 cost little. (On this
/// machine W1 hybrid, medians of 9: 40.7k steps/s with 256 workers, 44.0k with 1024.)
pub(crate) const DURABLE_WORKERS: usize = 1024;

/// Default number of workers on the postgres backend. A worker waits for its step's records
/// to be committed, so more workers in flight let one commit carry more records (W1 on this
/// machine, three alternating pairs: 3 397–3 821 steps/s with 32 workers, 3 860–4 540 with
/// 128). Workers share the pool (the engine reads its own records from the store's memory), so
/// the pool stays small.
pub(crate) const POSTGRES_WORKERS: usize = 128;

/// Most connections a postgres benchmark world opens (the default server allows 100).
const POSTGRES_POOL_MAX: u32 = 64;

/// The contract's W3 sleep.
const W3_SLEEP: Duration = Duration::from_secs(2);

/// What every workload needs to know.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The backend to benchmark.
    pub(crate) backend: Backend,
    /// `--n`, if given.
    pub(crate) n: Option<usize>,
    /// `--k`, if given.
    pub(crate) k: Option<usize>,
    /// Workers of each world.
    pub(crate) workers: usize,
    /// W3's durable sleep.
    pub(crate) sleep: Duration,
    /// The PostgreSQL server of the postgres backend.
    pub(crate) database_url: String,
    /// The schema of the workload being run on the postgres backend: a fresh one per workload.
    pub(crate) schema: Option<String>,
    /// Member processes of W1 on the postgres backend (`--members`).
    pub(crate) members: usize,
    /// W1 and W2 through the HTTP API (`--via http`).
    pub(crate) via_http: bool,
    /// R1's simulated days (`--days`).
    pub(crate) days: Option<u64>,
    /// R1's sweep share (`--sweep-share`).
    pub(crate) sweep_share: Option<u8>,
}

/// Runs `worlds bench`.
pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let settings = Settings {
        backend: args.backend,
        n: args.n,
        k: args.k,
        workers: args.workers.unwrap_or(match args.backend {
            Backend::Memory => DEFAULT_WORKERS,
            Backend::Postgres => POSTGRES_WORKERS,
            _ => DURABLE_WORKERS,
        }),
        sleep: args.sleep_ms.map(Duration::from_millis).unwrap_or(W3_SLEEP),
        database_url: args.database_url.clone(),
        schema: args.member_of.clone(),
        members: args.members,
        via_http: args.via == crate::cli::ViaArg::Http,
        days: args.days,
        sweep_share: args.sweep_share,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the tokio runtime")?;
    if let (Some(_), Some(start_ms)) = (&args.member_of, args.start_at) {
        // A member process started by `--members`: it prints when its share ended.
        return runtime.block_on(members::member(&settings, start_ms));
    }
    if settings.members > 1
        && (settings.backend != Backend::Postgres || args.workload != WorkloadArg::W1)
    {
        bail!("--members runs W1 on the postgres backend (--workload w1 --backend postgres)");
    }
    if let (WorkloadArg::W5, Some(dir)) = (args.workload, w5::child_dir()) {
        // The process W5 starts and kills: it prints no result.
        return runtime.block_on(w5::child(&settings, &dir));
    }
    if let (WorkloadArg::S1, Some(place)) = (args.workload, s1::child_place()) {
        // The process S1 opens its store in: it prints what it measured.
        return runtime.block_on(s1::child(&settings, &place));
    }
    let workloads = match args.workload {
        // W5 needs a disk to recover from; W4 (100 000 runs) is run on its own.
        WorkloadArg::All if matches!(settings.backend, Backend::Memory | Backend::Postgres) => {
            vec![
                WorkloadArg::W1,
                WorkloadArg::W2,
                WorkloadArg::W3,
                WorkloadArg::W6,
            ]
        }
        WorkloadArg::All => vec![
            WorkloadArg::W1,
            WorkloadArg::W2,
            WorkloadArg::W3,
            WorkloadArg::W5,
            WorkloadArg::W6,
        ],
        one => vec![one],
    };
    for workload in workloads {
        let report = runtime.block_on(run_workload(workload, &settings))?;
        if args.json {
            println!("{}", report.to_json_line());
        } else {
            println!("{}", report.to_text_line());
        }
    }
    Ok(())
}

/// Runs one workload. On PostgreSQL it runs in a fresh schema, dropped afterwards.
pub(crate) async fn run_workload(
    workload: WorkloadArg,
    settings: &Settings,
) -> anyhow::Result<Report> {
    if settings.backend != Backend::Postgres {
        return run_one(workload, settings).await;
    }
    if workload == WorkloadArg::W5 {
        bail!(
            "W5 is not supported on the postgres backend: it kills and restarts a world on a data directory (run it with --backend file or hybrid)"
        );
    }
    let db = crate::target::postgres::Database::new(&settings.database_url, "worlds");
    let schema = format!(
        "bench_{}",
        ulid::Ulid::generate().to_string().to_lowercase()
    );
    let settings = Settings {
        schema: Some(schema.clone()),
        ..settings.clone()
    };
    progress(&format!("PostgreSQL on {} (schema {schema})", db.server()));
    let result = run_one(workload, &settings).await;
    let dropped = crate::target::postgres::drop_schema(&settings.database_url, &schema).await;
    let report = result.map_err(|e| db.error(format!("{e:#}")))?;
    dropped.map_err(|e| db.error(e))?;
    Ok(report)
}

/// Runs one workload on the world `settings` describe.
async fn run_one(workload: WorkloadArg, settings: &Settings) -> anyhow::Result<Report> {
    match workload {
        WorkloadArg::W1 if settings.members > 1 => members::run(settings, settings.members).await,
        WorkloadArg::W1 => w1::run(settings).await,
        WorkloadArg::W2 => w2::run(settings).await,
        WorkloadArg::W3 => w3::run(settings).await,
        WorkloadArg::W4 => w4::run(settings).await,
        WorkloadArg::W5 => w5::run(settings).await,
        WorkloadArg::W6 => w6::run(settings).await,
        WorkloadArg::D1 => dashboard::run(settings).await,
        WorkloadArg::V1 => v1::run(settings).await,
        WorkloadArg::S1 => s1::run(settings).await,
        WorkloadArg::R1 => r1::run(settings).await,
        WorkloadArg::All => bail!("`all` is not a single workload"),
    }
}

/// The world configuration for a benchmark: the backend, `settings.workers` workers, and room
/// for `live_runs` runs in the cache so that none is evicted mid-benchmark. A durable backend
/// uses `dir`, or else a fresh directory.
fn config(
    settings: &Settings,
    live_runs: usize,
    dir: Option<std::path::PathBuf>,
) -> anyhow::Result<WorldConfig> {
    let mut config = WorldConfig::memory();
    let persistence = match settings.backend {
        Backend::File => Some(Persistence::File),
        Backend::Hybrid => Some(Persistence::Hybrid),
        _ => None,
    };
    if settings.backend == Backend::Postgres {
        config.persistence = Persistence::Postgres;
        config.database.url = Some(settings.database_url.clone());
        config.database.schema = settings
            .schema
            .clone()
            .context("a postgres benchmark runs in a schema of its own")?;
        // A connection per worker (and a few for the engine's own reads), within reason.
        config.database.pool_size = u32::try_from(settings.workers + 8)
            .unwrap_or(u32::MAX)
            .min(POSTGRES_POOL_MAX);
    } else if let Some(persistence) = persistence {
        config.persistence = persistence;
        config.persistence_path = match dir {
            Some(dir) => dir,
            None => fresh_data_dir()?,
        };
    }
    config.min_workers = settings.workers;
    config.max_workers = config.max_workers.max(settings.workers);
    config.max_cached_runs = config.max_cached_runs.max(live_runs + 64);
    Ok(config)
}

/// An empty directory for one benchmark world's files, under the system's temporary directory.
/// Each workload starts from nothing, so runs of earlier workloads are not reloaded.
fn fresh_data_dir() -> anyhow::Result<std::path::PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("worlds-bench-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    Ok(dir)
}

/// Starts a world with the step activity and the workflows given registered.
async fn start_world(
    settings: &Settings,
    live_runs: usize,
    definitions: Vec<worlds_engine::Definition>,
) -> anyhow::Result<World> {
    let config = config(settings, live_runs, None)?;
    let world = if config.persistence == Persistence::Postgres {
        worlds_postgres::open(config).await
    } else {
        World::new(config)
    }
    .context("could not create the world")?;
    for definition in definitions {
        world.register(definition)?;
    }
    world.start().await?;
    Ok(world)
}

/// Stops a benchmark world and removes its files, if it had any.
async fn stop_world(world: World) -> anyhow::Result<()> {
    world.shutdown().await?;
    // A PostgreSQL world's schema is dropped by `run_workload`.
    if matches!(
        world.config().persistence,
        Persistence::File | Persistence::Hybrid
    ) {
        let dir = world.config().persistence_path.clone();
        drop(world);
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("could not remove {}", dir.display()))?;
    }
    Ok(())
}

/// The contract's step: returns its input + 1.
fn step() -> Activity<u64, u64> {
    activity("step", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n + 1)
    })
}

/// A workflow that runs `step` `k` times in sequence (its input), starting from 0, and returns
/// the last result, which is `k`.
fn chain(name: &str, step: &Activity<u64, u64>) -> Workflow<u64, u64> {
    let step = step.clone();
    workflow(name, move |ctx: WorkflowContext, k: u64| {
        let step = step.clone();
        async move {
            let mut value = 0;
            for _ in 0..k {
                value = ctx.run(&step, value).await?;
            }
            Ok::<_, WorkflowError>(value)
        }
    })
}

/// Checks a workflow's result against the expected one.
fn check(got: u64, expected: u64) -> anyhow::Result<()> {
    if got != expected {
        bail!("a workflow returned {got}, expected {expected}");
    }
    Ok(())
}

/// Milliseconds of a duration, as a float.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Progress goes to stderr so that stdout holds only results.
fn progress(message: &str) {
    eprintln!("worlds bench: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Settings {
        Settings {
            backend: Backend::Memory,
            n: Some(5),
            k: Some(2),
            workers: 2,
            sleep: Duration::from_millis(20),
            database_url: String::new(),
            schema: None,
            members: 1,
            via_http: false,
            days: None,
            sweep_share: None,
        }
    }

    /// R1 at a tiny size: the store stops growing once runs reach the policy's age, and each
    /// day after the first week's sweep removes a day of runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r1_runs_small_and_sweeps_a_day_a_day() {
        let settings = Settings {
            days: Some(12),
            backend: Backend::Hybrid,
            workers: 16,
            ..tiny()
        };
        let report = run_workload(WorkloadArg::R1, &settings).await.unwrap();
        assert_eq!(report.workload, "R1");
        let curve = report.curve.unwrap();
        assert_eq!(curve.len(), 12);
        // Nothing is old enough to go before day 7; from then on a day's runs (5, and the
        // day's sweep) go each day.
        assert!(curve[..6].iter().all(|d| d.removed == 0), "{curve:?}");
        assert!(curve[6..].iter().all(|d| d.removed >= 5), "{curve:?}");
        assert!(curve.iter().all(|d| d.store_bytes > 0), "{curve:?}");
        assert!(curve[11].reopen_s.is_some());
        assert!(report.p99_ms.is_some(), "{:?}", report.notes);
    }

    /// Every workload runs end to end at a tiny size, quickly.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_workload_runs_small() {
        let settings = tiny();
        for (workload, name) in [
            (WorkloadArg::W1, "W1"),
            (WorkloadArg::W2, "W2"),
            (WorkloadArg::W3, "W3"),
        ] {
            let report = run_workload(workload, &settings).await.unwrap();
            assert_eq!(report.workload, name);
            assert_eq!((report.n, report.k), (5, 2), "{name}");
            assert!(report.wall_s > 0.0, "{name}");
            assert!(report.flat.is_none(), "{name}");
            if workload == WorkloadArg::W1 {
                assert!(report.p50_ms.is_none() && report.p99_ms.is_none());
            } else {
                let (p50, p99) = (report.p50_ms.unwrap(), report.p99_ms.unwrap());
                assert!(p50 >= 0.0 && p99 >= p50, "{name}: {p50} {p99}");
            }
            if workload == WorkloadArg::W3 {
                assert!(report.wall_s >= 0.02);
            }
        }
        let w6 = run_workload(
            WorkloadArg::W6,
            &Settings {
                k: Some(30),
                ..tiny()
            },
        )
        .await
        .unwrap();
        assert_eq!((w6.n, w6.k), (1, 30));
        let flat = w6.flat.unwrap();
        assert!(flat.early_ms.unwrap() > 0.0 && flat.late_ms.unwrap() > 0.0);
        assert!(flat.late_over_early.is_some());
    }
}
