//! Reopening a failed run by hand — retry, reset, resume — as pure functions of its state and
//! history: what a reopening keeps ([`plan_reopen`]) and what replay of the attempt it starts
//! reads ([`attempt_view`]).
//!
//! An attempt numbers its commands from its first position. A reopening starts a new attempt,
//! numbered after every position used so far, and *carries over* the records the failed attempt
//! made at `kept_from..kept_until`, renumbered from the new attempt's first position. Replay of
//! the new attempt reads them as if they had been recorded there: the code gets the same results
//! back without running those steps again, and every command from `kept_until` on runs anew.
//! Nothing recorded is rewritten: the history keeps the failed attempt as it was, followed by
//! `run_reopened` and the new attempt.
//!
//! What each operation keeps:
//!
//! | operation | kept                                                                 |
//! |-----------|----------------------------------------------------------------------|
//! | retry     | everything before the last command that failed (a step's final failure, a child's failure, a hook that expired or conflicted); everything if the code failed by itself |
//! | reset     | everything before a chosen position of the failed attempt            |
//! | resume    | everything (quarantined runs only: the code was fixed)               |
//!
//! and never anything from the first command that has no result on: a step, timer, child or
//! hook still open when the run failed is issued again.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use crate::error::WorldError;

use super::{Event, EventKind, ReopenAction, RunStatus, WorkflowState};

/// What a reopening asks for, besides the run: which operation, and who asked and why.
///
/// ```
/// use worlds_engine::model::ReopenRequest;
///
/// let request = ReopenRequest::retry().by("alice").reason("the payment API key was rotated");
/// assert_eq!(request.by.as_deref(), Some("alice"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReopenRequest {
    /// Retry, reset or resume.
    pub action: ReopenAction,
    /// For a reset: the first command position to run again.
    pub position: Option<u32>,
    /// Who asked (recorded in the history).
    pub by: Option<String>,
    /// Why (recorded in the history).
    pub reason: Option<String>,
    /// The bulk operation this is part of: a run it already reopened is not reopened again.
    pub operation: Option<String>,
    /// Replay the new attempt against the registered code before recording anything (the
    /// default). Off only where the workflow's code is not at hand (the `worlds` tool): the
    /// process that drives the run replays it then, and quarantines it again if it diverges.
    pub replay_check: bool,
}

impl ReopenRequest {
    fn new(action: ReopenAction, position: Option<u32>) -> Self {
        ReopenRequest {
            action,
            position,
            by: None,
            reason: None,
            operation: None,
            replay_check: true,
        }
    }

    /// Run the failed part again, keeping every result recorded before it.
    pub fn retry() -> Self {
        Self::new(ReopenAction::Retry, None)
    }

    /// Run again from command `position` of the failed attempt, keeping what came before.
    pub fn reset(position: u32) -> Self {
        Self::new(ReopenAction::Reset, Some(position))
    }

    /// Let a quarantined run go on from where it stopped, under code that was fixed.
    pub fn resume() -> Self {
        Self::new(ReopenAction::Resume, None)
    }

    /// Records who asked.
    pub fn by(mut self, who: impl Into<String>) -> Self {
        self.by = Some(who.into());
        self
    }

    /// Records why.
    pub fn reason(mut self, why: impl Into<String>) -> Self {
        self.reason = Some(why.into());
        self
    }

    /// Records the reopening without replaying it here first (see
    /// [`replay_check`](Self::replay_check)).
    pub fn without_replay_check(mut self) -> Self {
        self.replay_check = false;
        self
    }

    /// Marks the reopening as part of bulk operation `id`.
    pub fn operation(mut self, id: impl Into<String>) -> Self {
        self.operation = Some(id.into());
        self
    }
}

/// The current attempt of a history, as replay reads it: the events from `start` on, after
/// the records `carried` over from the attempt a reopening replaced.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptView {
    /// Index in the history of the attempt's first own event (after its `workflow_started`;
    /// the history's length for an attempt that has not started).
    pub start: usize,
    /// The attempt's first command position.
    pub base: u32,
    /// Records of an earlier attempt, renumbered into this one, read before its own.
    pub carried: Vec<Event>,
}

impl AttemptView {
    /// The attempt's events in replay order: the carried ones, then its own.
    pub fn events<'a, E: Borrow<Event>>(
        &'a self,
        history: &'a [E],
    ) -> impl Iterator<Item = &'a Event> + 'a {
        self.carried.iter().chain(
            history[self.start.min(history.len())..]
                .iter()
                .map(Borrow::borrow),
        )
    }
}

