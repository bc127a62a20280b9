//! The world a command works on, and what the commands do there.
//!
//! A command names its world with [`WorldArgs`] (`--dir`, `--database-url` and `--schema`,
//! `--server` and `--api-key`), or with [`LocalArgs`] when it only works on a world it opens
//! itself. [`Target`] is that world, opened: its operations are the ones the commands share
//! (list and show runs, cancel, reopen, bulk operations, schedules, hooks, keys, logs, the
//! doctor), so a command never asks which kind of world it has; an operation a kind cannot do
//! says so. Each kind's own part is in its own file: [`dir`] (a data directory), [`postgres`]
//! (a database), [`server`] (a running world's HTTP API).

pub(crate) mod dir;
pub(crate) mod postgres;
mod scan;
pub(crate) mod server;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args};
use worlds_client::Client;
use worlds_engine::clock::Millis;
use worlds_engine::hooks::HookResumed;
use worlds_engine::model::{Pause, PauseTarget, ReopenRequest, Reopened};
use worlds_engine::schedule::ScheduleConfig;
use worlds_engine::store::{KeyStore, PauseStore, ScheduleStore};
use worlds_engine::telemetry::logs::{LogEntry, LogQuery};
use worlds_engine::{
    BulkProgress, BulkRequest, ErrorKind, Event, Persistence, ResolveData, RunStatus,
    WorkflowQueryFilter, WorkflowState, World, WorldConfig, WorldError, DATABASE_URL_ENV,
    DATA_DIR_ENV,
};

pub(crate) use postgres::{Database, DatabaseArgs};
pub(crate) use scan::collect_runs;
pub(crate) use server::ServerArgs;

use crate::escape::escaped;

/// The default `--dir` when `WORLDS_ENGINE_DIR` is not set: where a world on file or hybrid
/// storage keeps its state by default.
pub(crate) const DEFAULT_DIR: &str = "./.worlds-engine";

/// The options naming a command's world: a directory, a database, or a running world's API.
#[derive(Debug, Clone, Args)]
pub(crate) struct WorldArgs {
    /// The directory or database.
    #[command(flatten)]
    pub(crate) local: LocalArgs,

    /// A running world's API instead of the directory or database.
    #[command(flatten)]
    pub(crate) server: ServerArgs,
}

/// The options naming a world the command opens itself: a directory, or a database.
#[derive(Debug, Clone, Args)]
pub(crate) struct LocalArgs {
    /// The world's data directory.
    #[arg(long, env = DATA_DIR_ENV, default_value = DEFAULT_DIR)]
    pub(crate) dir: PathBuf,

    /// A world on PostgreSQL instead of a directory.
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,
}

#[cfg(test)]
impl WorldArgs {
    /// The world in `dir`, as `--dir` names it.
    pub(crate) fn dir(dir: &Path) -> Self {
        WorldArgs {
            local: LocalArgs::dir(dir),
            server: ServerArgs::default(),
        }
    }
}

#[cfg(test)]
impl LocalArgs {
    /// The world in `dir`, as `--dir` names it.
    pub(crate) fn dir(dir: &Path) -> Self {
        LocalArgs {
            dir: dir.to_path_buf(),
            database: DatabaseArgs::default(),
        }
    }
}

/// Refuses a command that names both a directory (`--dir` on the command line) and a database
/// (`--database-url` or `WORLDS_ENGINE_DATABASE_URL`): it could only pick one silently.
pub(crate) fn one_world(matches: &ArgMatches) -> anyhow::Result<()> {
    let Some((command, mut leaf)) = matches.subcommand() else {
        return Ok(());
    };
    if !matches!(command, "runs" | "schedules" | "doctor" | "logs") {
        return Ok(());
    }
    while let Some((_, sub)) = leaf.subcommand() {
        leaf = sub;
    }
    let dir_given = leaf.try_contains_id("dir").unwrap_or(false)
        && leaf.value_source("dir") == Some(ValueSource::CommandLine);
    let url = leaf
        .try_get_one::<String>("database_url")
        .ok()
        .flatten()
        .filter(|url| !url.trim().is_empty());
    if let (true, Some(_)) = (dir_given, url) {
        let from = match leaf.value_source("database_url") {
            Some(ValueSource::EnvVariable) => "the WORLDS_ENGINE_DATABASE_URL environment variable",
            _ => "--database-url",
        };
        bail!(
            "both --dir and {from} name a world: pick one (drop --dir to use the database, or unset the URL to use the directory)"
        );
    }
    Ok(())
}

