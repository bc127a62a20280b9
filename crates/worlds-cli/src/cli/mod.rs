//! Command-line syntax: the clap types for every subcommand.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use worlds_engine::{RunStatus, DATA_DIR_ENV};

use crate::target::{DatabaseArgs, LocalArgs, WorldArgs, DEFAULT_DIR};

mod bench;

pub(crate) use bench::{Backend, BenchArgs, ViaArg, WorkloadArg};

/// The `worlds` command: run, inspect and benchmark worlds-engine.
#[derive(Debug, Parser)]
#[command(
    name = "worlds",
    version,
    about,
    propagate_version = true,
    after_help = EXAMPLES
)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

impl Cli {
    /// Whether the command was asked for JSON output (its errors are then JSON too).
    pub(crate) fn json(&self) -> bool {
        match &self.command {
            Command::Bench(args) => args.json,
            Command::Runs(RunsCommand::List(args)) => args.json,
            Command::Runs(RunsCommand::Show(args)) => args.json,
            Command::Runs(RunsCommand::Cancel(args)) => args.json,
            Command::Runs(RunsCommand::Retry(args) | RunsCommand::Resume(args)) => args.json,
            Command::Runs(RunsCommand::Reset(args)) => args.reopen.json,
            Command::Runs(RunsCommand::Bulk(args)) => args.json,
            Command::Runs(RunsCommand::Prune(args)) => args.json,
            Command::Runs(RunsCommand::Import(args)) => args.json,
            Command::Schedules(SchedulesCommand::List(args)) => args.json,
            Command::Schedules(
                SchedulesCommand::Pause(args)
                | SchedulesCommand::Resume(args)
                | SchedulesCommand::Delete(args),
            ) => args.json,
            Command::Pause(args) | Command::Resume(args) => args.json,
            Command::Pauses(args) => args.json,
            Command::Logs(args) => args.json,
            Command::Hooks(HooksCommand::Resume(args)) => args.json,
            Command::Keys(KeysCommand::Create(args)) => args.json,
            Command::Keys(KeysCommand::List(args)) => args.json,
            Command::Keys(KeysCommand::Revoke(args)) => args.json,
            Command::Doctor(_)
            | Command::Dev(_)
            | Command::Db(_)
            | Command::Serve(_)
            | Command::Simulate(_) => false,
        }
    }
}

/// Shown after `worlds --help`: a first session, in the order a new user needs it.
const EXAMPLES: &str = "\
Examples:
  worlds dev                         run the demo workflows on ./.worlds-engine, live
  worlds runs list                   the runs in ./.worlds-engine, newest first
  worlds runs list --status failed --json
  worlds runs show <RUN_OR_WORKFLOW_ID>
                                     one run: what happened, what it waits for
  worlds runs cancel <ID> --reason 'not needed'
  worlds runs prune --keep-completed 7d --keep-failed 30d --dry-run
                                     what a retention sweep would remove, and its size
  worlds logs --level warn --since 1h
  worlds doctor --dir path/to/.worlds-engine

Every command reads ./.worlds-engine unless --dir names another directory, or
--database-url (WORLDS_ENGINE_DATABASE_URL) a PostgreSQL world:
  worlds runs list --database-url postgres://user@host:5432/db [--schema worlds]

