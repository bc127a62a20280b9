//! Command-line syntax: the clap types for every subcommand.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use worlds_engine::RunStatus;

/// The `worlds` command: run, inspect and benchmark worlds-engine.
#[derive(Debug, Parser)]
#[command(name = "worlds", version, about, propagate_version = true)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the benchmark workloads (see the benchmark contract) and print one result per workload.
    Bench(BenchArgs),
    /// Inspect the runs stored in a world's directory (read-only: safe while the world runs).
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Check a world's directory: format, runs by status, torn or corrupt event logs.
    Doctor(DoctorArgs),
}

/// The world directory given by `--dir`, as written by `Persistence::File`.
const DEFAULT_DIR: &str = "./.worlds-engine";

/// The subcommands of `worlds runs`.
#[derive(Debug, Subcommand)]
pub(crate) enum RunsCommand {
    /// List runs, newest first.
    List(ListArgs),
    /// Show one run (by run id or workflow id) and its history.
    Show(ShowArgs),
}

/// Options of `worlds runs list`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ListArgs {
    /// The world's data directory.
    #[arg(long, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// Only runs in this status (repeat for several).
    #[arg(long = "status", value_name = "STATUS")]
    pub(crate) statuses: Vec<RunStatus>,

    /// Only runs of this workflow name.
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,

    /// At most this many runs.
    #[arg(long, default_value_t = 100, value_parser = at_least_one)]
    pub(crate) limit: usize,

    /// Print one JSON object per line (the run state, without history) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds runs show`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ShowArgs {
    /// Run id or workflow id.
    pub(crate) id: String,

    /// The world's data directory.
    #[arg(long, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// Print the run state with its history as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds doctor`.
#[derive(Debug, Clone, Args)]
pub(crate) struct DoctorArgs {
    /// The world's data directory.
    #[arg(long, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,
}

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

    /// Workers of the benchmarked world (its `min_workers`). Default: 4 on memory; 64 on file
    /// and hybrid, where a worker waits for its writes to be on disk and more of them in flight
    /// let one fsync cover more writes.
    #[arg(long, value_parser = at_least_one)]
    pub(crate) workers: Option<usize>,

    /// W3's durable sleep in milliseconds (the contract says 2000; smaller values are for tests).
    #[arg(long, hide = true)]
    pub(crate) sleep_ms: Option<u64>,
}

/// Parses a count that must be at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

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
    /// Flat per-step cost: one workflow of many sequential steps.
    W6,
    /// W1, W2, W3 and W6, in that order.
    All,
}

/// Storage backends a benchmark can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Backend {
    /// In process memory.
    Memory,
    /// JSON files on disk.
    File,
    /// Memory plus a write-ahead log on disk.
    Hybrid,
    /// PostgreSQL.
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_bench_options() {
        let cli = Cli::try_parse_from([
            "worlds",
            "bench",
            "--workload",
            "w1",
            "--backend",
            "memory",
            "--n",
            "5",
            "--json",
        ])
        .unwrap();
        let Command::Bench(args) = cli.command else {
            panic!("not bench: {:?}", cli.command);
        };
        assert_eq!(args.workload, WorkloadArg::W1);
        assert_eq!(args.backend, Backend::Memory);
        assert_eq!(args.n, Some(5));
        assert!(args.json);
        assert!(Cli::try_parse_from(["worlds", "bench", "--workers", "0"]).is_err());
    }

    #[test]
    fn parses_inspection_options() {
        let cli = Cli::try_parse_from([
            "worlds", "runs", "list", "--status", "failed", "--status", "running", "--name", "n",
        ])
        .unwrap();
        let Command::Runs(RunsCommand::List(args)) = cli.command else {
            panic!("not runs list: {:?}", cli.command);
        };
        assert_eq!(args.statuses, vec![RunStatus::Failed, RunStatus::Running]);
        assert_eq!(args.name.as_deref(), Some("n"));
        assert_eq!(args.dir, PathBuf::from(DEFAULT_DIR));
        assert_eq!(args.limit, 100);
        assert!(Cli::try_parse_from(["worlds", "runs", "list", "--status", "bogus"]).is_err());

        let cli = Cli::try_parse_from(["worlds", "runs", "show", "wf-1", "--dir", "d", "--json"])
            .unwrap();
        let Command::Runs(RunsCommand::Show(args)) = cli.command else {
            panic!("not runs show: {:?}", cli.command);
        };
        assert_eq!((args.id.as_str(), args.json), ("wf-1", true));
        assert_eq!(args.dir, PathBuf::from("d"));

        let cli = Cli::try_parse_from(["worlds", "doctor"]).unwrap();
        assert!(matches!(cli.command, Command::Doctor(_)));
    }
}
