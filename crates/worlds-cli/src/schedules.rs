//! `worlds schedules list|pause|resume|delete`: the schedules kept in a world's directory.
//!
//! Listing reads `schedules/` through [`FileStore::open_read_only`](worlds_engine::store::FileStore::open_read_only), which writes nothing, so it
//! works while a world runs. Changes open the directory like `worlds runs cancel` does: in file
//! mode alongside running worlds (they read schedules from disk at every poll), in hybrid mode
//! only when no world holds it. With `--database-url` they work on a PostgreSQL world the same
//! way, as normal writes while its members run.

use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};

use comfy_table::{presets, Table};
use worlds_engine::clock::Millis;
use worlds_engine::schedule::ScheduleConfig;

use crate::cli::{ScheduleIdArgs, SchedulesListArgs};
use crate::escape::escaped;
use crate::target::ScheduleAction as Action;
use crate::target::Target;

/// `worlds schedules list`.
pub(crate) fn list(args: &SchedulesListArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let schedules = Target::open(&args.world)?.schedules()?;
    if args.json {
        for schedule in &schedules {
            writeln!(out, "{}", serde_json::to_string(schedule)?)?;
        }
    } else {
        writeln!(out, "{}", format_table(&schedules))?;
    }
    Ok(())
}

/// `worlds schedules pause|resume|delete`.
pub(crate) fn change(
    args: &ScheduleIdArgs,
    action: Action,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let changed = Target::open(&args.world)?.change_schedule(&args.id, action)?;
    match (changed, args.json) {
        (Some(schedule), true) => writeln!(out, "{}", serde_json::to_string(&schedule)?)?,
        (Some(schedule), false) => writeln!(
            out,
            "schedule {} is {}; next: {}",
            escaped(&schedule.id),
            if schedule.paused { "paused" } else { "active" },
            next_text(&schedule)
        )?,
        (None, true) => writeln!(
            out,
            "{}",
            serde_json::json!({ "id": args.id, "deleted": true })
        )?,
        (None, false) => writeln!(out, "schedule {} is deleted", escaped(&args.id))?,
    }
    Ok(())
}

