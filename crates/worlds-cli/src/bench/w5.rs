//! W5, recovery: N workflows of K steps on a durable backend, interrupted by SIGKILL after
//! about half of their steps; restart on the same directory and finish. Reports the recovery
//! wall time (from the restart until every run is done) and `reexecuted_steps`, the number of
//! executions after the restart of steps whose completion was already recorded (must be 0).
//!
//! The benchmark process re-executes its own binary as the child that gets killed: the child
//! is `worlds bench --workload w5 …` with [`CHILD_DIR_VAR`] naming the world's directory. Each
//! step execution in the child appends one line, `{workflow_id} {input}`, to a log in that
//! directory (one `O_APPEND` write per line, after the step's body ran); the parent kills the
//! child once half of the N × K executions are logged, then restarts the world in its own
//! process.
//!
//! A step at position `p` of these workflows has input `p`, so `(workflow id, input)` names a
//! step. After the restart, the parent's step function records each execution it makes. A
//! step re-executed after the restart is a violation only if its `activity_completed` was
//! recorded before the restart (its completion time in history is earlier than the restart);
//! re-running a step whose completion never reached the store is the at-least-once contract
//! and is reported separately in the notes.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use futures::stream::{self, StreamExt, TryStreamExt};
use worlds_engine::prelude::*;
use worlds_engine::ActivityStatus;
use worlds_engine::WorkflowQueryFilter;

use crate::cli::Backend;

use super::{check, progress, Report, Settings};

/// Set (to the world's directory) in the child process that runs the workload until killed.
pub(crate) const CHILD_DIR_VAR: &str = "WORLDS_BENCH_W5_DIR";

/// Default number of workflows.
const N: usize = 10_000;
/// Default steps per workflow.
const K: usize = 10;
/// The child's log of step executions, in the world's directory.
const LOG: &str = "bench-w5-executions.log";
/// Starts (`execute` calls) in flight at once, so that they share group commits.
const STARTS_IN_FLIGHT: usize = 256;
/// The longest the child may take to reach the kill point.
const CHILD_DEADLINE: Duration = Duration::from_secs(600);

/// The directory of the child role, if this process is the child of a W5 run.
pub(crate) fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD_DIR_VAR).map(PathBuf::from)
}

/// The workflow id of the `i`-th run.
fn workflow_id(i: usize) -> String {
    format!("w5-{i}")
}

/// The workflow: `k` sequential steps; the step at position `p` gets input `p`.
fn flow(step: &Activity<u64, u64>) -> Workflow<u64, u64> {
    super::chain("w5", step)
}

/// Refuses the memory backend: there is nothing to recover from.
fn check_durable(backend: Backend) -> anyhow::Result<()> {
    if backend == Backend::Memory {
        bail!(
            "W5 kills the process and recovers from what is on disk: it needs a durable backend, `--backend hybrid` or `--backend file`, not `memory`"
        );
    }
    Ok(())
}

