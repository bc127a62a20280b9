//! `worlds runs list` and `worlds doctor` (`worlds runs show` is in `show.rs`).
//!
//! Both only read: a directory is opened read-only (safe while a world runs on it), a
//! PostgreSQL world through a store that joins no world (see [`crate::target`]). The
//! `format_*` functions turn loaded data into text; the command functions load and write it to
//! `out`.

use std::io::Write;

use comfy_table::{presets, Table};
use worlds_engine::WorkflowState;

use crate::cli::{DoctorArgs, ListArgs};
use crate::escape::escaped;
use crate::target::{RunQuery, Target};
use crate::text::{duration, elapsed, plain, reveal, shorten, timestamp};

/// Longest error message shown in the list table.
const SHORT_ERROR: usize = 60;

/// `worlds runs list`.
pub(crate) fn list(args: &ListArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let target = Target::open(&args.world)?;
    let query = RunQuery {
        statuses: args.statuses.clone(),
        name: args.name.clone(),
        code_version: args.code_version.clone(),
        oldest_first: args.oldest_first,
        limit: args.limit,
        data: args.json,
    };
    let (runs, more) = target.list_runs(&query)?;
    if runs.is_empty() {
        let filtered = !args.statuses.is_empty() || args.name.is_some();
        if let Some(hint) = target.no_runs(filtered) {
            // On stderr: a script reading stdout sees no runs, a person sees why.
            eprintln!("{hint}");
            return Ok(());
        }
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

/// `worlds doctor`: fails (non-zero exit) if the store cannot be loaded or the world has a
/// problem.
pub(crate) fn doctor(args: &DoctorArgs, out: &mut impl Write) -> anyhow::Result<()> {
    Target::local(&args.world).doctor(args.lease_duration, out)
}

/// One JSON object per run and line.
pub(crate) fn format_runs_json(runs: &[WorkflowState]) -> anyhow::Result<String> {
    let mut text = String::new();
    let reveal = reveal();
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
    let reveal = reveal();
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

    use std::collections::BTreeMap;
    use std::path::Path;
    use std::time::Duration;

    use worlds_engine::store::{FileStore, RunStore};
    use worlds_engine::RunStatus;

    use super::*;
    use crate::cli::ShowArgs;
    use crate::show::{details, show};
    use crate::target::{LocalArgs, WorldArgs};

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
            world: WorldArgs::dir(&dir),
            statuses: Vec::new(),
            name: None,
            code_version: None,
            limit: 100,
            oldest_first: false,
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
            id: Some("wf-done".to_owned()),
            archive: None,
            world: WorldArgs::dir(&f.dir()),
            json: false,
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
            id: Some("nope".to_owned()),
            archive: None,
            ..args
        };
        let err = show(&missing, &mut Vec::new()).unwrap_err();
        assert!(format!("{err:#}").contains("not found"), "{err:#}");
    }

    #[test]
    fn failed_runs_show_their_error_and_compensations_their_id() {
        let (f, [_, failed, _]) = populate();
        let args = ShowArgs {
            id: Some(failed),
            archive: None,
            world: WorldArgs::dir(&f.dir()),
            json: false,
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

    fn doctor_output(dir: PathBuf) -> (anyhow::Result<()>, String) {
        let mut out = Vec::new();
        let result = doctor(
            &DoctorArgs {
                world: LocalArgs::dir(&dir),
                lease_duration: None,
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
}
