//! Command-line syntax: the clap types for every subcommand.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use worlds_engine::{RunStatus, DATABASE_URL_ENV, DATA_DIR_ENV};

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
            Command::Schedules(SchedulesCommand::List(args)) => args.json,
            Command::Schedules(
                SchedulesCommand::Pause(args)
                | SchedulesCommand::Resume(args)
                | SchedulesCommand::Delete(args),
            ) => args.json,
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

    /// An origin (`https://app.example.com`) the DevKit queue may deliver to, besides this
    /// machine (`localhost`, `127.0.0.1`, `[::1]`), which it always may; repeat for more, or give a
    /// comma-separated list. A `callbackUrl` elsewhere is refused.
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

    /// The world's data directory.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// A running world's API instead of the directory or database.
    #[command(flatten)]
    pub(crate) remote: ServerArgs,

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

    /// The world's data directory.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// Print one JSON object (the key and its record) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds keys list`.
#[derive(Debug, Clone, Args)]
pub(crate) struct KeysListArgs {
    /// The world's data directory.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// Print one JSON object per line (the kept record) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds keys revoke`.
#[derive(Debug, Clone, Args)]
pub(crate) struct KeyIdArgs {
    /// The key's id (the 8 characters after `wek_`, as `worlds keys list` shows).
    pub(crate) id: String,

    /// The world's data directory.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// Print the revoked record as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// A running world's HTTP API (`worlds serve`, or a program serving `worlds-server`): with
/// `--server` the command calls it instead of opening the directory or the database, so it
/// works while a hybrid world owns its directory.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct ServerArgs {
    /// Call the world's API at this URL (http://host:port) instead of opening --dir.
    #[arg(long, env = "WORLDS_SERVER_URL", value_name = "URL")]
    pub(crate) server: Option<String>,

    /// The API key for --server.
    #[arg(
        long,
        env = "WORLDS_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub(crate) api_key: Option<String>,
}

/// Where a world on PostgreSQL lives: `--database-url` (or `WORLDS_ENGINE_DATABASE_URL`) and
/// `--schema`. With a URL the command works on that database instead of `--dir`.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct DatabaseArgs {
    /// Work on the PostgreSQL world at this URL (postgres://user:password@host:5432/db) instead
    /// of a directory. Giving --dir as well is an error.
    #[arg(long, env = DATABASE_URL_ENV, value_name = "URL", hide_env_values = true)]
    pub(crate) database_url: Option<String>,

    /// The PostgreSQL schema holding the world's tables (with --database-url).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_SCHEMA)]
    pub(crate) schema: String,
}

impl DatabaseArgs {
    /// The storage `--persistence` chose, or by default PostgreSQL when a URL was given and
    /// hybrid storage otherwise.
    pub(crate) fn persistence(&self, chosen: Option<PersistenceArg>) -> PersistenceArg {
        chosen.unwrap_or(match self.url() {
            Some(_) => PersistenceArg::Postgres,
            None => PersistenceArg::Hybrid,
        })
    }

    /// The URL, when one was given (an empty one counts as none).
    pub(crate) fn url(&self) -> Option<&str> {
        self.database_url
            .as_deref()
            .filter(|u| !u.trim().is_empty())
    }
}

/// The default `--schema`: the engine's default for a PostgreSQL world.
pub(crate) const DEFAULT_SCHEMA: &str = "worlds";

/// The default `--dir` when `WORLDS_ENGINE_DIR` is not set: where a world on file or hybrid
/// storage keeps its state by default.
pub(crate) const DEFAULT_DIR: &str = "./.worlds-engine";

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

    /// The world's data directory.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// A running world's API instead of the directory or database.
    #[command(flatten)]
    pub(crate) remote: ServerArgs,

    /// Print the final progress as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds runs retry` and `worlds runs resume`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ReopenArgs {
    /// Run id or workflow id.
    pub(crate) id: String,

    /// The world's data directory.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// Why, recorded in the `run_reopened` event.
    #[arg(long)]
    pub(crate) reason: Option<String>,

    /// Who asks, recorded in the `run_reopened` event (default: $USER). Through --server
    /// the server records the API key instead.
    #[arg(long)]
    pub(crate) by: Option<String>,

    /// A running world's API instead of the directory or database.
    #[command(flatten)]
    pub(crate) remote: ServerArgs,

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

    /// The world's data directory.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// Why, recorded in the `workflow_cancelled` event.
    #[arg(long)]
    pub(crate) reason: Option<String>,

    /// A running world's API instead of the directory or database.
    #[command(flatten)]
    pub(crate) remote: ServerArgs,

    /// Print the outcome as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `worlds runs list`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ListArgs {
    /// The world's data directory.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

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

    /// A running world's API instead of the directory or database.
    #[command(flatten)]
    pub(crate) remote: ServerArgs,

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
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// Print the run state with its history as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,

    /// A running world's API instead of the directory or database.
    #[command(flatten)]
    pub(crate) remote: ServerArgs,
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

/// Options of `worlds schedules list`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SchedulesListArgs {
    /// The world's data directory.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// Print one JSON object per line (the stored schedule) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,

    /// A running world's API instead of the directory or database.
    #[command(flatten)]
    pub(crate) remote: ServerArgs,
}

/// Options of `worlds schedules pause|resume|delete`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ScheduleIdArgs {
    /// The schedule's id.
    pub(crate) id: String,

    /// The world's data directory.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// Print the outcome as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,

    /// A running world's API instead of the directory or database.
    #[command(flatten)]
    pub(crate) remote: ServerArgs,
}