/// Runs W5 (the parent role).
pub(crate) async fn run(settings: &Settings) -> anyhow::Result<Report> {
    check_durable(settings.backend)?;
    let (n, k) = (settings.n.unwrap_or(N), settings.k.unwrap_or(K));
    progress(&format!(
        "W5: {n} workflows x {k} steps, SIGKILL after about half the steps, then recovery; {} workers",
        settings.workers
    ));
    let dir = super::fresh_data_dir()?;
    let log = dir.join(LOG);

    // Phase 1: the child runs until half the steps have executed, then dies by SIGKILL.
    let mut child = Command::new(std::env::current_exe().context("no path to this program")?)
        .args([
            "bench",
            "--workload",
            "w5",
            "--backend",
            settings.backend.name(),
        ])
        .args(["--n", &n.to_string(), "--k", &k.to_string()])
        .args(["--workers", &settings.workers.to_string()])
        .env(CHILD_DIR_VAR, &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .context("could not start the child process")?;
    let threshold = (n * k / 2).max(1) as u64;
    let mut counter = LineCounter::default();
    let deadline = Instant::now() + CHILD_DEADLINE;
    loop {
        if counter.count(&log)? >= threshold {
            break;
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "the child process ended ({status}) before it could be killed at {threshold} step executions; try a larger --n"
            );
        }
        if Instant::now() > deadline {
            child.kill().ok();
            bail!("the child process did not reach {threshold} step executions within {CHILD_DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // `Child::kill` is SIGKILL on Unix: no destructor, flush or shutdown runs in the child.
    child.kill().context("could not kill the child process")?;
    child.wait()?;
    let executed_before = LineCounter::default().count(&log)?;
    progress(&format!(
        "W5: child killed after {executed_before} step executions; restarting"
    ));
    // Timestamps are in ms: make sure everything the child recorded is strictly earlier.
    tokio::time::sleep(Duration::from_millis(5)).await;

    // Phase 2: restart on the same directory and finish every run.
    let restart_ms = epoch_ms();
    let restarted = Instant::now();
    let executions: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let step = {
        let executions = executions.clone();
        activity("step", move |ctx: ActivityContext, n: u64| {
            let executions = executions.clone();
            async move {
                executions
                    .lock()
                    .expect("the execution log is never poisoned")
                    .push((ctx.workflow_id().to_owned(), n));
                Ok::<_, StepError>(n + 1)
            }
        })
    };
    let flow = flow(&step);
    let world = World::new(super::config(settings, n, Some(dir.clone()))?)
        .context("could not reopen the world")?;
    world.register(&step)?.register(&flow)?;
    world.start().await?;
    let handles: Vec<WorkflowHandle<u64>> = stream::iter(0..n)
        .map(|i| start_or_find(&world, &flow, i, k))
        .buffered(STARTS_IN_FLIGHT)
        .try_collect()
        .await?;
    for handle in handles {
        check(handle.result().await?, k as u64)?;
    }
    let wall = restarted.elapsed();

    // Which steps were recorded before the restart.
    let runs = world
        .query_workflows(WorkflowQueryFilter::new().workflow_name("w5"))
        .await?;
    let mut recorded_before: HashMap<(String, u64), bool> = HashMap::new();
    for run in &runs {
        for activity in &run.activities {
            let before = activity.status == ActivityStatus::Completed
                && activity.completed_at.is_some_and(|t| t < restart_ms);
            recorded_before.insert(
                (run.workflow_id.clone(), u64::from(activity.position)),
                before,
            );
        }
    }
    let executions = std::mem::take(&mut *executions.lock().expect("not poisoned"));
    let reexecuted = executions
        .iter()
        .filter(|step| recorded_before.get(*step).copied().unwrap_or(false))
        .count();
    let recorded = recorded_before.values().filter(|b| **b).count();
    let ran_in_child = logged_steps(&log)?;
    let repeated_unrecorded = executions
        .iter()
        .filter(|step| {
            ran_in_child.contains(*step) && !recorded_before.get(*step).copied().unwrap_or(false)
        })
        .count();
    super::stop_world(world).await?;

    let mut report = Report::new(settings.backend.name(), "W5", n, k, wall.as_secs_f64());
    report.workflows_per_s = None;
    report.steps_per_s = None;
    report.reexecuted_steps = Some(reexecuted as u64);
    report.notes = format!(
        "SIGKILL after {executed_before} of {} step executions, {recorded} steps recorded by then; wall_s = reopen + recover + re-issue the {n} starts + finish; after the restart {} step executions: {repeated_unrecorded} of steps the child had run but not recorded (at-least-once), {reexecuted} of recorded steps; {} workers",
        n * k,
        executions.len(),
        settings.workers
    );
    Ok(report)
}

/// Starts the `i`-th run, or finds it if the killed process had started it.
async fn start_or_find(
    world: &World,
    flow: &Workflow<u64, u64>,
    i: usize,
    k: usize,
) -> anyhow::Result<WorkflowHandle<u64>> {
    let id = workflow_id(i);
    match world
        .execute(
            flow,
            k as u64,
            WorkflowOptions::new().workflow_id(id.clone()),
        )
        .await
    {
        Ok(handle) => Ok(handle),
        Err(WorldError::Conflict { .. }) => Ok(world.handle(&id).await?),
        Err(e) => Err(e.into()),
    }
}

/// The child role: starts every run and works until killed. Each step execution appends a line
/// to the log.
pub(crate) async fn child(settings: &Settings, dir: &Path) -> anyhow::Result<()> {
    check_durable(settings.backend)?;
    let (n, k) = (settings.n.unwrap_or(N), settings.k.unwrap_or(K));
    let path = dir.join(LOG);
    let log = Arc::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("could not open {}", path.display()))?,
    );
    let step = activity("step", move |ctx: ActivityContext, n: u64| {
        let log = log.clone();
        async move {
            let line = format!("{} {n}\n", ctx.workflow_id());
            // One write per line: with O_APPEND, concurrent lines stay whole.
            (&*log)
                .write_all(line.as_bytes())
                .map_err(|e| StepError::msg(format!("could not log the execution: {e}")))?;
            Ok::<_, StepError>(n + 1)
        }
    });
    let flow = flow(&step);
    let world = World::new(super::config(settings, n, Some(dir.to_path_buf()))?)
        .context("could not open the world")?;
    world.register(&step)?.register(&flow)?;
    world.start().await?;
    let handles: Vec<WorkflowHandle<u64>> = stream::iter(0..n)
        .map(|i| start_or_find(&world, &flow, i, k))
        .buffered(STARTS_IN_FLIGHT)
        .try_collect()
        .await?;
    for handle in handles {
        handle.result().await?;
    }
    world.shutdown().await?;
    Ok(())
}

/// The steps the child's log says it executed, as `(workflow id, input)`.
fn logged_steps(path: &Path) -> anyhow::Result<HashSet<(String, u64)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("could not read {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let (id, input) = line.split_once(' ')?;
            Some((id.to_owned(), input.parse().ok()?))
        })
        .collect())
}

/// Milliseconds since the Unix epoch (the system clock the benchmark worlds run on).
fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Counts the complete lines of a growing file, reading only what was added since last time.
#[derive(Default)]
struct LineCounter {
    offset: u64,
    lines: u64,
}

impl LineCounter {
    fn count(&mut self, path: &Path) -> anyhow::Result<u64> {
        let mut file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e).with_context(|| format!("could not open {}", path.display())),
        };
        file.seek(SeekFrom::Start(self.offset))?;
        let mut added = Vec::new();
        file.read_to_end(&mut added)?;
        // Only up to the last newline: a line being written is counted next time.
        if let Some(end) = added.iter().rposition(|&b| b == b'\n') {
            self.lines += added[..=end].iter().filter(|&&b| b == b'\n').count() as u64;
            self.offset += end as u64 + 1;
        }
        Ok(self.lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_refused() {
        let error = check_durable(Backend::Memory).unwrap_err().to_string();
        assert!(error.contains("durable backend"), "{error}");
        assert!(check_durable(Backend::Hybrid).is_ok());
    }

    #[test]
    fn counts_complete_lines_incrementally() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut counter = LineCounter::default();
        assert_eq!(counter.count(&path).unwrap(), 0);
        std::fs::write(&path, "a 1\nb 2\nc").unwrap();
        assert_eq!(counter.count(&path).unwrap(), 2);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b" 3\n").unwrap();
        assert_eq!(counter.count(&path).unwrap(), 3);
    }
}