With --json, output is JSON for scripts, and so is an error: one object
{\"error\": {\"message\": ...}} on stderr, with a non-zero exit status.";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the bundled demo workflows on a durable world and show their progress live.
    ///
    /// Opens a world on the directory (hybrid storage by default), registers the demo workflows
    /// (the quickstart's checkout and the order saga, whose shipment fails and whose
    /// compensations undo the rest), and starts new runs of them, taking turns. While they run,
    /// it shows runs by status and progress per workflow (plain lines when stderr is not a
    /// terminal). When every run has finished it prints a summary and exits 0.
    ///
    /// Ctrl-C stops gracefully: no new runs are started, the steps in progress finish, and the
    /// runs still in flight stay in the directory. It then says how many there are and exits 0
    /// (a second Ctrl-C stops at once, exit 1; the runs are safe either way).
    ///
    /// Started on a directory that holds unfinished runs, `worlds dev` resumes them and, unless
    /// `--runs` is given, starts no new ones.
    Dev(DevArgs),
    /// List, show or cancel the runs stored in a world's directory or PostgreSQL database (list
    /// and show only read, so they are safe while the world runs).
    #[command(subcommand)]
    Runs(RunsCommand),
    /// List, pause, resume or delete the schedules in a world's directory or database.
    #[command(subcommand)]
    Schedules(SchedulesCommand),
    /// Pause a workflow or a task queue: its runs not started yet stay pending and its steps
    /// not started yet stay queued until `worlds resume`; started runs and running steps go
    /// on. Works while the world runs (it reads pauses within 2 s), on a directory, a
    /// database or a server (an admin key).
    Pause(PauseArgs),
    /// Lift the pause on a workflow or a task queue: what it held starts.
    Resume(PauseArgs),
    /// List the workflows and task queues paused, with who paused them, why and since when.
    Pauses(PausesArgs),
    /// Check a world's directory (format, runs by status, torn or corrupt event logs) or
    /// PostgreSQL database (connection, schema version, members, runs, takeovers, timers due).
    Doctor(DoctorArgs),
    /// Show a world's log entries, oldest first (read-only: safe while the world runs).
    ///
    /// Reads the day files a world writes to logs/ in its data directory (or --log-dir).
    Logs(LogsArgs),
    /// Run the benchmark workloads (see the benchmark contract) and print one result per workload.
    Bench(BenchArgs),
    /// Manage a PostgreSQL world's schema.
    #[command(subcommand)]
    Db(DbCommand),
    /// Serve a world's HTTP API (with the demo workflows registered), authenticated by its API
    /// keys.
    ///
    /// Opens the world like `worlds dev` does (hybrid storage in --dir by default; file,
    /// memory or PostgreSQL with --persistence) and serves the routes of `worlds-server` on
    /// --addr until Ctrl-C. It never serves without a key: when the world has no usable key it
    /// creates an admin key and prints it once. Binding to an address other than this machine's
    /// prints a warning: the server speaks plain HTTP, so put a TLS proxy in front of it.
    Serve(ServeArgs),
    /// Resume a waiting hook with a payload.
    #[command(subcommand)]
    Hooks(HooksCommand),
    /// Create, list or revoke the API keys of a world's HTTP API (kept in its directory or
    /// database as digests; a key is shown once, when it is created).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Run the bundled demo workflows under the deterministic simulation (a soak).
    ///
    /// For each seed, the demo's runs are made again on virtual time while the process crashes
    /// and restarts, the store fails writes, workers stop heartbeating and the clock jumps;
    /// every run must finish as it does without faults, no recorded step may run again and
    /// every compensation must run once. Prints the schedules run, the crashes and the writes;
    /// on a broken promise, the seed that reproduces it and what broke (exit 1).
    Simulate(SimulateArgs),
}

/// Options of `worlds simulate`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SimulateArgs {
    /// How many seeds (schedules) to run.
    #[arg(long, default_value_t = 1000)]
    pub(crate) seeds: u64,

    /// The first seed; seeds run from it upwards.
    #[arg(long, default_value_t = 0)]
    pub(crate) from: u64,

    /// How many demo runs each schedule makes (the workflows take turns).
    #[arg(long, default_value_t = 4)]
    pub(crate) runs: usize,
}