/// The current attempt of `history` (a whole run's, from its first event).
pub fn attempt_view<E: Borrow<Event>>(history: &[E]) -> AttemptView {
    let reopened = history
        .iter()
        .any(|e| matches!(e.borrow().kind, EventKind::RunReopened { .. }));
    if !reopened {
        // The common case, without copying anything.
        let (start, base) = history
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, e)| match e.borrow().kind {
                EventKind::WorkflowStarted { first_position, .. } => Some((i + 1, first_position)),
                _ => None,
            })
            .unwrap_or((history.len(), 0));
        return AttemptView {
            start,
            base,
            carried: Vec::new(),
        };
    }
    // Walk the whole history: an attempt reopened twice carries what it was carried.
    let mut view = AttemptView {
        start: history.len(),
        base: 0,
        carried: Vec::new(),
    };
    // The positioned records of the attempt being walked, carried ones first.
    let mut records: Vec<Event> = Vec::new();
    let mut pending: Option<(u32, Vec<Event>)> = None;
    for (i, event) in history.iter().enumerate() {
        let event = event.borrow();
        match &event.kind {
            EventKind::RunReopened {
                kept_from,
                kept_until,
                next_position,
                ..
            } => {
                let shift = next_position.saturating_sub(*kept_from);
                let carried = records
                    .iter()
                    .filter(|e| {
                        e.kind
                            .position()
                            .is_some_and(|p| (*kept_from..*kept_until).contains(&p))
                    })
                    .map(|e| {
                        let mut e = e.clone();
                        if let Some(p) = e.kind.position_mut() {
                            *p += shift;
                        }
                        e
                    })
                    .collect();
                pending = Some((*next_position, carried));
            }
            EventKind::WorkflowStarted { first_position, .. } => {
                let carried = match pending.take() {
                    Some((_, carried)) => carried,
                    None => Vec::new(),
                };
                records = carried.clone();
                view = AttemptView {
                    start: i + 1,
                    base: *first_position,
                    carried,
                };
            }
            kind if kind.position().is_some() => records.push(event.clone()),
            _ => {}
        }
    }
    if let Some((base, carried)) = pending {
        // Reopened, its attempt not started yet.
        view = AttemptView {
            start: history.len(),
            base,
            carried,
        };
    }
    view
}

/// A command of a run's current attempt, as a reset offers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptCommand {
    /// Its position (what a reset names).
    pub position: u32,
    /// What it is: `step 'charge'`, `sleep`, `child 'ship'`, `hook`, …
    pub label: String,
    /// True if its result is recorded (false: it was still open when the run stopped).
    pub has_result: bool,
    /// True if its result is an error (a step's final failure, a child's failure, a hook
    /// that expired or conflicted).
    pub failed: bool,
}

/// The commands of the current attempt of `history`, in position order (records carried
/// over from an earlier attempt included, under their new positions).
pub fn attempt_commands<E: Borrow<Event>>(history: &[E]) -> Vec<AttemptCommand> {
    Commands::of(history).issued.into_values().collect()
}

/// The commands of the current attempt, by position.
struct Commands {
    base: u32,
    issued: BTreeMap<u32, AttemptCommand>,
}

impl Commands {
    fn of<E: Borrow<Event>>(history: &[E]) -> Commands {
        let view = attempt_view(history);
        let mut commands = Commands {
            base: view.base,
            issued: BTreeMap::new(),
        };
        for event in view.events(history) {
            let Some(position) = event.kind.position() else {
                continue;
            };
            let issued = |label: String, has_result: bool| AttemptCommand {
                position,
                label,
                has_result,
                failed: false,
            };
            match &event.kind {
                EventKind::ActivityScheduled { name, .. } => {
                    commands
                        .issued
                        .insert(position, issued(format!("step '{name}'"), false));
                }
                EventKind::TimerScheduled { .. } => {
                    commands
                        .issued
                        .insert(position, issued("sleep".into(), false));
                }
                EventKind::ChildWorkflowStarted { name, .. } => {
                    commands
                        .issued
                        .insert(position, issued(format!("child '{name}'"), false));
                }
                EventKind::HookCreated { .. } => {
                    commands
                        .issued
                        .insert(position, issued("hook".into(), false));
                }
                // Resolved when issued.
                EventKind::ValueRecorded { kind, .. } => {
                    let label = format!(
                        "ctx.{}()",
                        serde_json::to_value(kind)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    );
                    commands.issued.insert(position, issued(label, true));
                }
                EventKind::PatchRecorded { patch_id, .. } => {
                    commands
                        .issued
                        .insert(position, issued(format!("patch '{patch_id}'"), true));
                }
                EventKind::CompensationAdded { .. } => {
                    commands
                        .issued
                        .insert(position, issued("compensation".into(), true));
                }
                kind if kind.resolves_command() => {
                    let failed = matches!(
                        kind,
                        EventKind::ActivityFailed { .. }
                            | EventKind::ChildWorkflowFailed { .. }
                            | EventKind::HookExpired { .. }
                            | EventKind::HookConflict { .. }
                    );
                    let entry = commands
                        .issued
                        .entry(position)
                        .or_insert_with(|| issued("hook".into(), false));
                    entry.has_result = true;
                    entry.failed = failed;
                }
                _ => {}
            }
        }
        commands
    }

    /// One past the last command issued.
    fn end(&self) -> u32 {
        self.issued
            .keys()
            .next_back()
            .map_or(self.base, |p| p.saturating_add(1))
    }

