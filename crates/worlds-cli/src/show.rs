//! `worlds runs show`: what happened to one run and what it waits for, on one screen.
//!
//! The header gives the run's status, input, and output or error; a table gives each step's
//! status and attempts; an unfinished run says what it waits on now (a timer, a hook, a step
//! running or waiting for its retry, a child run, a workflow retry); the timeline marks where
//! the run was resumed after a restart or a takeover. Like the other read commands it opens
//! the store read-only.

use std::collections::BTreeMap;
use std::io::Write;

use comfy_table::{presets, Table};
use worlds_engine::clock::Millis;
use worlds_engine::error::codes;
use worlds_engine::model::ActivityStatus;
use worlds_engine::{Event, EventKind, Payload, RunStatus, WorkflowState};

use crate::cli::ShowArgs;
use crate::escape::escaped;
use crate::target::{Shown, Target};
use crate::text::{duration, elapsed, now_ms, offset, plain, reveal, shorten, timestamp};

/// Longest input, output or error shown in the header.
const SHORT_VALUE: usize = 200;

/// `worlds runs show`.
pub(crate) fn show(args: &ShowArgs, out: &mut impl Write) -> anyhow::Result<()> {
    if let Some(archive) = &args.archive {
        return show_archived(archive, args.id.as_deref(), args.json, out);
    }
    let id = args
        .id
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("say which run: `worlds runs show ID`"))?;
    let Shown {
        mut state,
        mut history,
        children,
        driver,
        pauses,
    } = Target::open(&args.world)?.show_run(id)?;
    let reveal = reveal();
    reveal.state(&mut state);
    for event in &mut history {
        reveal.event(event);
    }
    if args.json {
        state.history = history;
        serde_json::to_writer_pretty(&mut *out, &state)?;
        writeln!(out)?;
        return Ok(());
    }
    let history: Vec<&Event> = history.iter().collect();
    let context = Context {
        driver,
        children,
        now: now_ms(),
        pauses,
    };
    out.write_all(format_run(&state, &history, &context).as_bytes())?;
    Ok(())
}

/// `worlds runs show --archive FILE [ID]`: one archived run as `runs show` shows a run, or the
/// archive's runs as a table.
pub(crate) fn show_archived(
    path: &std::path::Path,
    id: Option<&str>,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let keys = worlds_engine::EncryptionKeys::from_env()?;
    let contents = worlds_engine::store::archive::read_archive(path, keys.as_ref())?;
    for warning in &contents.warnings {
        eprintln!("warning: {}", escaped(warning));
    }
    let Some(id) = id else {
        if json {
            for run in &contents.runs {
                writeln!(out, "{}", serde_json::to_string(run)?)?;
            }
        } else {
            out.write_all(archived_table(&contents.runs).as_bytes())?;
        }
        return Ok(());
    };
    let Some(state) = contents
        .runs
        .iter()
        .find(|run| run.id == id)
        .or_else(|| contents.runs.iter().find(|run| run.workflow_id == id))
    else {
        anyhow::bail!(
            "no run {} in the archive {} (`worlds runs show --archive {}` lists its runs)",
            escaped(id),
            path.display(),
            path.display()
        );
    };
    if json {
        serde_json::to_writer_pretty(&mut *out, state)?;
        writeln!(out)?;
        return Ok(());
    }
    let history: Vec<&worlds_engine::Event> = state.history.iter().collect();
    let context = Context {
        driver: None,
        children: Vec::new(),
        now: crate::text::now_ms(),
        pauses: Vec::new(),
    };
    writeln!(out, "archived in {}", path.display())?;
    out.write_all(format_run(state, &history, &context).as_bytes())?;
    Ok(())
}

/// The runs of an archive, one line each.
fn archived_table(runs: &[WorkflowState]) -> String {
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::NOTHING).set_header([
        "RUN ID",
        "WORKFLOW ID",
        "NAME",
        "STATUS",
        "ENDED (UTC)",
        "EVENTS",
    ]);
    for run in runs {
        table.add_row([
            escaped(&run.id).to_string(),
            escaped(&run.workflow_id).to_string(),
            escaped(&run.name).to_string(),
            run.status.to_string(),
            run.completed_at.map(timestamp).unwrap_or_default(),
            run.history.len().to_string(),
        ]);
    }
    plain(&table)
}

/// What `runs show` knows about a run beyond its state and history.
#[derive(Debug, Default)]
pub(crate) struct Context {
    /// The process driving the run, from its lease (file mode), as `process PID`.
    pub(crate) driver: Option<String>,
    /// The run's children and their status.
    pub(crate) children: Vec<(String, RunStatus)>,
    /// The current time, for "in 5m".
    pub(crate) now: Millis,
    /// The pauses in force (none for an archived run).
    pub(crate) pauses: Vec<worlds_engine::model::Pause>,
}

