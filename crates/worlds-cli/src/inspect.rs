//! `worlds runs list` and `worlds doctor`: read a world's data directory (`worlds runs show` is
//! in `show.rs`).
//!
//! Every command opens the store with [`FileStore::open_read_only`], which writes nothing, so they
//! are safe to run while a world is running on the same directory. With `--database-url` they
//! read a PostgreSQL world instead, through its store (see [`crate::postgres`]). The `format_*` functions turn
//! loaded data into text; the command functions load and write it to `out`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{bail, Context};
use comfy_table::{presets, Table};
use worlds_engine::clock::Millis;
use worlds_engine::store::{FileStore, RunStore, WalSummary};
use worlds_engine::{
    ErrorKind, ResolveData, RunStatus, WorkflowQueryFilter, WorkflowState, WorldError,
};

use crate::cli::{DatabaseArgs, DoctorArgs, ListArgs, DEFAULT_DIR};
use crate::escape::escaped;
use crate::postgres::{self, Database};

/// Runs asked of the store per page.
const PAGE: usize = 100;
/// Longest error message shown in the list table.
const SHORT_ERROR: usize = 60;

/// Opens the store read-only, with the directory named in any error.
pub(crate) fn open(dir: &Path) -> anyhow::Result<FileStore> {
    check_dir(dir)?;
    FileStore::open_read_only(dir).with_context(|| format!("could not read {}", dir.display()))
}

/// Refuses a `--dir` that does not exist, or that holds no world while a `.worlds-engine`
/// beside it does (the user named the project directory instead of the world's), saying which
/// `--dir` was probably meant.
pub(crate) fn check_dir(dir: &Path) -> anyhow::Result<()> {
    let nested = dir.join(".worlds-engine");
    let hint = if nested.join("workflows").is_dir() {
        format!(
            "; the world's directory is probably {} (pass --dir {})",
            nested.display(),
            shell_word(&nested.display().to_string())
        )
    } else {
        String::new()
    };
    if !dir.exists() {
        let default = if dir == Path::new(DEFAULT_DIR) {
            " (the default --dir: run the command where `worlds dev` or your program ran, or pass --dir)"
        } else {
            ""
        };
        bail!("{} does not exist{default}{hint}", dir.display());
    }
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    if !hint.is_empty() && !dir.join("workflows").is_dir() {
        bail!("no worlds-engine data in {}{hint}", dir.display());
    }
    Ok(())
}

/// Where a command's world is: a data directory, or a PostgreSQL database.
#[derive(Debug, Clone)]
pub(crate) enum Place {
    /// A world's data directory (`--dir`).
    Dir(PathBuf),
    /// A world on PostgreSQL (`--database-url`, `--schema`).
    Database(Database),
}

impl Place {
    /// The database when the arguments name one, the directory otherwise.
    pub(crate) fn of(dir: &Path, database: &DatabaseArgs) -> Place {
        match postgres::target(database) {
            Some(db) => Place::Database(db),
            None => Place::Dir(dir.to_path_buf()),
        }
    }

    /// The directory's path, or `schema 'worlds' on host:port/db`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Place::Dir(dir) => dir.display().to_string(),
            Place::Database(db) => db.describe(),
        }
    }

    /// The options naming this world in a command the user is told to run.
    pub(crate) fn flags(&self) -> String {
        match self {
            Place::Dir(dir) => dir_flag(dir),
            Place::Database(db) => db.flags(),
        }
    }

    /// The `worlds dev` command that starts runs in this world.
    pub(crate) fn dev_command(&self) -> String {
        match self {
            Place::Dir(dir) => format!("worlds dev{}", dir_flag(dir)),
            Place::Database(db) => format!("worlds dev --persistence postgres{}", db.flags()),
        }
    }
}

/// Adds to a "not found" error how to see the ids that exist.
pub(crate) fn not_found_hint(error: WorldError, place: &Place) -> anyhow::Error {
    if error.kind() == ErrorKind::NotFound {
        anyhow::anyhow!(
            "{error} (`worlds runs list{}` lists the runs)",
            place.flags()
        )
    } else {
        anyhow::Error::new(error)
    }
}