/// A runtime for one command.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("could not start the async runtime")
}

/// Opens a world to run (`worlds dev`, `worlds serve`) with `config`: on the directory, or on
/// the PostgreSQL database for `Persistence::Postgres`.
pub(crate) async fn open_world(
    persistence: Persistence,
    dir: &Path,
    database: &DatabaseArgs,
    mut config: WorldConfig,
) -> anyhow::Result<World> {
    config.persistence = persistence;
    config.persistence_path = dir.to_path_buf();
    if persistence != Persistence::Postgres {
        return World::new(config)
            .with_context(|| format!("could not open a world in {}", dir.display()));
    }
    let Some(db) = database.world() else {
        bail!(
            "--persistence postgres needs a database: pass --database-url postgres://user@host:5432/db or set {DATABASE_URL_ENV}"
        );
    };
    postgres::check_schema_name(db.schema())?;
    config.database.url = Some(db.url().to_owned());
    config.database.schema = db.schema().to_owned();
    worlds_postgres::open(config)
        .await
        .map_err(|e| db.error(format!("could not open a world on {}: {e}", db.describe())))
}

/// Which runs [`Target::list_runs`] reads: newest first unless `oldest_first`, at most `limit`.
#[derive(Debug, Clone)]
pub(crate) struct RunQuery {
    pub(crate) statuses: Vec<RunStatus>,
    pub(crate) name: Option<String>,
    pub(crate) code_version: Option<String>,
    pub(crate) oldest_first: bool,
    pub(crate) limit: usize,
    /// Whether the runs' inputs and outputs are read too.
    pub(crate) data: bool,
}

impl RunQuery {
    fn resolve_data(&self) -> ResolveData {
        if self.data {
            ResolveData::All
        } else {
            ResolveData::None
        }
    }

    /// The store's filter of the query (without its limit, which is paged).
    fn filter(&self) -> WorkflowQueryFilter {
        let mut filter = WorkflowQueryFilter::new().resolve_data(self.resolve_data());
        if !self.statuses.is_empty() {
            filter = filter.status(self.statuses.clone());
        }
        if let Some(name) = &self.name {
            filter = filter.workflow_name(name.clone());
        }
        if let Some(version) = &self.code_version {
            filter = filter.code_version(version.clone());
        }
        filter.oldest_first = self.oldest_first;
        filter
    }
}

/// One run as `worlds runs show` reads it.
pub(crate) struct Shown {
    /// The run, its inputs and outputs read.
    pub(crate) state: WorkflowState,
    /// Its whole history.
    pub(crate) history: Vec<Event>,
    /// Its children and their status.
    pub(crate) children: Vec<(String, RunStatus)>,
    /// The process or member driving the run, when the world can tell.
    pub(crate) driver: Option<String>,
    /// The pauses in force: what a held run or step waits on.
    pub(crate) pauses: Vec<worlds_engine::model::Pause>,
}

/// A change `worlds schedules` can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScheduleAction {
    Pause,
    Resume,
    Delete,
}

impl ScheduleAction {
    pub(crate) fn verb(self) -> &'static str {
        match self {
            ScheduleAction::Pause => "pause",
            ScheduleAction::Resume => "resume",
            ScheduleAction::Delete => "delete",
        }
    }
}

/// A command's world, opened.
pub(crate) enum Target {
    /// A world's data directory (file or hybrid storage).
    Dir(PathBuf),
    /// A world on PostgreSQL.
    Database(Database),
    /// A running world's HTTP API.
    Server(Client),
}