/// A run's header, its steps, what it waits on, and the timeline of its history.
pub(crate) fn format_run(state: &WorkflowState, history: &[&Event], context: &Context) -> String {
    let mut text = String::new();
    let mut line =
        |label: &str, value: String| text.push_str(&format!("{label:<12}{}\n", escaped(&value)));
    line("name", state.name.clone());
    line("status", state.status.to_string());
    line("run id", state.id.clone());
    line("workflow id", state.workflow_id.clone());
    if let Some(parent) = &state.parent_id {
        line("parent", parent.clone());
    }
    if let Some(version) = &state.code_version {
        line("code version", version.clone());
    }
    line("created", timestamp(state.created_at));
    if let Some(at) = state.started_at {
        line("started", timestamp(at));
    }
    if let Some(at) = state.completed_at {
        // Labelled with how the run ended: a cancelled or failed run did not complete.
        line(
            state.status.as_str(),
            format!(
                "{} (after {})",
                timestamp(at),
                duration(elapsed(state.created_at, at))
            ),
        );
    }
    line("attempt", state.attempt.to_string());
    if let Some(reason) = &state.quarantine {
        line("quarantine", reason.clone());
    }
    if let Some(input) = &state.input {
        line("input", payload(input));
    }
    if let Some(output) = &state.output {
        line("output", payload(output));
    }
    if let Some(error) = &state.error {
        let label = if state.status == RunStatus::Cancelled {
            "reason"
        } else {
            "error"
        };
        let code = error
            .code
            .as_ref()
            .map(|c| format!(" [{c}]"))
            .unwrap_or_default();
        line(label, format!("{}{code}", error.message));
    }
    let resumed = worlds_engine::model::resumptions(history);
    if let Some(last) = resumed.last() {
        line(
            "resumed",
            format!(
                "{} time(s) after a restart or takeover, last at {}; marked << in the history",
                resumed.len(),
                timestamp(last.at)
            ),
        );
    }
    let late: BTreeMap<u64, worlds_engine::model::LateTimer> =
        worlds_engine::model::late_timers(history)
            .into_iter()
            .map(|timer| (timer.seq, timer))
            .collect();
    if !state.status.is_terminal() {
        let waits = waiting_on(state, history, context);
        let mut label = "waiting on";
        for wait in waits {
            line(label, wait);
            label = "";
        }
        // Waits that look stuck rather than slow, as the engine judges them.
        for wait in worlds_engine::model::waits_paused(state, history, context.now, &context.pauses)
        {
            if let Some(concern) = wait.concern {
                line("concern", concern);
            }
        }
    }

    if !state.activities.is_empty() {
        text.push_str(&format!(
            "\nsteps ({})\n{}\n",
            state.activities.len(),
            steps_table(state, history)
        ));
    }

    let start = history.first().map_or(0, |e| e.timestamp);
    let mut names: BTreeMap<u32, &str> = BTreeMap::new();
    let mut table = Table::new();
    table
        .load_style(presets::NOTHING)
        .set_header(["SEQ", "TIME", "EVENT", "POS", "DETAILS"]);
    for event in history {
        if let EventKind::ActivityScheduled { position, name, .. } = &event.kind {
            names.insert(*position, name);
        }
        let position = event
            .kind
            .position()
            .map(|p| p.to_string())
            .unwrap_or_default();
        let mut detail = details(&event.kind, &names, start);
        if let Some(timer) = late.get(&event.seq) {
            detail = late_timer(timer);
        }
        if let Some(resumption) = resumed.iter().find(|r| r.seq == event.seq) {
            let stop = format!(
                "<< resumed after a restart or takeover, {} after the event before",
                rounded(elapsed(resumption.last_before, resumption.at))
            );
            detail = if detail.is_empty() {
                stop
            } else {
                format!("{stop}: {detail}")
            };
        }
        table.add_row([
            event.seq.to_string(),
            offset(elapsed(start, event.timestamp)),
            event.kind.type_name().to_owned(),
            position,
            escaped(&detail).to_string(),
        ]);
    }
    text.push_str(&format!(
        "\nhistory ({} events)\n{}\n",
        history.len(),
        plain(&table)
    ));
    text
}

/// A payload as compact JSON, cut to [`SHORT_VALUE`] characters.
fn payload(value: &Payload) -> String {
    shorten(value.as_json(), SHORT_VALUE)
}

/// What a late timer's `timer_fired` row says: how late, and why when the history tells.
fn late_timer(timer: &worlds_engine::model::LateTimer) -> String {
    let late = rounded(timer.late_ms.max(0) as u64);
    if timer.world_stopped {
        format!("fired {late} late: the world was not running when it was due")
    } else {
        format!("fired {late} late")
    }
}