/// ` --dir PATH` for a command the user is told to run, unless `dir` is the default; the path
/// is quoted for a POSIX shell when it needs to be, so the command can be pasted as printed.
pub(crate) fn dir_flag(dir: &Path) -> String {
    if dir == Path::new(DEFAULT_DIR) {
        String::new()
    } else {
        format!(" --dir {}", shell_word(&dir.display().to_string()))
    }
}

/// `text` as one word for a POSIX shell: as is when it holds only safe characters, otherwise
/// in single quotes.
pub(crate) fn shell_word(text: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+:=@,%".contains(c);
    if !text.is_empty() && text.chars().all(safe) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Up to `limit` runs matching `filter`, newest first, paging through the store.
pub(crate) async fn collect_runs(
    store: &(impl RunStore + ?Sized),
    filter: WorkflowQueryFilter,
    limit: usize,
) -> anyhow::Result<(Vec<WorkflowState>, bool)> {
    let mut runs = Vec::new();
    let mut cursor = None;
    loop {
        let mut page_filter = filter.clone().limit(PAGE.min(limit - runs.len()));
        page_filter.cursor = cursor;
        let page = store.list_runs(&page_filter).await?;
        runs.extend(page.data);
        if !page.has_more {
            return Ok((runs, false));
        }
        if runs.len() >= limit {
            return Ok((runs, true));
        }
        cursor = page.cursor;
    }
}

/// `worlds runs list`.
pub(crate) fn list(args: &ListArgs, out: &mut impl Write) -> anyhow::Result<()> {
    if let Some(client) = crate::remote::client(&args.remote)? {
        let (runs, more) = crate::remote::list_runs(&client, args)?;
        return print_runs(&runs, more, args, out);
    }
    let place = Place::of(&args.dir, &args.database);
    let mut filter = WorkflowQueryFilter::new().resolve_data(if args.json {
        ResolveData::All
    } else {
        ResolveData::None
    });
    if !args.statuses.is_empty() {
        filter = filter.status(args.statuses.clone());
    }
    if let Some(name) = &args.name {
        filter = filter.workflow_name(name.clone());
    }
    if let Some(version) = &args.code_version {
        filter = filter.code_version(version.clone());
    }
    filter.oldest_first = args.oldest_first;
    let (runs, more) = match &place {
        Place::Dir(dir) => {
            let store = open(dir)?;
            report_warnings(&store);
            futures::executor::block_on(collect_runs(&store, filter, args.limit))?
        }
        Place::Database(db) => postgres::read(db, async |store| {
            collect_runs(store, filter, args.limit).await
        })?,
    };
    if runs.is_empty() {
        // On stderr: a script reading stdout sees no runs, a person sees why.
        if args.statuses.is_empty() && args.name.is_none() {
            eprintln!(
                "no runs in {} yet: `{}` starts some (the bundled demo workflows), \
                 or a program starts them with World::execute",
                escaped(&place.describe()),
                place.dev_command()
            );
        } else {
            eprintln!(
                "no runs match (`worlds runs list{}` lists them all)",
                place.flags()
            );
        }
        return Ok(());
    }
    print_runs(&runs, more, args, out)
}

/// Prints the runs of `worlds runs list` as a table or JSON lines.
fn print_runs(
    runs: &[WorkflowState],
    more: bool,
    args: &ListArgs,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if args.json {
        out.write_all(format_runs_json(runs)?.as_bytes())?;
    } else {
        writeln!(out, "{}", format_runs_table(runs))?;
    }
    if more {
        eprintln!(
            "showing the {} {} runs; more match (raise --limit)",
            if args.oldest_first {
                "oldest"
            } else {
                "newest"
            },
            runs.len()
        );
    }
    Ok(())
}

/// `worlds doctor`: fails (non-zero exit) if the store cannot be loaded.
pub(crate) fn doctor(args: &DoctorArgs, out: &mut impl Write) -> anyhow::Result<()> {
    if let Some(db) = postgres::target(&args.database) {
        return postgres::doctor::doctor(&db, out);
    }
    writeln!(out, "directory: {}", args.dir.display())?;
    let store = open(&args.dir)?;
    writeln!(out, "format: {}", format_version(&args.dir))?;
    let (runs, _) = futures::executor::block_on(collect_runs(
        &store,
        WorkflowQueryFilter::new().resolve_data(ResolveData::None),
        usize::MAX,
    ))?;
    out.write_all(format_doctor(&runs, store.wal_summary(), store.warnings()).as_bytes())?;
    let stuck = futures::executor::block_on(stuck_runs(&store, &runs, crate::show::now_ms()))?;
    out.write_all(format_stuck(&stuck).as_bytes())?;
    if let Ok(fs) = rustix::fs::statvfs(&args.dir) {
        let block = fs.f_frsize.max(1);
        let free = fs.f_bavail.saturating_mul(block);
        let total = fs.f_blocks.saturating_mul(block);
        out.write_all(format_disk(free, total).as_bytes())?;
    }
    Ok(())
}

/// Below this much free space (or 5 % of the disk), the doctor warns.
const LOW_DISK_BYTES: u64 = 256 << 20;

/// The free space of the directory's filesystem, with a warning when it runs low.
fn format_disk(free: u64, total: u64) -> String {
    let gib = |bytes: u64| bytes as f64 / (1u64 << 30) as f64;
    let mut text = format!("disk: {:.2} GiB free of {:.2} GiB\n", gib(free), gib(total));
    if free == 0 {
        text.push_str("warning: the disk is full: writes fail with STORAGE_FULL and new runs are refused; nothing acknowledged is lost. Free space on it: the world goes on by itself\n");
    } else if free < LOW_DISK_BYTES || free.saturating_mul(20) < total {
        text.push_str("warning: the disk is nearly full: once it is, writes fail with STORAGE_FULL and new runs are refused; free space on it\n");
    }
    text
}

/// Most unfinished runs the doctor reads the histories of, looking for stuck ones.
pub(crate) const STUCK_SCAN: usize = 10_000;
/// Most stuck runs the doctor names.
const STUCK_SHOWN: usize = 20;

/// A run in flight whose waiting looks wrong, and why ([`worlds_engine::model::waits`]).
pub(crate) struct Stuck {
    pub(crate) run_id: String,
    pub(crate) workflow: String,
    pub(crate) concern: String,
}

/// The runs among `runs` (unfinished ones, at most [`STUCK_SCAN`]) whose waiting looks wrong
/// at `now`: a timer or retry long overdue, a step past its timeout or silent past its
/// heartbeat timeout, a hook past its expiry, work queued for minutes with no worker.
pub(crate) async fn stuck_runs(
    store: &(impl worlds_engine::store::EventStore + ?Sized),
    runs: &[WorkflowState],
    now: Millis,
) -> anyhow::Result<Vec<Stuck>> {
    let mut stuck = Vec::new();
    let unfinished = runs
        .iter()
        .filter(|r| !r.status.is_terminal())
        .take(STUCK_SCAN);
    for run in unfinished {
        let history = store.history(&run.id, 0).await?;
        let events: Vec<&worlds_engine::Event> = history.iter().map(|e| &**e).collect();
        let state = match worlds_engine::WorkflowState::from_history(&events) {
            Ok(state) => state,
            Err(_) => continue,
        };
        for wait in worlds_engine::model::waits(&state, &events, now) {
            if let Some(concern) = wait.concern {
                stuck.push(Stuck {
                    run_id: run.id.clone(),
                    workflow: run.name.clone(),
                    concern,
                });
            }
        }
    }
    Ok(stuck)
}

/// The doctor's lines about stuck runs (nothing if there are none).
pub(crate) fn format_stuck(stuck: &[Stuck]) -> String {
    let mut text = String::new();
    if stuck.is_empty() {
        return text;
    }
    let runs: std::collections::BTreeSet<&str> = stuck.iter().map(|s| s.run_id.as_str()).collect();
    text.push_str(&format!(
        "stuck: {} run(s) wait on something that looks wrong (`worlds runs show ID` says more)\n",
        runs.len()
    ));
    for s in stuck.iter().take(STUCK_SHOWN) {
        text.push_str(&format!(
            "  {} ({}): {}\n",
            escaped(&s.run_id),
            escaped(&s.workflow),
            escaped(&s.concern)
        ));
    }
    if stuck.len() > STUCK_SHOWN {
        text.push_str(&format!("  … and {} more\n", stuck.len() - STUCK_SHOWN));
    }
    text
}

/// Tells stderr what a read-only open found and left alone.
pub(crate) fn report_warnings(store: &FileStore) {
    for warning in store.warnings() {
        eprintln!("warning: {}", escaped(warning));
    }
}

/// The version in `state/format.json`, as text.
fn format_version(dir: &Path) -> String {
    let path = dir.join("state").join("format.json");
    let Ok(bytes) = std::fs::read(&path) else {
        return "unknown (state/format.json is missing)".to_owned();
    };
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("format").map(ToString::to_string))
        .unwrap_or_else(|| "unknown (state/format.json is unreadable)".to_owned())
}