/// Options of `worlds serve`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    /// Where to listen (host:port; port 0 lets the system choose, and the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) addr: String,

    /// Requests per second each key may make on average (bursts up to twice that); beyond,
    /// 429 with Retry-After. Default: no limit.
    #[arg(long, value_name = "N")]
    pub(crate) rate_limit: Option<std::num::NonZeroU32>,

    /// The secret this server signs Workflow DevKit queue deliveries with (Standard Webhooks,
    /// `whsec_…`); the app's World checks them with the same secret. Without it the server
    /// takes no DevKit queue messages. With it the server keeps at least 8 workers (up to
    /// 64), since each delivery holds one while the app handles it, and idempotency keys
    /// find their run for 24 hours (a message queued again after a crash stays one).
    #[arg(
        long,
        env = "WORLDS_DELIVERY_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub(crate) delivery_secret: Option<String>,

    /// An origin the DevKit queue may deliver to (`http://localhost:3000`, which stands for
    /// that port under every loopback name; `https://app.example.com`; or `loopback` for every
    /// port of this machine); repeat for more, or give a comma-separated list. None by default:
    /// a `callbackUrl` not allowed is refused.
    #[arg(
        long = "devkit-callback-origin",
        env = "WORLDS_DEVKIT_CALLBACK_ORIGINS",
        value_delimiter = ',',
        value_name = "ORIGIN"
    )]
    pub(crate) devkit_callback_origins: Vec<String>,

    /// The world's data directory (file and hybrid storage).
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// Where the world keeps its state. Default: PostgreSQL when a database URL is given
    /// (--database-url or WORLDS_ENGINE_DATABASE_URL), hybrid storage in --dir otherwise.
    #[arg(long, value_enum)]
    pub(crate) persistence: Option<PersistenceArg>,

    /// The database of `--persistence postgres`.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// How long finished runs are kept; the world sweeps the rest away every
    /// --sweep-interval. Default: every run kept for ever.
    #[command(flatten)]
    pub(crate) retention: RetentionArgs,

    /// How often the world sweeps while a --keep-… removes anything.
    #[arg(long, value_name = "DURATION", default_value = "1h")]
    pub(crate) sweep_interval: worlds_engine::duration::Dur,

    /// The share of its time, in percent, a sweep spends removing runs while it keeps up: it
    /// rests the rest, leaving the store to the runs the world serves. A sweep far behind
    /// takes more, up to all. 100 removes without rest.
    #[arg(
        long,
        value_name = "PERCENT",
        default_value_t = worlds_engine::RetentionConfig::default().sweep_share,
        value_parser = clap::value_parser!(u8).range(1..=100)
    )]
    pub(crate) sweep_share: u8,

    /// Log day files kept (in the data directory, or rows of as many days in the database):
    /// older ones go as a new day starts. Default: all kept.
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) keep_logs: Option<u64>,
}

/// `worlds hooks …`.
#[derive(Debug, Subcommand)]
pub(crate) enum HooksCommand {
    /// Deliver a payload to the hook waiting with TOKEN; its run goes on. A payload that does
    /// not have the hook's type is refused and the hook keeps waiting.
    Resume(HookResumeArgs),
}

/// Options of `worlds hooks resume`.
#[derive(Debug, Clone, Args)]
pub(crate) struct HookResumeArgs {
    /// The hook's token (what the workflow handed out).
    pub(crate) token: String,

    /// The payload, as JSON (default `null`).
    #[arg(long, value_name = "JSON", default_value = "null")]
    pub(crate) data: String,

    /// The world: its directory, database or API.
    #[command(flatten)]
    pub(crate) world: WorldArgs,

    /// Print the outcome as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `worlds keys …`.
#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Create a key and print it once: it is not kept anywhere, only its digest is.
    ///
    /// Works while a world (and its API server) runs on the directory or database, in any
    /// mode: servers see a new key at once.
    Create(KeysCreateArgs),
    /// List the keys: id, name, scope, when created, when they expire, whether revoked.
    List(KeysListArgs),
    /// Revoke a key by its id: servers refuse it within a second.
    Revoke(KeyIdArgs),
}