/// The schedules as a table for people.
pub(crate) fn format_table(schedules: &[ScheduleConfig]) -> String {
    let mut table = Table::new();
    table.load_style(presets::NOTHING).set_header([
        "ID",
        "WORKFLOW",
        "WHEN",
        "STATE",
        "NEXT (UTC)",
        "LAST (UTC)",
        "RUNS",
    ]);
    for s in schedules {
        table.add_row([
            escaped(&s.id).to_string(),
            escaped(&s.workflow_name).to_string(),
            escaped(&when_text(s)).to_string(),
            state_text(s),
            next_text(s),
            s.last_execution
                .map(timestamp)
                .unwrap_or_else(|| "-".into()),
            s.total_executions.to_string(),
        ]);
    }
    if schedules.is_empty() {
        return "no schedules".to_owned();
    }
    table
        .lines()
        .map(|line| line.trim_end().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

fn when_text(s: &ScheduleConfig) -> String {
    match (&s.cron_expression, &s.time_zone) {
        (Some(cron), Some(zone)) => format!("{cron} ({zone})"),
        (Some(cron), None) => format!("{cron} (UTC)"),
        (None, _) => "once".to_owned(),
    }
}

fn state_text(s: &ScheduleConfig) -> String {
    let mut state = if s.paused { "paused" } else { "active" }.to_owned();
    if !s.pending_firings.is_empty() {
        state.push_str(&format!(", {} starting", s.pending_firings.len()));
    }
    if s.last_error.is_some() {
        state.push_str(", error");
    }
    state
}

fn next_text(s: &ScheduleConfig) -> String {
    match s.next_execution {
        Some(_) if s.paused => "- (paused)".to_owned(),
        Some(at) => timestamp(at),
        None => "-".to_owned(),
    }
}

fn timestamp(at: Millis) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(at.max(0) as u64);
    humantime::format_rfc3339_seconds(time).to_string()
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use serde_json::json;
    use worlds_engine::clock::SystemClock;
    use worlds_engine::prelude::*;
    use worlds_engine::schedule::Schedule;

    use super::*;

    fn report() -> Workflow<serde_json::Value, ()> {
        workflow(
            "cli-report",
            |_ctx: WorkflowContext, _: serde_json::Value| async move { Ok::<_, WorkflowError>(()) },
        )
    }

    fn config(dir: &Path, persistence: Persistence) -> WorldConfig {
        let mut config = WorldConfig::default();
        config.persistence = persistence;
        config.persistence_path = dir.to_path_buf();
        config.shared_poll_interval = Duration::from_millis(20).into();
        config
    }

    fn id_args(dir: &Path, id: &str, json: bool) -> ScheduleIdArgs {
        ScheduleIdArgs {
            id: id.to_owned(),
            world: crate::target::WorldArgs::dir(dir),
            json,
        }
    }

    fn list_args(dir: &Path, json: bool) -> SchedulesListArgs {
        SchedulesListArgs {
            world: crate::target::WorldArgs::dir(dir),
            json,
        }
    }

    /// Runs a CLI function off the async runtime, as the binary would, and returns its output.
    async fn cli(f: impl FnOnce(&mut Vec<u8>) -> anyhow::Result<()> + Send + 'static) -> String {
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            f(&mut out).unwrap();
            String::from_utf8(out).unwrap()
        })
        .await
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lists_and_changes_schedules_while_a_file_world_runs() {
        let dir = tempfile::tempdir().unwrap();
        let world = World::with_clock(config(dir.path(), Persistence::File), Arc::new(SystemClock))
            .unwrap();
        world.register(report()).unwrap();
        world.start().await.unwrap();
        world
            .schedules()
            .cron("daily-job", "cli-report", json!({}), "0 9 * * *")
            .await
            .unwrap();
        world
            .schedules()
            .add(Schedule::cron("paris", "cli-report", "30 7 * * 1-5").time_zone("Europe/Paris"))
            .await
            .unwrap();

        let path = dir.path().to_path_buf();
        let table = cli(move |out| list(&list_args(&path, false), out)).await;
        assert!(table.trim_start().starts_with("ID"), "{table}");
        assert!(table.contains("daily-job"), "{table}");
        assert!(table.contains("0 9 * * * (UTC)"), "{table}");
        assert!(table.contains("30 7 * * 1-5 (Europe/Paris)"), "{table}");

        let path = dir.path().to_path_buf();
        let printed =
            cli(move |out| change(&id_args(&path, "daily-job", true), Action::Pause, out)).await;
        let paused: serde_json::Value = serde_json::from_str(printed.trim()).unwrap();
        assert_eq!(paused["paused"], true);
        assert!(world.schedules().get("daily-job").await.unwrap().paused);

        let path = dir.path().to_path_buf();
        let text =
            cli(move |out| change(&id_args(&path, "daily-job", false), Action::Resume, out)).await;
        assert!(text.contains("schedule daily-job is active"), "{text}");

        let path = dir.path().to_path_buf();
        cli(move |out| change(&id_args(&path, "paris", false), Action::Delete, out)).await;
        let path = dir.path().to_path_buf();
        let lines = cli(move |out| list(&list_args(&path, true), out)).await;
        let ids: Vec<String> = lines
            .lines()
            .map(|l| serde_json::from_str::<ScheduleConfig>(l).unwrap().id)
            .collect();
        assert_eq!(ids, ["daily-job"]);
        assert_eq!(world.schedules().list().await.unwrap().len(), 1);

        let path = dir.path().to_path_buf();
        let err = tokio::task::spawn_blocking(move || {
            change(
                &id_args(&path, "nope", false),
                Action::Pause,
                &mut Vec::new(),
            )
            .unwrap_err()
        })
        .await
        .unwrap();
        assert!(
            err.to_string().contains("schedule not found: nope"),
            "{err}"
        );
        world.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_running_hybrid_world_is_reported_not_written_but_can_be_listed() {
        let dir = tempfile::tempdir().unwrap();
        let world = World::new(config(dir.path(), Persistence::Hybrid)).unwrap();
        world.register(report()).unwrap();
        world.start().await.unwrap();
        world
            .schedules()
            .cron("daily-job", "cli-report", json!({}), "0 9 * * *")
            .await
            .unwrap();
        let path = dir.path().to_path_buf();
        let err = tokio::task::spawn_blocking(move || {
            change(
                &id_args(&path, "daily-job", false),
                Action::Pause,
                &mut Vec::new(),
            )
            .unwrap_err()
        })
        .await
        .unwrap();
        assert!(err.to_string().contains("hybrid mode"), "{err}");
        assert!(
            err.to_string().contains("world.schedules().pause(..)"),
            "{err}"
        );
        assert!(!world.schedules().get("daily-job").await.unwrap().paused);

        let path = dir.path().to_path_buf();
        let table = cli(move |out| list(&list_args(&path, false), out)).await;
        assert!(table.contains("daily-job"), "{table}");
        world.shutdown().await.unwrap();
    }

    #[test]
    fn an_empty_directory_lists_no_schedules() {
        assert_eq!(format_table(&[]), "no schedules");
    }
}
