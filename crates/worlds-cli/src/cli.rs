//! Command-line syntax: the clap types for every subcommand.

use clap::{Args, Parser, Subcommand, ValueEnum};

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

    /// Workers of the benchmarked world (its `min_workers`).
    #[arg(long, default_value_t = crate::bench::DEFAULT_WORKERS, value_parser = at_least_one)]
    pub(crate) workers: usize,

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
        let Command::Bench(args) = cli.command;
        assert_eq!(args.workload, WorkloadArg::W1);
        assert_eq!(args.backend, Backend::Memory);
        assert_eq!(args.n, Some(5));
        assert!(args.json);
        assert!(Cli::try_parse_from(["worlds", "bench", "--workers", "0"]).is_err());
    }
}
