//! `worlds runs retry|reset|resume`: reopens a failed or quarantined run in a world's
//! directory, on PostgreSQL, or through a world's API; `worlds runs bulk` does it (or cancels)
//! over every run a filter matches.
//!
//! The `worlds` tool does not have the program's workflow code, so against a directory or a
//! database it records the reopening without replaying it first: the process that drives the
//! run (the one that has its workflow) replays it when it picks it up, and quarantines it
//! again if the code still diverges. Through `--server` the serving program checks the replay
//! before anything is recorded.

use std::io::Write;

use worlds_engine::model::{ReopenRequest, Reopened};
use worlds_engine::{BulkAction, BulkProgress, BulkRequest, WorkflowQueryFilter};

use crate::cli::{BulkActionArg, BulkArgs, ReopenArgs};
use crate::escape::escaped;
use crate::target::Target;

/// Who asks: `--by`, else `$USER`, else `worlds runs`.
fn asker(by: &Option<String>) -> String {
    by.clone()
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "worlds runs".to_owned())
}

/// Runs `worlds runs retry`, `reset` or `resume` (`request` says which).
pub(crate) fn reopen(
    args: &ReopenArgs,
    request: ReopenRequest,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut request = request;
    request.reason = args.reason.clone();
    let target = Target::open(&args.world)?;
    let (reopened, replayed) = target.reopen(&args.id, request, &asker(&args.by))?;
    report(args, &reopened, replayed, out)
}

