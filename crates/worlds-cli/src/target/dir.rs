//! A world's data directory (`--dir`, file or hybrid storage): read through
//! [`FileStore::open_read_only`], which writes nothing and so is safe while a world runs on
//! it; written through a short-lived world ([`with_world`]); checked by `worlds doctor`.
//!
//! One-off writes (`worlds runs cancel`, `worlds schedules pause …`) open the directory as a
//! world, do the write, and close it. In file mode the directory may be shared, so the command
//! simply joins it like any other process. A directory held by a running hybrid world cannot be
//! written from outside; the command says so. A hybrid directory no world holds is opened in
//! hybrid mode when it has segments or writes not yet compacted (file mode would first move
//! them all into run logs).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use worlds_engine::store::{FileStore, KeyFiles, KeyStore, WalSummary};
use worlds_engine::telemetry::logs::{read_logs, LogEntry, LogQuery};
use worlds_engine::{
    ErrorKind, HookSecret, Persistence, ResolveData, RunStatus, WorkflowQueryFilter, WorkflowState,
    World, WorldConfig,
};

use super::scan::{collect_runs, format_stuck, retention_note, stuck_runs};
use super::DEFAULT_DIR;
use crate::escape::escaped;
use crate::text::{now_ms, shell_word};

/// Opens the store read-only, with the directory named in any error.
pub(crate) fn open(dir: &Path) -> anyhow::Result<FileStore> {
    check_dir(dir)?;
    FileStore::open_read_only(dir).with_context(|| format!("could not read {}", dir.display()))
}