/// The doctor's findings after a successful load: every record of every run log and of the
/// write-ahead log was read and its checksum verified.
pub(crate) fn format_doctor(
    runs: &[WorkflowState],
    wal: &WalSummary,
    warnings: &[String],
) -> String {
    let mut by_status: BTreeMap<RunStatus, usize> = BTreeMap::new();
    for run in runs {
        *by_status.entry(run.status).or_default() += 1;
    }
    let events: u64 = runs.iter().map(|r| r.event_count).sum();
    let mut text = format!("runs: {} ({events} events)\n", runs.len());
    for (status, count) in by_status {
        text.push_str(&format!("  {status}: {count}\n"));
    }
    if wal.segments > 0 {
        text.push_str(&format!(
            "segments: {} files, {} records\n",
            wal.segments, wal.segment_records
        ));
    }
    if wal.records > 0 {
        text.push_str(&format!(
            "write-ahead log: {} records, {} not yet compacted\n",
            wal.records, wal.pending
        ));
    }
    text.push_str("every record read back and checked (with its checksum, from format 4 on)\n");
    for warning in warnings {
        text.push_str(&format!("warning: {}\n", escaped(warning)));
    }
    if warnings.is_empty() {
        text.push_str("healthy\n");
    } else {
        text.push_str(&format!(
            "healthy, with {} warning(s): every log loads; opening the directory with a world repairs torn tails\n",
            warnings.len()
        ));
    }
    text
}

