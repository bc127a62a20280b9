//! The options of `worlds bench`.

use clap::{Args, ValueEnum};
use worlds_engine::DATABASE_URL_ENV;

use super::at_least_one;

/// Options of `worlds bench`.
#[derive(Debug, Clone, Args)]
pub(crate) struct BenchArgs {
    /// Which workload to run.
    #[arg(long, value_enum, default_value_t = WorkloadArg::All)]
    pub(crate) workload: WorkloadArg,

    /// Storage backend of the benchmarked world.
    #[arg(long, value_enum, default_value_t = Backend::Memory)]
    pub(crate) backend: Backend,

    /// Number of workflows (W1, W2, W3). For W6, the number of steps if --k is not given.
    #[arg(long)]
    pub(crate) n: Option<usize>,

    /// Sequential steps per workflow (W1, W2, W3; W6: steps of its single workflow).
    #[arg(long)]
    pub(crate) k: Option<usize>,

    /// Print one JSON object per line (the contract's format) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,

    /// Workers of the benchmarked world (its `min_workers`). Default: 16 on memory; 1024 on file
    /// and hybrid, where a worker waits for its writes to be on disk and more of them in flight
    /// let one fsync cover more writes; 128 on postgres (a pool of workers + 8 connections, at
    /// most 64).
    #[arg(long, value_parser = at_least_one)]
    pub(crate) workers: Option<usize>,

    /// The PostgreSQL server of `--backend postgres`. Each workload gets a fresh schema
    /// (`bench_…`), dropped afterwards.
    #[arg(long, env = DATABASE_URL_ENV, value_name = "URL", hide_env_values = true,
          default_value = DEFAULT_BENCH_DATABASE_URL)]
    pub(crate) database_url: String,

    /// W3's durable sleep in milliseconds (the contract says 2000; smaller values are for tests).
    #[arg(long, hide = true)]
    pub(crate) sleep_ms: Option<u64>,

    /// Drive W1 and W2 through the world's HTTP API (a `worlds-server` on loopback, called
    /// with `worlds-client`, keep-alive) instead of in process.
    #[arg(long, value_enum, default_value_t = ViaArg::Process)]
    pub(crate) via: ViaArg,

    /// W1 on the postgres backend over this many member processes sharing one schema, each
    /// starting its share of the workflows at the same moment.
    #[arg(long, default_value_t = 1, value_parser = at_least_one)]
    pub(crate) members: usize,

    /// Run as one member of a `--members` run, on this schema (started by the first member).
    #[arg(long, hide = true, requires = "start_at")]
    pub(crate) member_of: Option<String>,

    /// R1's simulated days (default 90).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3650))]
    pub(crate) days: Option<u64>,

    /// R1's sweep share: the percent of its time a sweep spends removing (default the
    /// world's, 5).
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(1..=100))]
    pub(crate) sweep_share: Option<u8>,

    /// When a `--members` run starts its workflows (ms since the Unix epoch).
    #[arg(long, hide = true)]
    pub(crate) start_at: Option<i64>,
}

/// How `worlds bench` calls its world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ViaArg {
    /// In process: `world.execute` and `handle.result()`.
    Process,
    /// Over loopback HTTP: the API of `worlds-server`, through `worlds-client`.
    Http,
}

/// The database `worlds bench --backend postgres` uses unless told otherwise: the local server.
pub(crate) const DEFAULT_BENCH_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A workload of the benchmark contract, or all of the implemented ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum WorkloadArg {
    /// Throughput: N concurrent workflows of K sequential steps.
    W1,
    /// Latency: N workflows one after another, K steps each.
    W2,
    /// Timers: N concurrent workflows that sleep 2 s, then run a step.
    W3,
    /// Waiting is cheap: N (100 000) workflows that sleep an hour; peak memory once all wait.
    W4,
    /// Recovery: N workflows of K steps, SIGKILLed halfway, restarted and finished (file or hybrid).
    W5,
    /// Flat per-step cost: one workflow of many sequential steps.
    W6,
    /// The dashboard with a full store: its runs page with N (1 000 000) runs stored, and the
    /// page of a run of K (3 334) steps, about 10 000 events.
    D1,
    /// The deploy check: `verify` over N (10 000) unfinished runs of K (3) steps, with the
    /// code unchanged and with a change that breaks exactly half of them.
    V1,
    /// A world that runs for months: N (2 000) workflows of K (3) steps a simulated day for
    /// --days (90) days of virtual time, completed runs kept 7 days, one sweep a day; the
    /// store's size, memory and reopen time per day, and latency while a sweep runs.
    R1,
    /// The edge of scale (file or hybrid): N (1 000 000) finished runs, closed, opened again in
    /// a fresh process (time, memory per run) and asked for the failed ones.
    S1,
    /// W1, W2, W3, W5 (file and hybrid only) and W6, in that order.
    All,
}

/// Storage backends a benchmark can run on (only those that exist: `--help` lists these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Backend {
    /// In process memory.
    Memory,
    /// JSON files on disk.
    File,
    /// Memory plus a write-ahead log on disk.
    Hybrid,
    /// A PostgreSQL database (--database-url).
    Postgres,
}

impl Backend {
    /// The name used on the command line and in the `storage` field of results.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::File => "file",
            Backend::Hybrid => "hybrid",
            Backend::Postgres => "postgres",
        }
    }
}
