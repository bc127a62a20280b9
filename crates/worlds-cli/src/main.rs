//! `worlds`: the command-line tool for worlds-engine.
//!
//! Subcommands live in their own modules; [`run`] dispatches to them. Results (data) go to
//! stdout, progress and diagnostics to stderr.

mod bench;
mod cancel;
mod cli;
mod dev;
mod escape;
mod inspect;
mod logs;
mod schedules;
mod show;
mod writer;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, RunsCommand, SchedulesCommand};

// The engine allocates many small, short-lived values per step (events, ids, tasks); mimalloc
// serves those markedly faster than the system allocator (see docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", escape::escaped_lines(&format!("{error:#}")));
            ExitCode::FAILURE
        }
    }
}

/// Parses the command line and runs the chosen subcommand.
fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => bench::run(&args),
        Command::Runs(RunsCommand::List(args)) => inspect::list(&args, &mut std::io::stdout()),
        Command::Runs(RunsCommand::Show(args)) => show::show(&args, &mut std::io::stdout()),
        Command::Runs(RunsCommand::Cancel(args)) => cancel::cancel(&args, &mut std::io::stdout()),
        Command::Schedules(SchedulesCommand::List(args)) => {
            schedules::list(&args, &mut std::io::stdout())
        }
        Command::Schedules(SchedulesCommand::Pause(args)) => {
            schedules::change(&args, schedules::Action::Pause, &mut std::io::stdout())
        }
        Command::Schedules(SchedulesCommand::Resume(args)) => {
            schedules::change(&args, schedules::Action::Resume, &mut std::io::stdout())
        }
        Command::Schedules(SchedulesCommand::Delete(args)) => {
            schedules::change(&args, schedules::Action::Delete, &mut std::io::stdout())
        }
        Command::Doctor(args) => inspect::doctor(&args, &mut std::io::stdout()),
        Command::Dev(args) => dev::run(&args),
        Command::Logs(args) => logs::logs(&args, &mut std::io::stdout()),
    }
}