/// Options of `worlds keys create`.
#[derive(Debug, Clone, Args)]
pub(crate) struct KeysCreateArgs {
    /// What the key may do: read (GET routes), write (also start, cancel, resume), admin
    /// (also keys, schedules).
    #[arg(long, value_name = "SCOPE")]
    pub(crate) scope: worlds_server::auth::Scope,

    /// A name for people: what the key is for.
    #[arg(long, default_value = "")]
    pub(crate) name: String,

    /// Refuse the key after this long (e.g. 90d, 12h). Without it the key lasts until revoked.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(crate) expires_in: Option<std::time::Duration>,

    /// The world: its directory or database.
    #[command(flatten)]
    pub(crate) world: LocalArgs,

    /// Print one JSON object (the key and its record) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds keys list`.
#[derive(Debug, Clone, Args)]
pub(crate) struct KeysListArgs {
    /// The world: its directory or database.
    #[command(flatten)]
    pub(crate) world: LocalArgs,

    /// Print one JSON object per line (the kept record) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds keys revoke`.
#[derive(Debug, Clone, Args)]
pub(crate) struct KeyIdArgs {
    /// The key's id (the 8 characters after `wek_`, as `worlds keys list` shows).
    pub(crate) id: String,

    /// The world: its directory or database.
    #[command(flatten)]
    pub(crate) world: LocalArgs,

    /// Print the revoked record as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The subcommands of `worlds runs`.
#[derive(Debug, Subcommand)]
pub(crate) enum RunsCommand {
    /// List runs, newest first.
    List(ListArgs),
    /// Show one run (by run id or workflow id) and its history.
    Show(ShowArgs),
    /// Cancel a run (by run id or workflow id) and its unfinished children.
    ///
    /// Works with or without a world running on the directory in file mode: the world driving
    /// the run stops its steps within its poll interval. A directory held by a running hybrid
    /// world cannot be written from outside; cancel from that program instead.
    Cancel(CancelArgs),
    /// Run a failed or quarantined run's failed part again: every step result recorded before
    /// the last failure is kept and not run again.
    ///
    /// Recorded in the run's history with --by and --reason. Against --dir or --database-url
    /// the workflow code is not at hand here, so the process that drives the run replays it
    /// first (and quarantines it again if its code still diverges); through --server, or
    /// `World::reopen` in the program, the replay is checked before anything is recorded.
    Retry(ReopenArgs),
    /// Run a failed or quarantined run again from a command position of its failed attempt
    /// (`worlds runs show` lists them), keeping what came before.
    Reset(ResetArgs),
    /// Let a quarantined run go on from where it stopped, once its code was fixed (check with
    /// `verify` in the program first).
    Resume(ReopenArgs),
    /// Cancel, retry or resume every run a filter matches, as one durable operation.
    ///
    /// The operation is itself a run: it survives crashes, acts on each run once however
    /// often it is interrupted, and leaves out runs created after it. Submitting again under
    /// the same --operation name follows the first one. Against --dir the command drives it
    /// here; against --database-url the running members drive it; through --server the
    /// serving world does.
    Bulk(BulkArgs),
    /// Remove the finished runs a retention policy lets go, with everything of theirs
    /// (history, steps, hooks, streams, keys); --dry-run says what would go and the space it
    /// takes. Through --server the serving world's policy applies (set with `worlds serve
    /// --keep-…`); against --dir or --database-url give the policy with --keep-… . The sweep is
    /// a durable run: interrupted, it goes on where it stopped and removes each run once.
    Prune(PruneArgs),
    /// Write runs from a retention archive back into a world, for an investigation: each
    /// from its own history, ids and times kept (a run already there is left as it is).
    Import(ImportArgs),
}

/// Options of `worlds runs import`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ImportArgs {
    /// The archive file (`runs-YYYY-MM-DD.ndjson.gz`); sealed runs open with
    /// WORLDS_ENGINE_ENCRYPTION_KEYS.
    #[arg(long, value_name = "FILE")]
    pub(crate) archive: PathBuf,

