//! `worlds`: the command-line tool for worlds-engine.
//!
//! Subcommands live in their own modules; [`run`] dispatches to them. Results (data) go to
//! stdout, progress and diagnostics to stderr. Under `--json` an error is one JSON object on
//! stderr, `{"error": {"message": "…"}}`, and the exit status is non-zero.

mod bench;
mod cancel;
mod cli;
mod dev;
mod escape;
mod hooks;
mod inspect;
mod keys;
mod logs;
mod pauses;
mod prune;
mod reopen;
mod schedules;
mod serve;
mod show;
mod signals;
mod simulate;
mod target;
mod text;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use worlds_engine::model::ReopenRequest;

use crate::cli::{
    Cli, Command, DbCommand, HooksCommand, KeysCommand, RunsCommand, SchedulesCommand,
};
use crate::target::ScheduleAction;

/// Turns transparent huge pages off for this process. mimalloc asks the kernel for them on its
/// arenas, and the first touch of each 2 MiB page then zeroes all of it inside one page fault:
/// a pause of a fraction of a millisecond in whichever worker allocates, which lands in the
/// latency tails (most after an idle spell, when freed memory has been returned and is touched
/// anew), and several times the kernel time of small pages. Measured in docs/BENCHMARKS.md
/// ("Huge pages"). Where the call is refused (an old kernel, a sandbox), the process runs as
/// before, silently: it changes speed, never behaviour.
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

// The engine allocates many small, short-lived values per step (events, ids, tasks); mimalloc
// serves those markedly faster than the system allocator (see docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    no_huge_pages();
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches).map(|cli| (cli, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => return usage_error(&error),
    };
    let json = cli.json();
    match target::one_world(&matches).and_then(|()| run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let message = format!("{error:#}");
            if json {
                // A script asked for JSON: the error is JSON too, on stderr like every error,
                // so stdout holds only data.
                eprintln!("{}", json_error(&message));
            } else {
                eprintln!("error: {}", escape::escaped_lines(&message));
            }
            ExitCode::FAILURE
        }
    }
}

/// `{"error": {"message": …}}`: how an error is reported under `--json`.
fn json_error(message: &str) -> serde_json::Value {
    serde_json::json!({ "error": { "message": message } })
}

/// Reports a command line clap refused: as JSON when `--json` was among the arguments, as clap
/// prints it otherwise (help and version requests included).
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let informational = matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if informational || !std::env::args_os().any(|a| a == "--json") {
        error.exit();
    }
    let rendered = error.render().to_string();
    let message = rendered
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ");
    eprintln!("{}", json_error(message));
    ExitCode::from(2)
}

/// Runs the chosen subcommand.
fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Bench(args) => bench::run(&args),
        Command::Runs(RunsCommand::List(args)) => inspect::list(&args, &mut std::io::stdout()),
        Command::Pause(args) => pauses::pause(&args, &mut std::io::stdout()),
        Command::Resume(args) => pauses::resume(&args, &mut std::io::stdout()),
        Command::Pauses(args) => pauses::list(&args, &mut std::io::stdout()),
        Command::Runs(RunsCommand::Show(args)) => show::show(&args, &mut std::io::stdout()),
        Command::Runs(RunsCommand::Cancel(args)) => cancel::cancel(&args, &mut std::io::stdout()),
        Command::Runs(RunsCommand::Retry(args)) => {
            reopen::reopen(&args, ReopenRequest::retry(), &mut std::io::stdout())
        }
        Command::Runs(RunsCommand::Resume(args)) => {
            reopen::reopen(&args, ReopenRequest::resume(), &mut std::io::stdout())
        }
        Command::Runs(RunsCommand::Bulk(args)) => reopen::bulk(&args, &mut std::io::stdout()),
        Command::Runs(RunsCommand::Prune(args)) => prune::prune(&args, &mut std::io::stdout()),
        Command::Runs(RunsCommand::Import(args)) => prune::import(&args, &mut std::io::stdout()),
        Command::Runs(RunsCommand::Reset(args)) => reopen::reopen(
            &args.reopen,
            ReopenRequest::reset(args.position),
            &mut std::io::stdout(),
        ),
        Command::Schedules(SchedulesCommand::List(args)) => {
            schedules::list(&args, &mut std::io::stdout())
        }
        Command::Schedules(SchedulesCommand::Pause(args)) => {
            schedules::change(&args, ScheduleAction::Pause, &mut std::io::stdout())
        }
        Command::Schedules(SchedulesCommand::Resume(args)) => {
            schedules::change(&args, ScheduleAction::Resume, &mut std::io::stdout())
        }
        Command::Schedules(SchedulesCommand::Delete(args)) => {
            schedules::change(&args, ScheduleAction::Delete, &mut std::io::stdout())
        }
        Command::Doctor(args) => inspect::doctor(&args, &mut std::io::stdout()),
        Command::Dev(args) => dev::run(&args),
        Command::Logs(args) => logs::logs(&args, &mut std::io::stdout()),
        Command::Db(DbCommand::Migrate(args)) => {
            target::postgres::migrate(&args.database, &mut std::io::stdout())
        }
        Command::Serve(args) => serve::run(&args),
        Command::Hooks(HooksCommand::Resume(args)) => hooks::resume(&args, &mut std::io::stdout()),
        Command::Keys(KeysCommand::Create(args)) => keys::create(&args, &mut std::io::stdout()),
        Command::Keys(KeysCommand::List(args)) => keys::list(&args, &mut std::io::stdout()),
        Command::Keys(KeysCommand::Revoke(args)) => keys::revoke(&args, &mut std::io::stdout()),
        Command::Simulate(args) => simulate::run(&args, &mut std::io::stdout()),
    }
}