impl Target {
    /// The world the arguments name: the API with `--server`, else the database with a URL,
    /// else the directory.
    pub(crate) fn open(args: &WorldArgs) -> anyhow::Result<Target> {
        Ok(match server::client(&args.server)? {
            Some(client) => Target::Server(client),
            None => Target::local(&args.local),
        })
    }

    /// The database when the arguments name one, the directory otherwise.
    pub(crate) fn local(args: &LocalArgs) -> Target {
        match args.database.world() {
            Some(db) => Target::Database(db),
            None => Target::Dir(args.dir.clone()),
        }
    }

    /// The directory's path, `schema 'worlds' on host:port/db`, or `the world's API`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Target::Dir(dir) => dir.display().to_string(),
            Target::Database(db) => db.describe(),
            Target::Server(_) => "the world's API".to_owned(),
        }
    }

    /// The options naming this world in a command the user is told to run.
    pub(crate) fn flags(&self) -> String {
        match self {
            Target::Dir(dir) => dir::dir_flag(dir),
            Target::Database(db) => db.flags(),
            Target::Server(_) => " --server URL --api-key KEY".to_owned(),
        }
    }

    /// Adds to a "not found" error how to see the ids that exist.
    pub(crate) fn not_found(&self, error: WorldError) -> anyhow::Error {
        if error.kind() == ErrorKind::NotFound {
            anyhow::anyhow!(
                "{error} (`worlds runs list{}` lists the runs)",
                self.flags()
            )
        } else {
            anyhow::Error::new(error)
        }
    }

    /// Refuses an operation only a world opened here can do.
    fn needs_local(&self, what: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "{what} needs a local world: it works on a world's directory (--dir) or database (--database-url), not through --server"
        )
    }

    /// Opens the world (not started) and runs `write` on it. `instead` finishes the sentence
    /// "A world in hybrid mode owns DIR: …", saying what to do when a running hybrid world
    /// holds the directory.
    fn write<T>(
        &self,
        instead: &str,
        write: impl AsyncFnOnce(&World) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        match self {
            Target::Dir(dir) => dir::with_world(dir, instead, write),
            Target::Database(db) => postgres::with_world(db, write),
            Target::Server(_) => Err(self.needs_local("this change")),
        }
    }

    /// Up to `query.limit` runs, and whether more match.
    pub(crate) fn list_runs(&self, query: &RunQuery) -> anyhow::Result<(Vec<WorkflowState>, bool)> {
        match self {
            Target::Dir(dir) => {
                let store = dir::open(dir)?;
                dir::report_warnings(&store);
                futures::executor::block_on(collect_runs(&store, query.filter(), query.limit))
            }
            Target::Database(db) => postgres::read(db, async |store| {
                collect_runs(store, query.filter(), query.limit).await
            }),
            Target::Server(client) => server::list_runs(client, query),
        }
    }

    /// What `worlds runs list` says on stderr when no run matches: how to start some, or how
    /// to list them all when `filtered`. Nothing through a server.
    pub(crate) fn no_runs(&self, filtered: bool) -> Option<String> {
        let dev = match self {
            Target::Dir(dir) => format!("worlds dev{}", dir::dir_flag(dir)),
            Target::Database(db) => format!("worlds dev --persistence postgres{}", db.flags()),
            Target::Server(_) => return None,
        };
        Some(if filtered {
            format!(
                "no runs match (`worlds runs list{}` lists them all)",
                self.flags()
            )
        } else {
            format!(
                "no runs in {} yet: `{dev}` starts some (the bundled demo workflows), \
                 or a program starts them with World::execute",
                escaped(&self.describe()),
            )
        })
    }

    /// One run (by run id or workflow id) with its history.
    pub(crate) fn show_run(&self, id: &str) -> anyhow::Result<Shown> {
        match self {
            Target::Dir(dir) => {
                let store = dir::open(dir)?;
                dir::report_warnings(&store);
                let mut shown = futures::executor::block_on(scan::load(&store, id, self))?;
                shown.driver = dir::driver_of(dir, &shown.state.id);
                Ok(shown)
            }
            Target::Database(db) => postgres::read(db, async |store| {
                let mut shown = scan::load(store, id, self).await?;
                shown.driver = postgres::doctor::driver_of(store, &shown.state.id).await?;
                Ok(shown)
            }),
            Target::Server(client) => server::show_run(client, id),
        }
    }

    /// Cancels a run and its unfinished children; the run as it is then.
    pub(crate) fn cancel(&self, id: &str, reason: &str) -> anyhow::Result<WorkflowState> {
        if let Target::Server(client) = self {
            return server::cancel(client, id, reason);
        }
        let instead = "cancel the run through its API (`worlds runs cancel ID --server URL --api-key KEY` when it serves one), or from that program (World::cancel or handle.cancel()), or stop it and run this command again.";
        self.write(instead, async |world: &World| {
            match world.cancel_with_reason(id, reason.to_owned()).await {
                Ok(()) => {}
                Err(e @ WorldError::NotFound { .. }) => return Err(self.not_found(e)),
                Err(e) => {
                    return Err(anyhow::Error::new(e).context(format!("could not cancel {id}")))
                }
            }
            let state = world
                .query(id)
                .await
                .with_context(|| format!("could not read {id} back"))?;
            Ok(state)
        })
    }

    /// Reopens a run (retry, reset or resume, as `request` says), asked by `by`; and whether
    /// its replay was checked first. Only a server, which has the workflow code, checks it
    /// (and records its API key instead of `by`); elsewhere the process that drives the run
    /// replays it when it picks it up.
    pub(crate) fn reopen(
        &self,
        id: &str,
        request: ReopenRequest,
        by: &str,
    ) -> anyhow::Result<(Reopened, bool)> {
        if let Target::Server(client) = self {
            return Ok((server::reopen(client, id, &request)?, true));
        }
        let action = request.action;
        let request = request.by(by).without_replay_check();
        let instead = format!(
            "{action} the run through its API (`worlds runs {action} ID --server URL --api-key KEY` when it serves one), or from that program (World::reopen), or stop it and run this command again."
        );
        let reopened = self.write(&instead, async |world: &World| {
            match world.reopen(id, request).await {
                Ok(reopened) => Ok(reopened),
                Err(e @ WorldError::NotFound { .. }) => Err(self.not_found(e)),
                Err(e) => Err(anyhow::Error::new(e).context(format!("could not {action} {id}"))),
            }
        })?;
        Ok((reopened, false))
    }

    /// Submits a bulk operation, asked by `by` (a server records its API key instead), and
    /// follows it to its end. On a directory it is driven here, by a world that has the
    /// operations' workflow only (so the runs it reopens are left to the program that has
    /// theirs); on a database by the members running the world; through a server by the
    /// serving world.
    pub(crate) fn bulk(&self, mut request: BulkRequest, by: &str) -> anyhow::Result<BulkProgress> {
        if let Target::Server(client) = self {
            return server::bulk(client, &request);
        }
        request.by = Some(by.to_owned());
        let action = request.action;
        let instead = format!(
            "run it through the world's API (`worlds runs bulk {action} … --server URL --api-key KEY` when it serves one), or from that program (World::bulk), or stop it and run this command again."
        );
        let driven_here = matches!(self, Target::Dir(_));
        self.write(&instead, async |world: &World| {
            if driven_here {
                world.start().await?;
                let id = world.bulk(request).await?;
                let progress = world.bulk_progress_when_done(&id).await?;
                world.shutdown().await?;
                return Ok(progress);
            }
            let id = world.bulk(request).await?;
            loop {
                let progress = world.bulk_progress(&id).await?;
                if progress.done {
                    return Ok(progress);
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        })
    }

    /// A retention sweep judging by `policy` (the serving world's own through a server), or
    /// its preview with `dry_run`, followed to its end. On a directory the sweep is driven
    /// here, as a bulk operation is; on a database by the members running the world.
    pub(crate) fn prune(
        &self,
        policy: Option<worlds_engine::RetentionConfig>,
        dry_run: bool,
    ) -> anyhow::Result<worlds_engine::PruneReport> {
        if let Target::Server(client) = self {
            return server::prune(client, dry_run);
        }
        let instead = "sweep through the world's API (`worlds runs prune --server URL --api-key KEY` when it serves one), or from that program (World::prune), or stop it and run this command again.";
        let driven_here = matches!(self, Target::Dir(_));
        self.write(instead, async |world: &World| {
            if dry_run {
                return Ok(world.prune_preview_by(policy).await?);
            }
            if driven_here {
                world.start().await?;
                let id = world.prune_by(policy).await?;
                let report = world.prune_report_when_done(&id).await?;
                world.shutdown().await?;
                return Ok(report);
            }
            let id = world.prune_by(policy).await?;
            loop {
                let report = world.prune_report(&id).await?;
                if report.done {
                    return Ok(report);
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        })
    }

    /// Writes archived runs back into the world (a directory or database; through a server,
    /// refused): `(imported, already there)`.
    pub(crate) fn import_runs(&self, runs: Vec<WorkflowState>) -> anyhow::Result<(u64, u64)> {
        let instead = "import into a world nothing holds (stop the program, or import into another directory), or from that program (World::import_runs).";
        if let Target::Dir(dir) = self {
            // A new directory (absent or empty) becomes a new world to investigate in.
            let empty = std::fs::read_dir(dir).map_or(true, |mut entries| entries.next().is_none());
            if empty {
                drop(
                    worlds_engine::store::FileStore::open(dir).with_context(|| {
                        format!("could not create a world in {}", dir.display())
                    })?,
                );
            }
        }
        self.write(instead, async |world: &World| {
            Ok(world.import_runs(runs).await?)
        })
    }

    /// The schedules, by id.
    pub(crate) fn schedules(&self) -> anyhow::Result<Vec<ScheduleConfig>> {
        match self {
            Target::Dir(dir) => {
                let store = dir::open(dir)?;
                Ok(futures::executor::block_on(store.list_schedules())?)
            }
            Target::Database(db) => {
                postgres::read(db, async |store| Ok(store.list_schedules().await?))
            }
            Target::Server(client) => server::schedules(client),
        }
    }

    /// Pauses, resumes or deletes a schedule: the schedule after the change, `None` once
    /// deleted.
    pub(crate) fn change_schedule(
        &self,
        id: &str,
        action: ScheduleAction,
    ) -> anyhow::Result<Option<ScheduleConfig>> {
        if let Target::Server(client) = self {
            return server::change_schedule(client, id, action);
        }
        let verb = action.verb();
        let instead = format!(
            "{verb} the schedule from that program (world.schedules().{verb}(..)), or stop it and run this command again.",
        );
        self.write(&instead, async |world: &World| {
            let result = match action {
                ScheduleAction::Pause => world.schedules().pause(id).await.map(Some),
                ScheduleAction::Resume => world.schedules().resume(id).await.map(Some),
                ScheduleAction::Delete => world.schedules().delete(id).await.map(|()| None),
            };
            match result {
                Ok(changed) => Ok(changed),
                Err(e @ (WorldError::NotFound { .. } | WorldError::InvalidInput { .. })) => {
                    bail!("{e}")
                }
                Err(e) => {
                    Err(anyhow::Error::new(e).context(format!("could not {verb} schedule {id}")))
                }
            }
        })
    }

    /// Delivers `payload` to the hook waiting with `token`.
    pub(crate) fn resume_hook(
        &self,
        token: &str,
        payload: &serde_json::Value,
    ) -> anyhow::Result<HookResumed> {
        if let Target::Server(client) = self {
            return server::resume_hook(client, token, payload);
        }
        let instead = "resume the hook through its API (`--server URL --api-key KEY`), or from that program (World::resume_hook).";
        self.write(instead, async |world: &World| {
            world
                .resume_hook(token, payload)
                .await
                .map_err(|e: WorldError| anyhow::Error::new(e).context("could not resume the hook"))
        })
    }

    /// Runs `work` on the world's API key records: a directory's `keys/` folder (safe while a
    /// world holds it in any mode), or a database's `api_keys` table as a visitor (key records
    /// are no run's, so writing them needs no lease).
    /// The pauses in force.
    pub(crate) fn pauses(&self) -> anyhow::Result<Vec<Pause>> {
        match self {
            Target::Server(client) => server::pauses(client),
            _ => self.pause_store(async |store| Ok(store.list_pauses().await?)),
        }
    }

    /// Pauses `target`, recorded as by `by` (a server records the API key instead).
    pub(crate) fn pause(
        &self,
        target: PauseTarget,
        by: &str,
        reason: &str,
        now: Millis,
    ) -> anyhow::Result<Pause> {
        if let Target::Server(client) = self {
            return server::pause(client, &target, reason);
        }
        let pause = Pause {
            target,
            by: by.to_owned(),
            reason: reason.to_owned(),
            since: now,
        };
        pause.check()?;
        self.pause_store(async |store| {
            store.save_pause(&pause).await?;
            Ok(pause.clone())
        })
    }

    /// Lifts the pause on `target`: the pause lifted, `None` if there was none.
    pub(crate) fn resume(&self, target: &PauseTarget) -> anyhow::Result<Option<Pause>> {
        target.check()?;
        match self {
            Target::Server(client) => server::resume(client, target),
            _ => self.pause_store(async |store| Ok(store.remove_pause(target).await?)),
        }
    }

    /// Runs `work` on the pauses of a directory (its `pauses/` files, written beside a running
    /// world, which reads them again within 2 s) or a database.
    fn pause_store<T>(
        &self,
        work: impl AsyncFnOnce(&dyn PauseStore) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        match self {
            Target::Dir(dir) => dir::pauses(dir, work),
            Target::Database(db) => postgres::read(db, async |store| work(store).await),
            Target::Server(_) => Err(self.needs_local("this change")),
        }
    }

    pub(crate) fn keys<T>(
        &self,
        work: impl AsyncFnOnce(&dyn KeyStore) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        match self {
            Target::Dir(dir) => dir::keys(dir, work),
            Target::Database(db) => postgres::read(db, async |store| work(store).await),
            Target::Server(_) => Err(self.needs_local("`worlds keys`")),
        }
    }

    /// The log entries `query` matches (a directory's day files, or `log_dir`'s; a database's
    /// `logs` table), and what to say on stderr when there are none to show (`filtered`: the
    /// query has filters, so none may match).
    pub(crate) fn logs(
        &self,
        query: &LogQuery,
        log_dir: Option<&Path>,
        filtered: bool,
    ) -> anyhow::Result<(Vec<LogEntry>, Option<String>)> {
        match self {
            Target::Dir(dir) => dir::logs(dir, log_dir, query, filtered),
            Target::Database(db) => {
                if log_dir.is_some() {
                    bail!(
                        "both --log-dir and a database name a world's logs: pick one (drop --log-dir to read the database's, or the URL to read the files)"
                    );
                }
                let entries =
                    postgres::read(db, async |store| Ok(store.query_logs(query).await?))?;
                let note = (entries.is_empty() && !filtered).then(|| format!(
                    "no log records were written to {} yet. Its members write their own records (started, runs created, resumed, failed, quarantined) in batches, every 2 s and when they shut down; with `world.logs().init()` or `world.logs().layer()` in a program's subscriber, its other tracing events go there too.",
                    db.describe()
                ));
                Ok((entries, note))
            }
            Target::Server(_) => Err(self.needs_local("`worlds logs`")),
        }
    }

    /// `worlds doctor`: the world's health on `out`; an error when it found a problem. `lease`:
    /// a database world's lease (default: the engine's).
    pub(crate) fn doctor(
        &self,
        lease: Option<Duration>,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        match self {
            Target::Dir(dir) => dir::doctor(dir, out),
            Target::Database(db) => postgres::doctor::doctor(
                db,
                lease.unwrap_or(worlds_postgres::PostgresOptions::default().lease_duration),
                out,
            ),
            Target::Server(_) => Err(self.needs_local("`worlds doctor`")),
        }
    }
}