    /// Only this run (run id or workflow id); repeat for more. Default: every run in the file.
    #[arg(long = "run", value_name = "ID")]
    pub(crate) runs: Vec<String>,

    /// Print what was done as JSON.
    #[arg(long)]
    pub(crate) json: bool,

    /// The world to write them into: its directory or database.
    #[command(flatten)]
    pub(crate) world: WorldArgs,
}

/// How long finished runs are kept, by final status (`worlds serve`, `worlds runs prune`).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct RetentionArgs {
    /// Keep completed runs this long after they end (`7d`, `12h`); 0s keeps them for ever.
    #[arg(long, value_name = "DURATION")]
    pub(crate) keep_completed: Option<worlds_engine::duration::Dur>,

    /// Keep failed runs (compensated ones included) this long after they end; 0s: for ever.
    #[arg(long, value_name = "DURATION")]
    pub(crate) keep_failed: Option<worlds_engine::duration::Dur>,

    /// Keep cancelled runs this long after they end; 0s: for ever.
    #[arg(long, value_name = "DURATION")]
    pub(crate) keep_cancelled: Option<worlds_engine::duration::Dur>,

    /// Keep quarantined runs this long after they end; 0s: for ever.
    #[arg(long, value_name = "DURATION")]
    pub(crate) keep_quarantined: Option<worlds_engine::duration::Dur>,

    /// Write each run a sweep removes, with its history, to a file in this directory first
    /// (`runs-YYYY-MM-DD.ndjson.gz`, sealed when the world has encryption keys), readable with
    /// `worlds runs show --archive FILE` and `worlds runs import`.
    #[arg(long, value_name = "DIR")]
    pub(crate) archive_dir: Option<PathBuf>,
}

impl RetentionArgs {
    /// True if any --keep-… was given.
    pub(crate) fn is_given(&self) -> bool {
        self.keep_completed.is_some()
            || self.keep_failed.is_some()
            || self.keep_cancelled.is_some()
            || self.keep_quarantined.is_some()
    }

    /// `policy` with the durations given here (the rest left as they are).
    pub(crate) fn apply(&self, policy: &mut worlds_engine::RetentionConfig) {
        let fields = [
            (self.keep_completed, &mut policy.completed),
            (self.keep_failed, &mut policy.failed),
            (self.keep_cancelled, &mut policy.cancelled),
            (self.keep_quarantined, &mut policy.quarantined),
        ];
        for (given, field) in fields {
            if let Some(given) = given {
                *field = given;
            }
        }
        if let Some(dir) = &self.archive_dir {
            policy.archive_dir = Some(dir.clone());
        }
    }
}

/// Options of `worlds runs prune`.
#[derive(Debug, Clone, Args)]
pub(crate) struct PruneArgs {
    /// Only say what would be removed and the space it takes; remove nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,

    /// The policy to judge by (against --dir or --database-url).
    #[command(flatten)]
    pub(crate) policy: RetentionArgs,

    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,

    /// The world: its directory, database or API.
    #[command(flatten)]
    pub(crate) world: WorldArgs,
}

/// What `worlds runs bulk` does to each run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BulkActionArg {
    /// Cancel it (finished runs are skipped).
    Cancel,
    /// Retry a failed run from its failed part.
    Retry,
    /// Resume a quarantined run.
    Resume,
}

/// Options of `worlds runs bulk`.
#[derive(Debug, Clone, Args)]
pub(crate) struct BulkArgs {
    /// What to do to each run.
    #[arg(value_enum)]
    pub(crate) action: BulkActionArg,

    /// Only runs in this status (repeat for several).
    #[arg(long = "status", value_name = "STATUS")]
    pub(crate) statuses: Vec<RunStatus>,

    /// Only runs of this workflow name.
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,

    /// Only runs whose workflow id starts with this.
    #[arg(long, value_name = "PREFIX")]
    pub(crate) workflow_id_prefix: Option<String>,

