//! `worlds runs show`: one run, its header and the timeline of its history.
//!
//! Like the other read commands it opens the store read-only.

use std::collections::BTreeMap;
use std::io::Write;

use comfy_table::{presets, Table};
use worlds_engine::clock::Millis;
use worlds_engine::store::RunStore;
use worlds_engine::{Event, EventKind, ResolveData, RunStatus, WorkflowState};

use crate::cli::ShowArgs;
use crate::escape::escaped;
use crate::inspect::{duration, elapsed, offset, open, plain, report_warnings, timestamp};

/// `worlds runs show`.
pub(crate) fn show(args: &ShowArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let store = open(&args.dir)?;
    report_warnings(&store);
    let mut state = futures::executor::block_on(store.get_run(&args.id, ResolveData::All))?;
    let history = futures::executor::block_on(store.history(&state.id, 0))?;
    if args.json {
        state.history = history.iter().map(|e| (**e).clone()).collect();
        serde_json::to_writer_pretty(&mut *out, &state)?;
        writeln!(out)?;
    } else {
        let history: Vec<&Event> = history.iter().map(|e| &**e).collect();
        out.write_all(format_run(&state, &history).as_bytes())?;
    }
    Ok(())
}

/// A run's header and the timeline of its history.
pub(crate) fn format_run(state: &WorkflowState, history: &[&Event]) -> String {
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
    line("created", timestamp(state.created_at));
    if let Some(at) = state.started_at {
        line("started", timestamp(at));
    }
    if let Some(at) = state.completed_at {
        // Labelled with how the run ended: a cancelled or failed run did not complete.
        line(
            &state.status.to_string(),
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
        table.add_row([
            event.seq.to_string(),
            offset(elapsed(start, event.timestamp)),
            event.kind.type_name().to_owned(),
            position,
            escaped(&details(&event.kind, &names, start)).to_string(),
        ]);
    }
    text.push_str(&format!(
        "\nhistory ({} events)\n{}\n",
        history.len(),
        plain(&table)
    ));
    text
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
            "{}attempt {attempt}{}: {}",
            step(position),
            if *retrying { " (retrying)" } else { "" },
            error.message
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
        EventKind::ChildWorkflowStarted { child_id, name, .. } => format!("{name:?} {child_id}"),
        EventKind::ChildWorkflowCompleted { child_id, .. } => child_id.clone(),
        EventKind::ChildWorkflowFailed {
            child_id, error, ..
        } => format!("{child_id}: {}", error.message),
        EventKind::ValueRecorded { kind, .. } => format!("{kind:?}").to_lowercase(),
        _ => String::new(),
    }
}