/// One JSON object per run and line.
pub(crate) fn format_runs_json(runs: &[WorkflowState]) -> anyhow::Result<String> {
    let mut text = String::new();
    let reveal = crate::show::reveal();
    for run in runs {
        let mut run = run.clone();
        reveal.state(&mut run);
        text.push_str(&serde_json::to_string(&run)?);
        text.push('\n');
    }
    Ok(text)
}

/// The runs as a table.
pub(crate) fn format_runs_table(runs: &[WorkflowState]) -> String {
    let reveal = crate::show::reveal();
    let mut table = Table::new();
    table.load_style(presets::NOTHING).set_header([
        "RUN ID",
        "WORKFLOW ID",
        "NAME",
        "STATUS",
        "CREATED (UTC)",
        "DURATION",
        "STEPS",
        "ERROR",
    ]);
    for run in runs {
        let duration = run
            .completed_at
            .map(|done| duration(elapsed(run.created_at, done)))
            .unwrap_or_else(|| "-".to_owned());
        let error = run
            .error
            .as_ref()
            .map(|e| {
                let mut error = (**e).clone();
                reveal.error(&run.id, &mut error);
                let message = error.message;
                shorten(&escaped(&message).to_string(), SHORT_ERROR)
            })
            .unwrap_or_default();
        table.add_row([
            escaped(&run.id).to_string(),
            escaped(&run.workflow_id).to_string(),
            escaped(&run.name).to_string(),
            run.status.to_string(),
            timestamp(run.created_at),
            duration,
            run.activities.len().to_string(),
            error,
        ]);
    }
    plain(&table)
}

/// A borderless table as text, without trailing spaces.
pub(crate) fn plain(table: &Table) -> String {
    let lines: Vec<String> = table.lines().map(|l| l.trim_end().to_owned()).collect();
    lines.join("\n")
}

/// A time as `2024-01-02 03:04:05Z` (UTC).
pub(crate) fn timestamp(at: Millis) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(u64::try_from(at).unwrap_or(0));
    humantime::format_rfc3339_seconds(time)
        .to_string()
        .replacen('T', " ", 1)
}

/// Milliseconds from `from` to `to` (0 if `to` is earlier).
pub(crate) fn elapsed(from: Millis, to: Millis) -> u64 {
    u64::try_from(to.saturating_sub(from)).unwrap_or(0)
}