    /// Only runs accepted by a world of this code version.
    #[arg(long, value_name = "VERSION")]
    pub(crate) code_version: Option<String>,

    /// Only quarantined runs.
    #[arg(long)]
    pub(crate) quarantined: bool,

    /// A name for the operation: running the command again under it follows the first
    /// operation instead of starting another.
    #[arg(long, value_name = "NAME")]
    pub(crate) operation: Option<String>,

    /// Why, recorded on each run acted on.
    #[arg(long)]
    pub(crate) reason: Option<String>,

    /// Who asks (default: $USER). Through --server the server records the API key.
    #[arg(long)]
    pub(crate) by: Option<String>,

    /// The world: its directory, database or API.
    #[command(flatten)]
    pub(crate) world: WorldArgs,

    /// Print the final progress as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds runs retry` and `worlds runs resume`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ReopenArgs {
    /// Run id or workflow id.
    pub(crate) id: String,

    /// The world: its directory, database or API.
    #[command(flatten)]
    pub(crate) world: WorldArgs,

    /// Why, recorded in the `run_reopened` event.
    #[arg(long)]
    pub(crate) reason: Option<String>,

    /// Who asks, recorded in the `run_reopened` event (default: $USER). Through --server
    /// the server records the API key instead.
    #[arg(long)]
    pub(crate) by: Option<String>,

    /// Print the outcome as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds runs reset`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ResetArgs {
    /// The first command position to run again (#N in `worlds runs show`).
    #[arg(long)]
    pub(crate) position: u32,

    /// The run and where it lives.
    #[command(flatten)]
    pub(crate) reopen: ReopenArgs,
}

/// Options of `worlds runs cancel`.
#[derive(Debug, Clone, Args)]
pub(crate) struct CancelArgs {
    /// Run id or workflow id.
    pub(crate) id: String,

    /// The world: its directory, database or API.
    #[command(flatten)]
    pub(crate) world: WorldArgs,

    /// Why, recorded in the `workflow_cancelled` event.
    #[arg(long)]
    pub(crate) reason: Option<String>,

    /// Print the outcome as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds runs list`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ListArgs {
    /// The world: its directory, database or API.
    #[command(flatten)]
    pub(crate) world: WorldArgs,

    /// Only runs in this status (repeat for several).
    #[arg(long = "status", value_name = "STATUS")]
    pub(crate) statuses: Vec<RunStatus>,

    /// Only runs of this workflow name.
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,

    /// Only runs accepted by a world of this code version (`WorldConfig::code_version`).
    #[arg(long, value_name = "VERSION")]
    pub(crate) code_version: Option<String>,

    /// At most this many runs.
    #[arg(long, default_value_t = 100, value_parser = at_least_one)]
    pub(crate) limit: usize,

    /// Oldest runs first (newest first without it).
    #[arg(long)]
    pub(crate) oldest_first: bool,

    /// Print one JSON object per line (the run state, without history) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds runs show`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ShowArgs {
    /// Run id or workflow id (with --archive: leave it out to list the archive's runs).
    #[arg(required_unless_present = "archive")]
    pub(crate) id: Option<String>,

    /// Read the run from a retention archive file (`runs-YYYY-MM-DD.ndjson.gz`) instead of a
    /// world; sealed runs open with WORLDS_ENGINE_ENCRYPTION_KEYS.
    #[arg(long, value_name = "FILE")]
    pub(crate) archive: Option<PathBuf>,

    /// The world: its directory, database or API.
    #[command(flatten)]
    pub(crate) world: WorldArgs,