    /// The first command without its result.
    fn first_open(&self) -> Option<u32> {
        self.issued
            .values()
            .find(|c| !c.has_result)
            .map(|c| c.position)
    }

    /// The last command whose result is an error.
    fn last_error(&self) -> Option<u32> {
        self.issued
            .values()
            .rev()
            .find(|c| c.failed)
            .map(|c| c.position)
    }
}

/// The `run_reopened` event that reopens `state` (whose history is `history`) as `request`
/// asks, or why it cannot be reopened.
///
/// Only a failed run can be reopened, and not one whose compensations ran (they undid its
/// steps) nor a child run (its parent already received its failure: reopen the parent, whose
/// retry starts the child again). `resume` is for quarantined runs only.
pub fn plan_reopen<E: Borrow<Event>>(
    state: &WorkflowState,
    history: &[E],
    request: &ReopenRequest,
) -> Result<EventKind, WorldError> {
    let id = &state.id;
    match state.status {
        RunStatus::Failed => {}
        RunStatus::Compensating | RunStatus::Compensated => {
            return Err(WorldError::conflict(format!(
                "run {id} failed and its compensations ran: they undid its steps, so it cannot go on; start a new run instead"
            )))
        }
        status => {
            return Err(WorldError::conflict(format!(
                "run {id} is {status}; only a failed (or quarantined) run can be retried, reset or resumed"
            )))
        }
    }
    if let Some(parent) = &state.parent_id {
        return Err(WorldError::conflict(format!(
            "run {id} is a child of run {parent}, which has already received its failure; retry or reset the parent instead (that starts the child again)"
        )));
    }
    if request.action == ReopenAction::Resume && state.quarantine.is_none() {
        return Err(WorldError::conflict(format!(
            "run {id} is not quarantined: resume continues a run set aside because its code changed; to run its failed part again, retry it"
        )));
    }
    let commands = Commands::of(history);
    let (base, end) = (commands.base, commands.end());
    let open = commands.first_open();
    let wanted = match request.action {
        ReopenAction::Retry => commands.last_error().unwrap_or(end),
        ReopenAction::Resume => end,
        ReopenAction::Reset => {
            let Some(position) = request.position else {
                return Err(WorldError::InvalidInput {
                    field: "position".into(),
                    message: "a reset needs the command position to run again from".into(),
                });
            };
            if !(base..=end).contains(&position) {
                return Err(WorldError::InvalidInput {
                    field: "position".into(),
                    message: format!(
                        "run {id}'s last attempt holds commands #{base} to #{}; reset to one of them (#{base} runs the whole workflow again)",
                        end.saturating_sub(1).max(base)
                    ),
                });
            }
            if let Some(open) = open.filter(|open| *open < position) {
                return Err(WorldError::InvalidInput {
                    field: "position".into(),
                    message: format!(
                        "command #{open} of run {id} has no result, so nothing after it can be kept; reset to #{open} or earlier"
                    ),
                });
            }
            position
        }
    };
    let kept_until = match open {
        Some(open) if open < wanted => open,
        _ => wanted,
    };
    let used = history
        .iter()
        .filter_map(|e| e.borrow().kind.position())
        .max()
        .map_or(0, |p| p.saturating_add(1));
    Ok(EventKind::RunReopened {
        action: request.action,
        attempt: state.attempt.saturating_add(1),
        kept_from: base,
        kept_until,
        next_position: used.max(end),
        by: request.by.clone(),
        reason: request.reason.clone(),
        operation: request.operation.clone(),
    })
}

/// True if `history` holds a reopening by bulk operation `operation`.
pub fn reopened_by<E: Borrow<Event>>(history: &[E], operation: &str) -> bool {
    history.iter().any(|e| {
        matches!(&e.borrow().kind, EventKind::RunReopened { operation: Some(op), .. } if op == operation)
    })
}

/// What a reopening did ([`World::reopen`](crate::World::reopen)).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reopened {
    /// The run.
    pub run_id: String,
    /// Retry, reset or resume.
    pub action: ReopenAction,
    /// The attempt that starts.
    pub attempt: u32,
    /// The first command position of the failed attempt that runs again (everything before
    /// it is kept).
    pub kept_until: u32,
    /// True if the bulk operation named in the request had already reopened this run:
    /// nothing was done this time.
    pub already: bool,
}

impl Reopened {
    /// What `event` (a `run_reopened`) does to run `run_id`; `None` for any other event.
    pub(crate) fn from_event(run_id: &str, event: &EventKind) -> Option<Self> {
        match event {
            EventKind::RunReopened {
                action,
                attempt,
                kept_until,
                ..
            } => Some(Reopened {
                run_id: run_id.to_owned(),
                action: *action,
                attempt: *attempt,
                kept_until: *kept_until,
                already: false,
            }),
            _ => None,
        }
    }

    pub(crate) fn already(run_id: &str, action: ReopenAction) -> Self {
        Reopened {
            run_id: run_id.to_owned(),
            action,
            attempt: 0,
            kept_until: 0,
            already: true,
        }
    }
}