/// Tells stderr what a read-only open found and left alone.
pub(crate) fn report_warnings(store: &FileStore) {
    for warning in store.warnings() {
        eprintln!("warning: {}", escaped(warning));
    }
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

/// Refuses a directory without a `workflows/` folder: no world ever wrote there.
fn check_world_dir(dir: &Path) -> anyhow::Result<()> {
    check_dir(dir)?;
    if !dir.join("workflows").is_dir() {
        bail!(
            "no worlds-engine data in {} (it has no workflows/ directory)",
            dir.display()
        );
    }
    Ok(())
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

/// How to open the directory for writing: hybrid if a hybrid world left segments or writes
/// not yet compacted, which are its own format; file mode otherwise.
pub(crate) fn persistence_for(dir: &Path) -> Persistence {
    let wal = dir.join("state").join("wal.ndjson");
    let has_segments = std::fs::read_dir(dir.join("segments"))
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    match std::fs::metadata(&wal) {
        _ if has_segments => Persistence::Hybrid,
        Ok(meta) if meta.len() > 0 => Persistence::Hybrid,
        _ => Persistence::File,
    }
}

/// Opens the world in `dir` (not started) and runs `write` on it. `instead` finishes the
/// sentence "A world in hybrid mode owns DIR: …", saying what to do when a running hybrid world
/// holds the directory.
pub(crate) fn with_world<T>(
    dir: &Path,
    instead: &str,
    write: impl AsyncFnOnce(&World) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    check_world_dir(dir)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("could not start the async runtime")?;
    runtime.block_on(async {
        let mut config = WorldConfig::default();
        config.persistence = persistence_for(dir);
        config.persistence_path = dir.to_path_buf();
        // The world is never started, so no workflow code asks for a hook token: a key of its
        // own keeps the command from creating `state/hook-key` or warning about it.
        config.hook_secret = Some(HookSecret(format!("{:032x}", rand_seed())));
        // Only `runs bulk` starts it, to drive its operation: pinned to a code version of its
        // own, it leaves every other run where it is (on a directory of one process a started
        // world would otherwise take up every unfinished run, and fail those whose workflow it
        // does not have).
        config.code_version = Some(format!("worlds-cli-{:x}", rand_seed()));
        config.pin_code_version = true;
        let world = World::new(config).map_err(|e| match e.kind() {
            ErrorKind::Unavailable => anyhow::anyhow!(
                "{e}\n\nA world in hybrid mode owns {}: {instead}",
                dir.display()
            ),
            _ => anyhow::Error::new(e).context(format!("could not open {}", dir.display())),
        })?;
        write(&world).await
    })
}

/// A value that differs between runs of the command; the key it makes derives no token anyone
/// holds.
fn rand_seed() -> u128 {
    use std::hash::{BuildHasher, RandomState};
    let state = RandomState::new();
    (u128::from(state.hash_one(std::process::id())) << 64) | u128::from(state.hash_one(1u8))
}

/// Runs `work` on the key records in the directory's `keys/` folder, which is safe while a
/// world holds the directory in any mode.
pub(crate) fn keys<T>(
    dir: &Path,
    work: impl AsyncFnOnce(&dyn KeyStore) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    check_world_dir(dir)?;
    let files = KeyFiles::open(dir);
    futures::executor::block_on(work(&files))
}

/// Runs `work` on the pauses of the world directory `dir` (its `pauses/` files).
pub(crate) fn pauses<T>(
    dir: &Path,
    work: impl AsyncFnOnce(&dyn worlds_engine::store::PauseStore) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    check_world_dir(dir)?;
    let files = worlds_engine::store::PauseFiles::open(dir);
    futures::executor::block_on(work(&files))
}

/// `process PID` from `leases/{run_id}`, which names the member driving the run in file mode
/// (`m{pid}-{random}`); `None` without a lease (a hybrid directory, or a run no one drives).
pub(crate) fn driver_of(dir: &Path, run_id: &str) -> Option<String> {
    let member = std::fs::read_to_string(dir.join("leases").join(run_id)).ok()?;
    let member = member.trim();
    let pid = member
        .strip_prefix('m')
        .and_then(|rest| rest.split('-').next())
        .filter(|pid| !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()));
    Some(match pid {
        Some(pid) => format!("process {pid} (member {member})"),
        None => format!("member {member}"),
    })
}

/// The entries of the day files in `{dir}/logs` (or `log_dir`), read with the engine's own
/// reader, which only reads; and what to say on stderr when there are none to show.
pub(crate) fn logs(
    dir: &Path,
    log_dir: Option<&Path>,
    query: &LogQuery,
    filtered: bool,
) -> anyhow::Result<(Vec<LogEntry>, Option<String>)> {
    let files: PathBuf = log_dir.map_or_else(|| dir.join("logs"), Path::to_path_buf);
    match log_dir {
        None => check_dir(dir)?,
        Some(named) if !named.exists() => bail!("{} does not exist", named.display()),
        Some(_) => {}
    }
    if !files.is_dir() {
        // A world that has not written its first batch yet (or was killed before it): nothing
        // is wrong with the directory.
        return Ok((Vec::new(), Some(no_records_yet(&files))));
    }
    let entries =
        read_logs(&files, query).with_context(|| format!("could not read {}", files.display()))?;
    let note = (entries.is_empty() && !filtered).then(|| no_records_yet(&files));
    Ok((entries, note))
}

/// What to say when a directory holds no log records: that none were written yet, and how a
/// world comes to write them.
fn no_records_yet(dir: &Path) -> String {
    format!(
        "no log records were written to {} yet. A file or hybrid world writes its own records \
         there (started, runs created, resumed, failed, quarantined) in batches, every 2 s and \
         when it shuts down, so a world killed before its first batch leaves none; with \
         `world.logs().init()` or `world.logs().layer()` in the program's subscriber, \
         its other tracing events go there too. A world whose LogsConfig::dir is elsewhere is \
         read with --log-dir.",
        escaped(&dir.display().to_string())
    )
}

/// `worlds doctor` on a directory: fails (non-zero exit) if the store cannot be loaded.
pub(crate) fn doctor(dir: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    writeln!(out, "directory: {}", dir.display())?;
    let store = open(dir)?;
    writeln!(out, "format: {}", format_version(dir))?;
    let (runs, _) = futures::executor::block_on(collect_runs(
        &store,
        WorkflowQueryFilter::new().resolve_data(ResolveData::None),
        usize::MAX,
    ))?;
    out.write_all(format_doctor(&runs, store.wal_summary(), store.warnings()).as_bytes())?;
    let stuck = futures::executor::block_on(stuck_runs(&store, &runs, now_ms()))?;
    out.write_all(format_stuck(&stuck).as_bytes())?;
    let note = futures::executor::block_on(retention_note(&store, now_ms()))?;
    out.write_all(note.as_bytes())?;
    if let Ok(fs) = rustix::fs::statvfs(dir) {
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
fn format_doctor(runs: &[WorkflowState], wal: &WalSummary, warnings: &[String]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