    /// Print the run state with its history as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The subcommands of `worlds db`.
#[derive(Debug, Subcommand)]
pub(crate) enum DbCommand {
    /// Create the world's schema or bring it to this build's version, without joining the
    /// world (for a deploy step ahead of the programs; a world also migrates when it opens).
    ///
    /// Safe while members run: migrations take a lock of their own, and a schema of a newer
    /// build is refused, naming both versions.
    Migrate(DbMigrateArgs),
}

/// Options of `worlds db migrate`.
#[derive(Debug, Clone, Args)]
pub(crate) struct DbMigrateArgs {
    /// The world's database.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,
}

/// The subcommands of `worlds schedules`.
#[derive(Debug, Subcommand)]
pub(crate) enum SchedulesCommand {
    /// List the schedules, by id (read-only: safe while a world runs).
    List(SchedulesListArgs),
    /// Pause a schedule: it starts no run until resumed.
    ///
    /// Like the other changes, works with or without a world running on the directory in file
    /// mode (a running world sees the change within its poll interval). A directory held by a
    /// running hybrid world cannot be written from outside; change it from that program.
    Pause(ScheduleIdArgs),
    /// Resume a paused schedule from its next time after now (missed times are not made up).
    Resume(ScheduleIdArgs),
    /// Delete a schedule; the runs it started are kept.
    Delete(ScheduleIdArgs),
}

/// What `worlds pause` and `worlds resume` act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PauseKind {
    /// A workflow, by its registered name.
    Workflow,
    /// A task queue, by name.
    #[value(name = "queue", alias = "task_queue", alias = "task-queue")]
    Queue,
}

/// Options of `worlds pause` and `worlds resume`.
#[derive(Debug, Clone, Args)]
pub(crate) struct PauseArgs {
    /// `workflow` or `queue`.
    pub(crate) kind: PauseKind,

    /// The workflow's or the task queue's name.
    pub(crate) name: String,

    /// Why (`worlds pause`): shown wherever a run waits on the pause.
    #[arg(long, default_value = "")]
    pub(crate) reason: String,

    /// Who pauses (`worlds pause` on a directory or database; a server records its API key):
    /// default `cli:` and the user's name.
    #[arg(long)]
    pub(crate) by: Option<String>,

    /// The world: its directory, database or API.
    #[command(flatten)]
    pub(crate) world: WorldArgs,

    /// Print the pause as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds pauses`.
#[derive(Debug, Clone, Args)]
pub(crate) struct PausesArgs {
    /// The world: its directory, database or API.
    #[command(flatten)]
    pub(crate) world: WorldArgs,

    /// Print one JSON object per line (the pause) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds schedules list`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SchedulesListArgs {
    /// The world: its directory, database or API.
    #[command(flatten)]
    pub(crate) world: WorldArgs,

    /// Print one JSON object per line (the stored schedule) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds schedules pause|resume|delete`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ScheduleIdArgs {
    /// The schedule's id.
    pub(crate) id: String,

    /// The world: its directory, database or API.
    #[command(flatten)]
    pub(crate) world: WorldArgs,

    /// Print the outcome as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds doctor`.
#[derive(Debug, Clone, Args)]
pub(crate) struct DoctorArgs {
    /// The world: its directory or database.
    #[command(flatten)]
    pub(crate) world: LocalArgs,

    /// The world's lease (its `lease_duration` setting, e.g. 10s), with --database-url: members
    /// that recorded no lease of their own are judged dead by it, and timers due for longer
    /// are late. The database does not record it. Default: the engine's, 30s.
    #[arg(long, value_name = "DURATION", value_parser = worlds_engine::duration::parse_duration)]
    pub(crate) lease_duration: Option<std::time::Duration>,
}

/// Options of `worlds dev`.
#[derive(Debug, Clone, Args)]
pub(crate) struct DevArgs {
    /// The world's data directory (file and hybrid storage).
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// New runs to start. Default: 20, or none if the directory holds runs in flight (those are
    /// resumed either way).
    #[arg(long, value_name = "N")]
    pub(crate) runs: Option<usize>,

    /// Where the world keeps its state. Default: PostgreSQL when a database URL is given
    /// (--database-url or WORLDS_ENGINE_DATABASE_URL), hybrid storage in --dir otherwise.
    #[arg(long, value_enum)]
    pub(crate) persistence: Option<PersistenceArg>,