/// A span to read at a glance: whole seconds from a minute on.
fn rounded(ms: u64) -> String {
    if ms >= 60_000 {
        duration(ms / 1_000 * 1_000)
    } else {
        duration(ms)
    }
}

/// Each step: position, name, status, attempts (with those lost to a stopped process), and its
/// last error.
fn steps_table(state: &WorkflowState, history: &[&Event]) -> String {
    let mut lost: BTreeMap<u32, u32> = BTreeMap::new();
    for event in history {
        if let EventKind::ActivityFailed {
            position, error, ..
        } = &event.kind
        {
            if error.code.as_deref() == Some(codes::WORKER_LOST) {
                *lost.entry(*position).or_default() += 1;
            }
        }
    }
    let mut table = Table::new();
    table.load_style(presets::NOTHING).set_header([
        "POS",
        "STEP",
        "STATUS",
        "ATTEMPTS",
        "LAST ERROR",
    ]);
    for step in &state.activities {
        let attempts = match lost.get(&step.position) {
            Some(n) => format!("{} ({n} lost)", step.attempt),
            None => step.attempt.to_string(),
        };
        let error = step
            .error
            .as_ref()
            .map(|e| shorten(&e.message, 60))
            .unwrap_or_default();
        table.add_row([
            step.position.to_string(),
            escaped(&step.name).to_string(),
            activity_status(step.status).to_owned(),
            attempts,
            escaped(&error).to_string(),
        ]);
    }
    plain(&table)
}

fn activity_status(status: ActivityStatus) -> &'static str {
    match status {
        ActivityStatus::Scheduled => "queued",
        ActivityStatus::Running => "running",
        ActivityStatus::Retrying => "retrying",
        ActivityStatus::Completed => "completed",
        ActivityStatus::Failed => "failed",
    }
}

/// What an unfinished run waits on now, one item per line: the engine's reading of the run
/// (`worlds_engine::model::waits`), with what the CLI knows besides (the process driving it,
/// its children's status).
pub(crate) fn waiting_on(
    state: &WorkflowState,
    history: &[&Event],
    context: &Context,
) -> Vec<String> {
    use worlds_engine::model::WaitOn;
    let now = context.now;
    let when = |at: Millis| {
        if at >= now {
            format!("{} (in {})", timestamp(at), duration(elapsed(now, at)))
        } else {
            format!("{} (due {} ago)", timestamp(at), duration(elapsed(at, now)))
        }
    };
    let since = |at: Millis| format!("{} ({} ago)", timestamp(at), duration(elapsed(at, now)));
    let step = |name: &str, position: u32| format!("step {name:?} (position {position})");
    let mut waits = Vec::new();
    for wait in worlds_engine::model::waits_paused(state, history, now, &context.pauses) {
        waits.push(match wait.on {
            WaitOn::Start => "a worker to start it".to_owned(),
            WaitOn::WorkflowRetry { attempt } => match wait.due {
                Some(at) => format!("workflow attempt {attempt} at {}", when(at)),
                None => format!("workflow attempt {attempt}"),
            },
            WaitOn::StepQueued { name, position } => format!(
                "{}: queued for a worker since {}",
                step(&name, position),
                since(wait.since)
            ),
            WaitOn::StepRunning {
                name,
                position,
                attempt,
                last_heartbeat,
            } => {
                let mut text = format!(
                    "{}: attempt {attempt} running since {}",
                    step(&name, position),
                    since(wait.since)
                );
                if let Some(driver) = &context.driver {
                    text.push_str(&format!(" in {driver}"));
                }
                if let Some(at) = last_heartbeat {
                    text.push_str(&format!(", last heartbeat {}", since(at)));
                }
                text
            }
            WaitOn::StepRetry {
                name,
                position,
                attempt,
            } => match wait.due {
                Some(at) => format!(
                    "{}: attempt {attempt} at {}",
                    step(&name, position),
                    when(at)
                ),
                None => format!(
                    "{}: attempt {attempt} after its retry delay",
                    step(&name, position)
                ),
            },
            WaitOn::Timer { position } => format!(
                "a timer (position {position}) until {}",
                wait.due.map(when).unwrap_or_default()
            ),
            WaitOn::Hook {
                hook_id,
                position,
                webhook,
            } => {
                let kind = if webhook { "webhook" } else { "hook" };
                let mut text = format!(
                    "{kind} {hook_id} (position {position}) since {}",
                    since(wait.since)
                );
                if let Some(at) = wait.due {
                    text.push_str(&format!(", expires {}", when(at)));
                }
                text
            }
            WaitOn::Paused {
                target,
                by,
                reason,
                paused_since,
                step: held,
            } => {
                let what = match held {
                    Some((name, position)) => format!("{}: ", step(&name, position)),
                    None => "its start: ".to_owned(),
                };
                let mut text = format!(
                    "{what}{target} paused by {by:?} since {}",
                    since(paused_since)
                );
                if !reason.is_empty() {
                    text.push_str(&format!(" ({reason:?})"));
                }
                text
            }
            WaitOn::Child { run_id } => {
                match context.children.iter().find(|(child, _)| *child == run_id) {
                    Some((_, status)) if status.is_terminal() => continue,
                    Some((_, status)) => format!("child run {run_id} ({status})"),
                    None => format!("child run {run_id}"),
                }
            }
        });
    }
    if waits.is_empty() {
        waits.push(
            "its workflow code to take the next step (nothing recorded to wait on)".to_owned(),
        );
    } else if let Some(driver) = &context.driver {
        if !waits.iter().any(|w| w.contains(driver.as_str())) {
            waits.push(format!("driven by {driver}"));
        }
    }
    waits
}