/// What the command says of the reopened run.
fn report(
    args: &ReopenArgs,
    reopened: &Reopened,
    replayed: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    if args.json {
        writeln!(out, "{}", serde_json::to_string(reopened)?)?;
        return Ok(());
    }
    if reopened.already {
        writeln!(
            out,
            "run {} was already reopened",
            escaped(&reopened.run_id)
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "run {} reopened ({}): attempt {} runs again from command #{}, keeping what came before",
        escaped(&reopened.run_id),
        reopened.action,
        reopened.attempt,
        reopened.kept_until
    )?;
    if !replayed {
        writeln!(
            out,
            "not replayed here: the process that runs its workflow replays it when it picks it up, and quarantines it again if the code still does not match"
        )?;
    }
    Ok(())
}

/// Runs `worlds runs bulk`: submits the operation, follows it to its end, says what it did.
pub(crate) fn bulk(args: &BulkArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let action = match args.action {
        BulkActionArg::Cancel => BulkAction::Cancel,
        BulkActionArg::Retry => BulkAction::Retry,
        BulkActionArg::Resume => BulkAction::Resume,
    };
    let mut filter = WorkflowQueryFilter::new();
    match args.statuses.as_slice() {
        [] => {}
        [one] => filter = filter.status(*one),
        many => filter = filter.status(many.to_vec()),
    }
    filter.workflow_name = args.name.clone();
    filter.workflow_id_prefix = args.workflow_id_prefix.clone();
    filter.code_version = args.code_version.clone();
    filter.quarantined = args.quarantined.then_some(true);
    let mut request = BulkRequest::new(action, filter);
    request.reason = args.reason.clone();
    request.name = args.operation.clone();
    let progress = Target::open(&args.world)?.bulk(request, &asker(&args.by))?;
    bulk_report(args, &progress, out)
}

fn bulk_report(
    args: &BulkArgs,
    progress: &BulkProgress,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    if args.json {
        writeln!(out, "{}", serde_json::to_string(progress)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "operation {}: {} run(s) matched, {} acted on, {} left as they were, {} refused",
        escaped(&progress.id),
        progress.matched,
        progress.applied,
        progress.skipped,
        progress.refused
    )?;
    for refusal in &progress.refusals {
        writeln!(
            out,
            "  {}: {}",
            escaped(&refusal.run_id),
            escaped(&refusal.error)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use worlds_engine::clock::SystemClock;
    use worlds_engine::prelude::*;
    use worlds_engine::{EventKind, WorkflowState};

    use super::*;

    /// `a; b`, where b fails while `broken` is set; calls counted.
    struct Flow {
        broken: Arc<AtomicBool>,
        a: Arc<AtomicUsize>,
        b: Arc<AtomicUsize>,
    }

    impl Flow {
        fn new() -> Self {
            Flow {
                broken: Arc::new(AtomicBool::new(true)),
                a: Arc::default(),
                b: Arc::default(),
            }
        }

        fn register(&self, world: &World) {
            let a = {
                let calls = self.a.clone();
                activity("cli-a", move |_ctx: ActivityContext, n: u64| {
                    let calls = calls.clone();
                    async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, StepError>(n + 1)
                    }
                })
            };
            let b = {
                let (calls, broken) = (self.b.clone(), self.broken.clone());
                activity("cli-b", move |_ctx: ActivityContext, n: u64| {
                    let (calls, broken) = (calls.clone(), broken.clone());
                    async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        if broken.load(Ordering::SeqCst) {
                            return Err(StepError::fatal("down"));
                        }
                        Ok::<_, StepError>(n + 1)
                    }
                })
            };
            let (sa, sb) = (a.clone(), b.clone());
            let flow = workflow("cli-reopen", move |ctx: WorkflowContext, n: u64| {
                let (a, b) = (sa.clone(), sb.clone());
                async move {
                    let x = ctx.run(&a, n).await?;
                    Ok::<_, WorkflowError>(ctx.run(&b, x).await?)
                }
            });
            world.register(&a).unwrap();
            world.register(&b).unwrap();
            world.register(&flow).unwrap();
        }

        fn counts(&self) -> (usize, usize) {
            (self.a.load(Ordering::SeqCst), self.b.load(Ordering::SeqCst))
        }
    }

    fn config(dir: &Path, persistence: Persistence) -> WorldConfig {
        let mut config = WorldConfig::default();
        config.persistence = persistence;
        config.persistence_path = dir.to_path_buf();
        config.failure_strategy = FailureStrategy::Ignore;
        config.shared_poll_interval = Duration::from_millis(20).into();
        config
    }

    fn args(dir: &Path, id: &str, json: bool) -> ReopenArgs {
        ReopenArgs {
            id: id.to_owned(),
            world: crate::target::WorldArgs::dir(dir),
            reason: Some("upstream fixed".into()),
            by: Some("dana".into()),
            json,
        }
    }

    async fn ended(world: &World, id: &str) -> WorkflowState {
        ended_after(world, id, 0).await
    }

    /// The run's state once an attempt after `attempt` has ended.
    async fn ended_after(world: &World, id: &str, attempt: u32) -> WorkflowState {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let state = world.query(id).await.unwrap();
                if state.status.is_terminal() && state.attempt > attempt {
                    return state;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap()
    }

    async fn failed_run(world: &World) -> String {
        let run = world
            .execute_by_name::<u64, u64>("cli-reopen", 1, WorkflowOptions::default())
            .await
            .unwrap();
        assert_eq!(ended(world, &run.id).await.status, RunStatus::Failed);
        run.id
    }

    /// A file world is running and failed the run; the command reopens it from outside and
    /// that world picks it up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_running_file_world_picks_up_a_run_retried_from_outside() {
        let dir = tempfile::tempdir().unwrap();
        let flow = Flow::new();
        let world = World::with_clock(config(dir.path(), Persistence::File), Arc::new(SystemClock))
            .unwrap();
        flow.register(&world);
        world.start().await.unwrap();
        let id = failed_run(&world).await;
        flow.broken.store(false, Ordering::SeqCst);

        let path = dir.path().to_path_buf();
        let run_id = id.clone();
        let printed = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            reopen(
                &args(&path, &run_id, true),
                ReopenRequest::retry(),
                &mut out,
            )
            .unwrap();
            String::from_utf8(out).unwrap()
        })
        .await
        .unwrap();
        let reopened: Reopened = serde_json::from_str(printed.trim()).unwrap();
        assert_eq!((reopened.attempt, reopened.kept_until), (2, 1));

        // The world driving the directory hears of it and claims it.
        let state = ended_after(&world, &id, 1).await;
        assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
        assert_eq!(flow.counts(), (1, 2), "a kept, b ran again");
        let by = state.history.iter().find_map(|e| match &e.kind {
            EventKind::RunReopened { by, reason, .. } => Some((by.clone(), reason.clone())),
            _ => None,
        });
        assert_eq!(
            by,
            Some((Some("dana".into()), Some("upstream fixed".into())))
        );
        world.shutdown().await.unwrap();
    }

    /// No world is running on a hybrid directory: the reopening is recorded, and the next
    /// world to open it drives the run; a completed run is refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_next_world_drives_a_run_retried_while_none_ran() {
        let dir = tempfile::tempdir().unwrap();
        let flow = Flow::new();
        let id = {
            let world = World::new(config(dir.path(), Persistence::Hybrid)).unwrap();
            flow.register(&world);
            world.start().await.unwrap();
            let id = failed_run(&world).await;
            world.shutdown().await.unwrap();
            id
        };
        let path = dir.path().to_path_buf();
        let run_id = id.clone();
        let text = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            reopen(
                &args(&path, &run_id, false),
                ReopenRequest::retry(),
                &mut out,
            )
            .unwrap();
            String::from_utf8(out).unwrap()
        })
        .await
        .unwrap();
        assert!(
            text.contains("attempt 2 runs again from command #1"),
            "{text}"
        );
        assert!(text.contains("not replayed here"), "{text}");

        flow.broken.store(false, Ordering::SeqCst);
        let world = World::new(config(dir.path(), Persistence::Hybrid)).unwrap();
        flow.register(&world);
        world.start().await.unwrap();
        let state = ended(&world, &id).await;
        assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
        assert_eq!(flow.counts(), (1, 2));
        world.shutdown().await.unwrap();
        drop(world);

        let path = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            let err = reopen(
                &args(&path, &id, false),
                ReopenRequest::retry(),
                &mut Vec::new(),
            )
            .unwrap_err();
            assert!(format!("{err:#}").contains("is completed"), "{err:#}");
        })
        .await
        .unwrap();
    }

    /// A bulk retry from the command line over a hybrid directory no world holds: the
    /// command drives the operation, and the next world with the workflow drives the runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bulk_retry_from_the_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let flow = Flow::new();
        let nap = workflow("cli-nap", |ctx: WorkflowContext, _: ()| async move {
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(())
        });
        let (ids, sleeper) = {
            let world = World::new(config(dir.path(), Persistence::Hybrid)).unwrap();
            flow.register(&world);
            world.register(&nap).unwrap();
            world.start().await.unwrap();
            let mut ids = Vec::new();
            for _ in 0..3 {
                ids.push(failed_run(&world).await);
            }
            // A run in flight the command's world must leave alone (it does not have its
            // workflow; the directory may be opened in hybrid mode, where a started world
            // takes up every unfinished run unless it is pinned).
            let sleeper = world
                .execute(&nap, (), WorkflowOptions::default())
                .await
                .unwrap()
                .id;
            tokio::time::timeout(Duration::from_secs(10), async {
                while world.query(&sleeper).await.unwrap().status != RunStatus::Running {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .unwrap();
            world.shutdown().await.unwrap();
            (ids, sleeper)
        };
        let path = dir.path().to_path_buf();
        let printed = tokio::task::spawn_blocking(move || {
            let args = BulkArgs {
                action: crate::cli::BulkActionArg::Retry,
                statuses: vec![RunStatus::Failed],
                name: Some("cli-reopen".into()),
                workflow_id_prefix: None,
                code_version: None,
                quarantined: false,
                operation: Some("nightly-retry".into()),
                reason: Some("upstream fixed".into()),
                by: Some("dana".into()),
                world: crate::target::WorldArgs::dir(&path),
                json: false,
            };
            let mut out = Vec::new();
            bulk(&args, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        })
        .await
        .unwrap();
        assert!(
            printed.contains("3 run(s) matched, 3 acted on, 0 left as they were, 0 refused"),
            "{printed}"
        );
        flow.broken.store(false, Ordering::SeqCst);
        let world = World::new(config(dir.path(), Persistence::Hybrid)).unwrap();
        flow.register(&world);
        world.register(&nap).unwrap();
        world.start().await.unwrap();
        for id in &ids {
            let state = ended_after(&world, id, 1).await;
            assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
        }
        assert_eq!(flow.counts(), (3, 6));
        let state = world.query(&sleeper).await.unwrap();
        assert_eq!(
            state.status,
            RunStatus::Running,
            "still sleeping, not failed by the command: {:?}",
            state.error
        );
        world.shutdown().await.unwrap();
    }

    /// The command's world is pinned to a code version of its own, so that starting it (for
    /// `runs bulk`) takes up no run but its operations, on a directory of one process too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_commands_world_is_pinned_to_a_version_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        {
            let world = World::new(config(dir.path(), Persistence::Hybrid)).unwrap();
            world.start().await.unwrap();
            world.shutdown().await.unwrap();
        }
        let path = dir.path().to_path_buf();
        let pinned = tokio::task::spawn_blocking(move || {
            crate::target::dir::with_world(&path, "", async |world: &World| {
                let config = world.config();
                Ok((config.pin_code_version, config.code_version.clone()))
            })
        })
        .await
        .unwrap()
        .unwrap();
        assert!(pinned.0, "pinned");
        assert!(pinned.1.unwrap().starts_with("worlds-cli-"));
    }
}