/// Options of `worlds doctor`.
#[derive(Debug, Clone, Args)]
pub(crate) struct DoctorArgs {
    /// The world's data directory.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,
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
    fn bench_help_gives_the_worker_counts_the_bench_uses() {
        use crate::bench::{DEFAULT_WORKERS, DURABLE_WORKERS, POSTGRES_WORKERS};
        let mut command = Cli::command();
        let bench = command
            .find_subcommand_mut("bench")
            .expect("a bench command");
        let help = bench.render_long_help().to_string();
        // The help wraps lines: read it as one line of words.
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for said in [
            format!("Default: {DEFAULT_WORKERS} on memory"),
            format!("{DURABLE_WORKERS} on file and hybrid"),
            format!("{POSTGRES_WORKERS} on postgres"),
        ] {
            assert!(help.contains(&said), "`{said}` not in {help}");
        }
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

    #[test]
    fn parses_schedules_options() {
        let cli = Cli::try_parse_from(["worlds", "schedules", "list", "--json"]).unwrap();
        let Command::Schedules(SchedulesCommand::List(args)) = cli.command else {
            panic!("not schedules list: {:?}", cli.command);
        };
        assert!(args.json);
        assert_eq!(args.dir, PathBuf::from(DEFAULT_DIR));
        for verb in ["pause", "resume", "delete"] {
            let cli = Cli::try_parse_from(["worlds", "schedules", verb, "daily-job", "--dir", "d"])
                .unwrap();
            let Command::Schedules(command) = cli.command else {
                panic!("not schedules: {:?}", cli.command);
            };
            let args = match command {
                SchedulesCommand::Pause(args)
                | SchedulesCommand::Resume(args)
                | SchedulesCommand::Delete(args) => args,
                SchedulesCommand::List(_) => panic!("{verb} parsed as list"),
            };
            assert_eq!((args.id.as_str(), args.json), ("daily-job", false));
            assert_eq!(args.dir, PathBuf::from("d"));
        }
        assert!(Cli::try_parse_from(["worlds", "schedules", "pause"]).is_err());
    }

    #[test]
    fn parses_dev_options() {
        let cli = Cli::try_parse_from(["worlds", "dev"]).unwrap();
        let Command::Dev(args) = cli.command else {
            panic!("not dev: {:?}", cli.command);
        };
        assert_eq!(args.dir, PathBuf::from(DEFAULT_DIR));
        assert_eq!(args.runs, None);
        assert_eq!(args.persistence, None);
        assert_eq!(
            args.database.persistence(args.persistence),
            if args.database.url().is_some() {
                PersistenceArg::Postgres // WORLDS_ENGINE_DATABASE_URL is set here
            } else {
                PersistenceArg::Hybrid
            }
        );
        assert_eq!(args.speed, 1.0);

        let cli = Cli::try_parse_from([
            "worlds",
            "dev",
            "--dir",
            "d",
            "--runs",
            "0",
            "--persistence",
            "memory",
            "--speed",
            "10",
        ])
        .unwrap();
        let Command::Dev(args) = cli.command else {
            panic!("not dev: {:?}", cli.command);
        };
        assert_eq!(args.dir, PathBuf::from("d"));
        assert_eq!(args.runs, Some(0));
        assert_eq!(args.persistence, Some(PersistenceArg::Memory));
        assert_eq!(args.speed, 10.0);
        assert!(Cli::try_parse_from(["worlds", "dev", "--speed", "0"]).is_err());
        assert!(Cli::try_parse_from(["worlds", "dev", "--persistence", "sqlite"]).is_err());
        let cli = Cli::try_parse_from([
            "worlds",
            "dev",
            "--persistence",
            "postgres",
            "--database-url",
            "postgres://u@h/db",
            "--schema",
            "demo",
        ])
        .unwrap();
        let Command::Dev(args) = cli.command else {
            panic!("not dev: {:?}", cli.command);
        };
        assert_eq!(args.persistence, Some(PersistenceArg::Postgres));
        assert_eq!(args.database.url(), Some("postgres://u@h/db"));
        assert_eq!(args.database.schema, "demo");
        // A URL alone is enough: the world is on PostgreSQL.
        let cli = Cli::try_parse_from(["worlds", "serve", "--database-url", "postgres://u@h/db"])
            .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve: {:?}", cli.command);
        };
        assert_eq!(
            args.database.persistence(args.persistence),
            PersistenceArg::Postgres
        );
    }
}

/// Options of `worlds logs`.
#[derive(Debug, Clone, Args)]
pub(crate) struct LogsArgs {
    /// The world's data directory; its log files are in its logs/ folder.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// Read the log files in this directory instead (a memory world's configured log folder).
    #[arg(long, value_name = "DIR")]
    pub(crate) log_dir: Option<PathBuf>,

    /// A world on PostgreSQL instead of a directory: the entries every member wrote.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,

    /// Only entries of this category: world, worker, workflow, activity or system.
    #[arg(long, value_name = "CATEGORY")]
    pub(crate) category: Option<worlds_engine::telemetry::logs::LogCategory>,

    /// Only entries at this level or more severe: debug, info, warn or error.
    #[arg(long, value_name = "LEVEL")]
    pub(crate) level: Option<worlds_engine::telemetry::logs::LogLevel>,

    /// Only entries since this long ago (1h, 30m, 2d) or this time (2026-01-31T08:00:00Z).
    #[arg(long, value_name = "WHEN", value_parser = crate::logs::parse_since)]
    pub(crate) since: Option<crate::logs::Since>,

    /// At most this many entries, the most recent.
    #[arg(long, default_value_t = 100, value_parser = at_least_one)]
    pub(crate) limit: usize,

    /// Print the entries as they are stored, one JSON object per line.
    #[arg(long)]
    pub(crate) json: bool,
}