    /// The database of `--persistence postgres`.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// Divide every demo duration (pauses, step times, the gap between starts) by this factor.
    #[arg(long, hide = true, default_value_t = 1.0, value_parser = positive_factor)]
    pub(crate) speed: f64,

    /// Where to serve the dashboard (and the API), or `off`. If the port is taken, another
    /// free one is used. In a terminal the dashboard stays up after the runs finish, until
    /// Ctrl-C.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub(crate) dashboard: String,
}

/// Storage a `worlds dev` world can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PersistenceArg {
    /// Memory for reads, a write-ahead log on disk for durability.
    Hybrid,
    /// One fsynced event log per run on disk.
    File,
    /// In process memory only: nothing survives the process.
    Memory,
    /// A PostgreSQL database (--database-url or WORLDS_ENGINE_DATABASE_URL), shared by every
    /// process of the world.
    Postgres,
}

impl PersistenceArg {
    /// The storage `--persistence` chose, or by default PostgreSQL when a URL was given and
    /// hybrid storage otherwise.
    fn or_default(chosen: Option<PersistenceArg>, database: &DatabaseArgs) -> PersistenceArg {
        chosen.unwrap_or(match database.url() {
            Some(_) => PersistenceArg::Postgres,
            None => PersistenceArg::Hybrid,
        })
    }
}

impl DevArgs {
    /// The storage of the session's world.
    pub(crate) fn persistence(&self) -> PersistenceArg {
        PersistenceArg::or_default(self.persistence, &self.database)
    }
}

impl ServeArgs {
    /// The storage of the served world.
    pub(crate) fn persistence(&self) -> PersistenceArg {
        PersistenceArg::or_default(self.persistence, &self.database)
    }
}

impl From<PersistenceArg> for worlds_engine::Persistence {
    fn from(arg: PersistenceArg) -> Self {
        match arg {
            PersistenceArg::Hybrid => worlds_engine::Persistence::Hybrid,
            PersistenceArg::File => worlds_engine::Persistence::File,
            PersistenceArg::Memory => worlds_engine::Persistence::Memory,
            PersistenceArg::Postgres => worlds_engine::Persistence::Postgres,
        }
    }
}

/// Parses a finite factor above zero.
fn positive_factor(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(_) => Err("must be a number above 0".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// Parses a count that must be at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Options of `worlds logs`.
#[derive(Debug, Clone, Args)]
#[command(mut_arg("dir", |dir| dir.help("The world's data directory; its log files are in its logs/ folder")))]
pub(crate) struct LogsArgs {
    /// The world: its directory, or its database (the entries every member wrote).
    #[command(flatten)]
    pub(crate) world: LocalArgs,

    /// Read the log files in this directory instead (a memory world's configured log folder).
    #[arg(long, value_name = "DIR")]
    pub(crate) log_dir: Option<PathBuf>,

    /// Only entries of this category: world, worker, workflow, activity or system.
    #[arg(long, value_name = "CATEGORY")]
    pub(crate) category: Option<worlds_engine::telemetry::logs::LogCategory>,

    /// Only entries at this level or more severe: debug, info, warn or error.
    #[arg(long, value_name = "LEVEL")]
    pub(crate) level: Option<worlds_engine::telemetry::logs::LogLevel>,

    /// Only entries since this long ago (1h, 30m, 2d) or this time (2026-01-31T08:00:00Z).
    #[arg(long, value_name = "WHEN", value_parser = crate::text::parse_since)]
    pub(crate) since: Option<crate::text::Since>,

    /// At most this many entries, the most recent.
    #[arg(long, default_value_t = 100, value_parser = at_least_one)]
    pub(crate) limit: usize,

    /// Print the entries as they are stored, one JSON object per line.
    #[arg(long)]
    pub(crate) json: bool,
}

#[cfg(test)]
mod tests;