/// A duration as `1s 250ms`.
pub(crate) fn duration(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// Time since the first event: `+12ms`, `+1.250s`, `+2m 5s`.
pub(crate) fn offset(ms: u64) -> String {
    if ms < 1_000 {
        format!("+{ms}ms")
    } else if ms < 60_000 {
        format!("+{}.{:03}s", ms / 1_000, ms % 1_000)
    } else {
        format!("+{}", duration(ms))
    }
}

/// The first line of `text`, cut to `max` characters.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() <= max && line.len() == text.trim_end().len() {
        return line.to_owned();
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use serde_json::json;
    use worlds_engine::clock::{Clock, VirtualClock};
    use worlds_engine::ids::IdGenerator;
    use worlds_engine::model::EVENT_FORMAT_VERSION;
    use worlds_engine::store::EventStore;
    use worlds_engine::{Event, EventKind, Payload, StructuredError};

    use super::*;
    use crate::cli::ShowArgs;
    use crate::show::{details, show};

    /// Writes runs through a [`FileStore`], one event at a time on a virtual clock.
    struct Fixture {
        dir: tempfile::TempDir,
        clock: VirtualClock,
        ids: IdGenerator,
        store: FileStore,
    }

    impl Fixture {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let clock = VirtualClock::new(1_700_000_000_000);
            let ids = IdGenerator::new(Arc::new(clock.clone()));
            let store = FileStore::open(dir.path()).unwrap();
            Self {
                dir,
                clock,
                ids,
                store,
            }
        }

        fn event(&self, run_id: &str, kind: EventKind) -> Event {
            self.clock.advance(Duration::from_millis(5));
            Event {
                id: self.ids.event_id(),
                run_id: run_id.to_owned(),
                seq: 0,
                timestamp: self.clock.now_ms(),
                version: EVENT_FORMAT_VERSION,
                kind,
            }
        }

        fn run(&self, name: &str, workflow_id: &str, kinds: Vec<EventKind>) -> String {
            let id = self.ids.run_id();
            let queued = EventKind::WorkflowQueued(Box::new(worlds_engine::model::QueuedRun::new(
                name.to_owned(),
                workflow_id.to_owned(),
                Payload::from(json!({ "n": 1 })),
            )));
            futures::executor::block_on(async {
                self.store
                    .create_run(self.event(&id, queued))
                    .await
                    .unwrap();
                for kind in kinds {
                    let event = self.event(&id, kind);
                    self.store.append(&id, vec![event]).await.unwrap();
                }
            });
            id
        }

        fn dir(&self) -> PathBuf {
            self.dir.path().to_path_buf()
        }
    }

    fn started() -> EventKind {
        EventKind::WorkflowStarted {
            attempt: 1,
            first_position: 0,
        }
    }

    fn scheduled(name: &str) -> EventKind {
        EventKind::ActivityScheduled {
            position: 0,
            activity_id: "step_01".to_owned(),
            name: name.to_owned(),
            input: Payload::from(json!(1)),
            options: None,
            inline: false,
        }
    }

    fn step_started(attempt: u32) -> EventKind {
        EventKind::ActivityStarted {
            position: 0,
            attempt,
        }
    }

    fn step_failed(attempt: u32, retrying: bool, message: &str) -> EventKind {
        EventKind::ActivityFailed {
            position: 0,
            attempt,
            error: StructuredError::new(message),
            retrying,
        }
    }

    /// A completed checkout (its step retried once), a failed checkout and a pending report.
    fn populate() -> (Fixture, [String; 3]) {
        let f = Fixture::new();
        let done = f.run(
            "checkout",
            "wf-done",
            vec![
                started(),
                scheduled("charge"),
                step_started(1),
                step_failed(1, true, "card declined"),
                EventKind::ActivityRetry {
                    position: 0,
                    attempt: 2,
                    delay_ms: 1_000,
                },
                step_started(2),
                EventKind::ActivityCompleted {
                    position: 0,
                    attempt: 2,
                    output: Payload::from(json!("ok")),
                },
                EventKind::WorkflowCompleted {
                    output: Payload::from(json!("done")),
                },
            ],
        );
        let failed = f.run(
            "checkout",
            "wf-failed",
            vec![
                started(),
                scheduled("ship"),
                step_started(1),
                step_failed(1, false, "warehouse on fire"),
                EventKind::WorkflowFailed {
                    error: StructuredError::new("warehouse on fire"),
                },
            ],
        );
        let pending = f.run("report", "wf-pending", vec![]);
        (f, [done, failed, pending])
    }

    fn list_args(dir: PathBuf) -> ListArgs {
        ListArgs {
            dir,
            database: DatabaseArgs::default(),
            statuses: Vec::new(),
            name: None,
            code_version: None,
            limit: 100,
            oldest_first: false,
            remote: crate::cli::ServerArgs::default(),
            json: true,
        }
    }

    fn listed_ids(args: &ListArgs) -> Vec<String> {
        let mut out = Vec::new();
        list(args, &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).unwrap();
                assert!(value.get("history").is_none());
                value["id"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    #[test]
    fn list_filters_by_status_name_and_limit() {
        let (f, [done, failed, pending]) = populate();
        let mut args = list_args(f.dir());
        assert_eq!(
            listed_ids(&args),
            vec![pending.clone(), failed.clone(), done.clone()]
        );

        args.statuses = vec![RunStatus::Failed, RunStatus::Completed];
        assert_eq!(listed_ids(&args), vec![failed.clone(), done.clone()]);
        args.name = Some("checkout".to_owned());
        args.statuses = vec![RunStatus::Pending];
        assert!(listed_ids(&args).is_empty());
        args.statuses.clear();
        assert_eq!(listed_ids(&args), vec![failed.clone(), done.clone()]);
        args.limit = 1;
        assert_eq!(listed_ids(&args), vec![failed.clone()]);

        let mut args = list_args(f.dir());
        args.json = false;
        let mut out = Vec::new();
        list(&args, &mut out).unwrap();
        let table = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[0].contains("RUN ID") && lines[0].contains("ERROR"));
        let failed_line = lines.iter().find(|l| l.contains(&failed)).unwrap();
        for cell in [
            "wf-failed",
            "checkout",
            "failed",
            "2023-11-14 22:13:",
            "25ms",
        ] {
            assert!(failed_line.contains(cell), "{cell} in {failed_line}");
        }
        assert!(failed_line.contains("warehouse on fire"));
        let pending_line = lines.iter().find(|l| l.contains(&pending)).unwrap();
        assert!(pending_line.contains(" - "), "{pending_line}");
    }

    #[test]
    fn show_finds_a_run_by_workflow_id_and_prints_its_timeline() {
        let (f, [done, _, _]) = populate();
        // A writer keeps the directory open meanwhile: inspection is read-only.
        let args = ShowArgs {
            id: "wf-done".to_owned(),
            dir: f.dir(),
            database: DatabaseArgs::default(),
            json: false,
            remote: crate::cli::ServerArgs::default(),
        };
        let mut out = Vec::new();
        show(&args, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        for expected in [
            "name        checkout",
            "status      completed",
            &format!("run id      {done}"),
            "workflow id wf-done",
            "attempt     1",
            "history (9 events)",
        ] {
            assert!(text.contains(expected), "{expected:?} in\n{text}");
        }
        let timeline: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.contains("SEQ"))
            .skip(1)
            .collect();
        assert_eq!(timeline.len(), 9, "{text}");
        assert!(timeline[0].contains("+0ms") && timeline[0].contains("workflow_queued"));
        let failed = timeline[4];
        for cell in [
            "+20ms",
            "activity_failed",
            "\"charge\" attempt 1 (retrying): card declined",
        ] {
            assert!(failed.contains(cell), "{cell} in {failed}");
        }
        assert!(
            timeline[5].contains("\"charge\" attempt 2 in 1s"),
            "{}",
            timeline[5]
        );

        let mut out = Vec::new();
        show(
            &ShowArgs {
                json: true,
                ..args.clone()
            },
            &mut out,
        )
        .unwrap();
        let state: WorkflowState = serde_json::from_slice(&out).unwrap();
        assert_eq!(state.id, done);
        assert_eq!(state.history.len(), 9);

        let missing = ShowArgs {
            id: "nope".to_owned(),
            ..args
        };
        let err = show(&missing, &mut Vec::new()).unwrap_err();
        assert!(format!("{err:#}").contains("not found"), "{err:#}");
    }

    #[test]
    fn failed_runs_show_their_error_and_compensations_their_id() {
        let (f, [_, failed, _]) = populate();
        let args = ShowArgs {
            id: failed,
            dir: f.dir(),
            database: DatabaseArgs::default(),
            json: false,
            remote: crate::cli::ServerArgs::default(),
        };
        let mut out = Vec::new();
        show(&args, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("error       warehouse on fire"), "{text}");
        assert!(
            text.contains("\"ship\" attempt 1: warehouse on fire"),
            "{text}"
        );

        let names = BTreeMap::new();
        let kind = EventKind::CompensationFailed {
            position: 3,
            compensation_id: "refund".to_owned(),
            error: StructuredError::new("bank down"),
        };
        assert_eq!(details(&kind, &names, 0), "refund: bank down");
        let kind = EventKind::CompensationAdded {
            position: 2,
            compensation_id: "refund".to_owned(),
        };
        assert_eq!(details(&kind, &names, 0), "refund");
    }

    #[test]
    fn the_doctor_warns_of_a_full_or_nearly_full_disk() {
        let gib = 1u64 << 30;
        assert_eq!(
            format_disk(100 * gib, 200 * gib),
            "disk: 100.00 GiB free of 200.00 GiB\n"
        );
        let low = format_disk(gib, 200 * gib);
        assert!(low.contains("warning: the disk is nearly full"), "{low}");
        let small = format_disk(100 << 20, gib);
        assert!(small.contains("nearly full"), "{small}");
        let full = format_disk(0, 200 * gib);
        assert!(
            full.contains("warning: the disk is full: writes fail with STORAGE_FULL"),
            "{full}"
        );
    }

    fn doctor_output(dir: PathBuf) -> (anyhow::Result<()>, String) {
        let mut out = Vec::new();
        let result = doctor(
            &DoctorArgs {
                dir,
                database: DatabaseArgs::default(),
            },
            &mut out,
        );
        (result, String::from_utf8(out).unwrap())
    }

    fn log_of(dir: &Path, run_id: &str) -> PathBuf {
        dir.join("workflows")
            .join(format!("{run_id}.events.ndjson"))
    }

    #[test]
    fn doctor_reports_healthy_torn_and_corrupt_stores() {
        let (f, [done, failed, pending]) = populate();
        let (result, text) = doctor_output(f.dir());
        result.unwrap();
        for expected in [
            "format: 5",
            "runs: 3 (16 events)",
            "  pending: 1",
            "  completed: 1",
            "  failed: 1",
            "healthy\n",
        ] {
            assert!(text.contains(expected), "{expected:?} in\n{text}");
        }
        // Queued since the fixture's clock (years ago), nothing has picked it up.
        assert!(text.contains("stuck: 1 run(s)"), "{text}");
        assert!(text.contains(&format!("  {pending} (report): ")), "{text}");

        let path = log_of(&f.dir(), &done);
        let good_len = std::fs::metadata(&path).unwrap().len();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"{\"id\":").unwrap();
        drop(file);
        let (result, text) = doctor_output(f.dir());
        result.unwrap();
        assert!(
            text.contains(&format!("warning: {}", path.display())),
            "{text}"
        );
        assert!(text.contains(&format!("byte offset {good_len}")), "{text}");
        assert!(text.contains("with 1 warning(s)"), "{text}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len + 6);

        let path = log_of(&f.dir(), &failed);
        let log = std::fs::read_to_string(&path).unwrap();
        let first = log.find('\n').unwrap() + 1;
        std::fs::write(
            &path,
            format!("{}{{oops}}\n{}", &log[..first], &log[first..]),
        )
        .unwrap();
        let (result, _) = doctor_output(f.dir());
        let message = format!("{:#}", result.unwrap_err());
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(
            message.contains(&format!("byte offset {first}")),
            "{message}"
        );

        let (result, _) = doctor_output(f.dir().join("missing"));
        let message = format!("{:#}", result.unwrap_err());
        assert!(message.contains("does not exist"), "{message}");
    }

    #[test]
    fn helpers_format_times_and_errors() {
        assert_eq!(offset(12), "+12ms");
        assert_eq!(offset(1_250), "+1.250s");
        assert_eq!(offset(125_000), "+2m 5s");
        assert_eq!(timestamp(0), "1970-01-01 00:00:00Z");
        assert_eq!(shorten("short", 10), "short");
        assert_eq!(shorten("a long message", 6), "a lon…");
        assert_eq!(shorten("two\nlines", 10), "two…");
    }
}
