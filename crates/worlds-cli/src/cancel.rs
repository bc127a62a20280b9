//! `worlds runs cancel`: cancels a run in a world's directory, whether or not a world is
//! running on it.
//!
//! In file mode the directory may be shared: the command joins it like any other process,
//! records the cancellation (and that of the run's unfinished children) under the run's log
//! lock, and leaves a note for the process driving the run, which stops its steps within its
//! poll interval. A directory held by a running hybrid world cannot be written from outside;
//! the command says so. A hybrid directory no world holds is opened in hybrid mode, so the
//! write-ahead log is read and folded in before anything is written.
//!
//! On PostgreSQL (`--database-url`) a cancellation is a normal write while members run the
//! world: the member driving the run sees it and stops the run's steps.

use std::io::Write;

use crate::cli::CancelArgs;
use crate::escape::escaped;
use crate::target::Target;

/// Runs `worlds runs cancel`.
pub(crate) fn cancel(args: &CancelArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let reason = args
        .reason
        .clone()
        .unwrap_or_else(|| "cancelled with `worlds runs cancel`".to_owned());
    let state = Target::open(&args.world)?.cancel(&args.id, &reason)?;
    report(args, &state, out)
}

/// What `worlds runs cancel` says of the cancelled run.
fn report(
    args: &CancelArgs,
    state: &worlds_engine::WorkflowState,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    if args.json {
        let summary = serde_json::json!({
            "run_id": state.id,
            "workflow_id": state.workflow_id,
            "workflow": state.name,
            "status": state.status,
        });
        writeln!(out, "{summary}")?;
    } else {
        writeln!(
            out,
            "run {} ({}, workflow id {}) is {}",
            escaped(&state.id),
            escaped(&state.name),
            escaped(&state.workflow_id),
            state.status
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use worlds_engine::clock::SystemClock;
    use worlds_engine::prelude::*;

    use std::path::Path;

    use worlds_engine::ErrorKind;

    use super::*;

    fn sleeper() -> Workflow<(), ()> {
        workflow("cli-sleeper", |ctx: WorkflowContext, _: ()| async move {
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(())
        })
    }

    fn args(dir: &Path, id: &str, json: bool) -> CancelArgs {
        CancelArgs {
            id: id.to_owned(),
            world: crate::target::WorldArgs::dir(dir),
            reason: None,
            json,
        }
    }

    fn file_config(dir: &Path) -> WorldConfig {
        let mut config = WorldConfig::default();
        config.persistence = Persistence::File;
        config.persistence_path = dir.to_path_buf();
        config.shared_poll_interval = Duration::from_millis(20).into();
        config
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancels_a_run_a_running_file_world_drives() {
        let dir = tempfile::tempdir().unwrap();
        let world = World::with_clock(file_config(dir.path()), Arc::new(SystemClock)).unwrap();
        world.register(sleeper()).unwrap();
        world.start().await.unwrap();
        let run = world
            .execute_by_name::<(), ()>(
                "cli-sleeper",
                (),
                WorkflowOptions::new().workflow_id("nap-1"),
            )
            .await
            .unwrap();

        let path = dir.path().to_path_buf();
        let printed = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            cancel(&args(&path, "nap-1", true), &mut out).unwrap();
            String::from_utf8(out).unwrap()
        })
        .await
        .unwrap();
        let summary: serde_json::Value = serde_json::from_str(printed.trim()).unwrap();
        assert_eq!(summary["status"], "cancelled");
        assert_eq!(summary["workflow_id"], "nap-1");

        // The world driving the run hears of it.
        let err = tokio::time::timeout(Duration::from_secs(10), run.result())
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::RunCancelled);
        world.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancels_with_no_world_running_and_reports_unknown_and_finished_runs() {
        let dir = tempfile::tempdir().unwrap();
        let run_id = {
            let world = World::new(file_config(dir.path())).unwrap();
            world.register(sleeper()).unwrap();
            world.start().await.unwrap();
            let run = world
                .execute_by_name::<(), ()>("cli-sleeper", (), WorkflowOptions::default())
                .await
                .unwrap();
            let id = run.id.clone();
            world.shutdown().await.unwrap();
            id
        };
        let path = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            cancel(&args(&path, &run_id, false), &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains("is cancelled"), "{text}");

            let err = cancel(&args(&path, "no-such-run", false), &mut Vec::new()).unwrap_err();
            assert!(err.to_string().contains("no-such-run"), "{err}");

            // Cancelling again is fine; the run stays cancelled.
            cancel(&args(&path, &run_id, false), &mut Vec::new()).unwrap();
        })
        .await
        .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_running_hybrid_world_is_reported_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = WorldConfig::default();
        config.persistence = Persistence::Hybrid;
        config.persistence_path = dir.path().to_path_buf();
        let world = World::new(config).unwrap();
        world.register(sleeper()).unwrap();
        world.start().await.unwrap();
        let run = world
            .execute_by_name::<(), ()>("cli-sleeper", (), WorkflowOptions::default())
            .await
            .unwrap();
        let path = dir.path().to_path_buf();
        let id = run.id.clone();
        let err = tokio::task::spawn_blocking(move || {
            cancel(&args(&path, &id, false), &mut Vec::new()).unwrap_err()
        })
        .await
        .unwrap();
        assert!(err.to_string().contains("hybrid mode"), "{err}");
        // Untouched: still in flight (pending or running, depending on how far it got).
        assert!(!run.query().await.unwrap().status.is_terminal());
        world.shutdown().await.unwrap();
    }
}