/// What a timeline line says about an event beyond its type and position.
pub(crate) fn details(kind: &EventKind, names: &BTreeMap<u32, &str>, start: Millis) -> String {
    let step = |position: &u32| {
        names
            .get(position)
            .map(|n| format!("{n:?} "))
            .unwrap_or_default()
    };
    match kind {
        EventKind::WorkflowQueued(run) => format!("workflow {:?}", run.name),
        EventKind::WorkflowStarted { attempt, .. } => format!("attempt {attempt}"),
        EventKind::WorkflowRetry {
            attempt,
            delay_ms,
            error,
            ..
        } => format!(
            "attempt {attempt} in {}: {}",
            duration(*delay_ms),
            error.message
        ),
        EventKind::WorkflowFailed { error } => error.message.clone(),
        EventKind::WorkflowCancelled { reason } => reason.clone().unwrap_or_default(),
        EventKind::WorkflowQuarantined { reason } => reason.clone(),
        EventKind::RunReopened {
            action,
            attempt,
            kept_until,
            by,
            reason,
            ..
        } => format!(
            "{action} by {} as attempt {attempt}, from command #{kept_until}{}",
            by.as_deref().unwrap_or("?"),
            reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ),
        EventKind::CompensationAdded {
            compensation_id, ..
        }
        | EventKind::CompensationExecuted {
            compensation_id, ..
        } => compensation_id.clone(),
        EventKind::CompensationFailed {
            compensation_id,
            error,
            ..
        } => format!("{compensation_id}: {}", error.message),
        EventKind::ActivityScheduled { name, .. } => format!("{name:?}"),
        EventKind::ActivityStarted { position, attempt }
        | EventKind::ActivityCompleted {
            position, attempt, ..
        } => format!("{}attempt {attempt}", step(position)),
        EventKind::ActivityFailed {
            position,
            attempt,
            error,
            retrying,
        } => format!(
            "{}attempt {attempt}{}: {}{}",
            step(position),
            if *retrying { " (retrying)" } else { "" },
            error.message,
            error
                .code
                .as_deref()
                .filter(|c| *c == codes::WORKER_LOST)
                .map(|c| format!(" [{c}]"))
                .unwrap_or_default()
        ),
        EventKind::ActivityRetry {
            position,
            attempt,
            delay_ms,
        } => format!(
            "{}attempt {attempt} in {}",
            step(position),
            duration(*delay_ms)
        ),
        EventKind::ActivityHeartbeat {
            position,
            attempt,
            message,
        } => {
            let message = message
                .as_ref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            format!("{}attempt {attempt}{message}", step(position))
        }
        EventKind::TimerScheduled { fire_at, .. } => {
            format!("fires at {}", offset(elapsed(start, *fire_at)))
        }
        EventKind::HookCreated {
            hook_id,
            webhook,
            expires_at,
            ..
        } => {
            let kind = if *webhook { "webhook" } else { "hook" };
            match expires_at {
                Some(at) => format!(
                    "{kind} {hook_id}, expires at {}",
                    offset(elapsed(start, *at))
                ),
                None => format!("{kind} {hook_id}"),
            }
        }
        EventKind::HookReceived { hook_id, .. }
        | EventKind::HookExpired { hook_id, .. }
        | EventKind::HookDisposed { hook_id, .. }
        | EventKind::HookConflict { hook_id, .. } => hook_id.clone(),
        EventKind::ChildWorkflowStarted { child_id, name, .. } => format!("{name:?} {child_id}"),
        EventKind::ChildWorkflowCompleted { child_id, .. } => child_id.clone(),
        EventKind::ChildWorkflowFailed {
            child_id, error, ..
        } => format!("{child_id}: {}", error.message),
        EventKind::ValueRecorded { kind, .. } => format!("{kind:?}").to_lowercase(),
        _ => String::new(),
    }
}
