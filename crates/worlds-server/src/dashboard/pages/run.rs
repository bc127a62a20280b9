//! One run's page — what happened and why, its timeline, what it waits on, its history —
//! and the actions on it: cancel, resume a hook (its payload checked first), and for a failed
//! run retry, reset or resume (recorded with the signed-in key and the reason given).

use worlds_engine::model::ReopenRequest;
use worlds_engine::store::Reveal;

use super::run_parts::{
    self, Budget, HookLine, Listed, RuntimeView, StepView, StreamView, WaitView,
};
use super::shown::{self, clean, json_text, one_line, payload_text, ID_TEXT, NAME_TEXT};
use super::*;

// ---- one run ----

struct RunView {
    id: String,
    workflow_id: String,
    name: String,
    status: &'static str,
    created: String,
    duration: String,
    attempt: u32,
    parent: Option<String>,
    /// For a run driven from outside: who drives it.
    driven_by: Option<String>,
    /// How often the run went on after its process stopped, or empty.
    resumed: String,
    input: String,
    output: String,
}

/// The answer to "what happened and why", for a run that did not simply complete.
struct Why {
    headline: String,
    error: String,
    /// The error as the run's runtime serialized it (its bytes, shown), or empty.
    data: String,
    compensations: Vec<String>,
}

/// The recovery controls of a failed run.
struct RecoverView {
    quarantined: bool,
    /// The failed attempt's commands a reset may start from: (position, label).
    positions: Vec<(u32, String)>,
}

impl RecoverView {
    /// Offered for a failed run that is not a child (its parent already took its failure).
    fn of(state: &WorkflowState, history: &[Event]) -> Option<RecoverView> {
        if state.status != RunStatus::Failed || state.parent_id.is_some() || state.external {
            return None;
        }
        let mut positions = Vec::new();
        for command in worlds_engine::model::attempt_commands(history) {
            let result = match (command.has_result, command.failed) {
                (false, _) => "no result",
                (true, true) => "failed",
                (true, false) => "done",
            };
            positions.push((
                command.position,
                format!("#{} {} ({result})", command.position, command.label),
            ));
            if !command.has_result {
                // Nothing after a command without a result can be kept.
                break;
            }
        }
        Some(RecoverView {
            quarantined: state.quarantine.is_some(),
            positions,
        })
    }
}

struct HookView {
    id: String,
    /// The id as shown (its control characters escaped, cut at a bound); `id` goes in links.
    shown_id: String,
    kind: String,
    webhook: bool,
}

struct EventView {
    seq: u64,
    offset: String,
    kind: String,
    brief: String,
    class: &'static str,
    json: String,
}

#[derive(Template)]
#[template(path = "run.html")]
struct RunPage {
    page: Page,
    run: RunView,
    why: Option<Why>,
    waiting: Vec<WaitLine>,
    hooks: Vec<HookView>,
    can_cancel: bool,
    recover: Option<RecoverView>,
    timeline: Timeline,
    events: Vec<EventView>,
    truncated: bool,
    /// The run's streams, with their first chunks.
    streams: Vec<StreamView>,
    /// What the run's outside runtime recorded (a DevKit run), if anything.
    runtime: Option<RuntimeView>,
    /// A run driven from outside: its steps, hooks and waits one by one (none listed for a run
    /// the engine drives, whose timeline draws them).
    steps: Listed<StepView>,
    all_hooks: Listed<HookLine>,
    waits: Listed<WaitView>,
}

pub(crate) async fn run(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    Query(notice): Query<Notice>,
) -> Response {
    run_page(&api, &principal, &id, notice.notice, StatusCode::OK).await
}

async fn run_page(
    api: &Api,
    principal: &Principal,
    id: &str,
    notice: String,
    status: StatusCode,
) -> Response {
    let mut state = match api.world.get_run(id, ResolveData::All).await {
        Ok(state) => state,
        Err(e) => return failure(principal, &e),
    };
    let mut history = match read_history(api, &state.id).await {
        Ok(history) => history,
        Err(e) => return failure(principal, &e),
    };
    // A world with the encryption keys hands over plain values; one without them, sealed
    // ones, shown as "(encrypted)".
    let reveal = Reveal::new(None);
    reveal.state(&mut state);
    for event in &mut history {
        reveal.event(event);
    }
    let now = api.world.clock().now_ms();
    // A store that cannot list its pauses shows the waits as if none were in force.
    let pauses = if state.status.is_terminal() {
        Vec::new()
    } else {
        api.world.pauses().await.unwrap_or_default()
    };
    let timeline = Timeline::of(&history, now);
    let mut page = Page::of(principal, "runs");
    page.notice = notice;
    if !state.status.is_terminal() {
        page.live = format!("run:{}", state.id);
    }
    let acts = may_act(principal);
    let hooks = if acts {
        state
            .hooks
            .iter()
            .filter(|h| h.status == HookStatus::Waiting)
            .map(|h| HookView {
                id: h.id.clone(),
                shown_id: clean(&h.id, ID_TEXT),
                kind: h.hook_type.clone().unwrap_or_default(),
                webhook: h.webhook,
            })
            .collect()
    } else {
        Vec::new()
    };
    let truncated = history.len() > HISTORY_SHOWN;
    let shown: Vec<&Event> = if truncated {
        let half = HISTORY_SHOWN / 2;
        history[..half]
            .iter()
            .chain(&history[history.len() - half..])
            .collect()
    } else {
        history.iter().collect()
    };
    let start = history.first().map_or(state.created_at, |e| e.timestamp);
    let streams = run_parts::streams(api, &state.id).await;
    // The engine draws its own runs' steps and hooks well in the timeline; a run driven from
    // outside (a DevKit app) has its records listed too.
    let (steps, all_hooks, waits) = if state.external || state.runtime.is_some() {
        let mut budget = Budget::new();
        (
            run_parts::steps(&state, now, &mut budget),
            run_parts::hooks(&state, &history, &mut budget),
            run_parts::waits(&history),
        )
    } else {
        (Listed::none(), Listed::none(), Listed::none())
    };
    let view = RunPage {
        page,
        why: why(&state, &history),
        waiting: waiting_on(&state, &history, now, &pauses),
        hooks,
        can_cancel: acts && !state.status.is_terminal(),
        recover: RecoverView::of(&state, &history).filter(|_| acts),
        timeline,
        events: {
            let context = HistoryContext::of(&history);
            shown
                .into_iter()
                .map(|e| event_view(e, start, &context))
                .collect()
        },
        truncated,
        streams,
        runtime: RuntimeView::of(&state),
        steps,
        all_hooks,
        waits,
        run: RunView {
            id: state.id.clone(),
            workflow_id: clean(&state.workflow_id, NAME_TEXT),
            name: clean(&state.name, NAME_TEXT),
            status: state.status.as_str(),
            created: clock_text(state.created_at),
            duration: duration_text(state.completed_at.unwrap_or(now) - state.created_at),
            attempt: state.attempt,
            parent: state.parent_id.clone(),
            driven_by: state.external.then(|| match &state.code_version {
                Some(deployment) => {
                    format!("its app (deployment {deployment}), outside the engine")
                }
                None => "its app, outside the engine".to_owned(),
            }),
            resumed: resumed_text(&history),
            input: state.input.as_ref().map(payload_text).unwrap_or_default(),
            output: state.output.as_ref().map(payload_text).unwrap_or_default(),
        },
    };
    render(&view, status)
}

/// How often the run went on after its process stopped (a restart or a takeover), or empty.
fn resumed_text(history: &[Event]) -> String {
    let resumed = worlds_engine::model::resumptions(history);
    match (resumed.len(), resumed.last()) {
        (_, None) => String::new(),
        (1, Some(last)) => format!(
            "after a restart or takeover, at {} (marked ⟲ in the history)",
            clock_text(last.at)
        ),
        (n, Some(last)) => format!(
            "{n} times after a restart or takeover, last at {} (marked ⟲ in the history)",
            clock_text(last.at)
        ),
    }
}

/// The whole history, page by page.
async fn read_history(api: &Api, run_id: &str) -> Result<Vec<Event>, WorldError> {
    let mut events = Vec::new();
    let mut query = ListQuery::new().limit(1_000).order(SortOrder::Ascending);
    loop {
        let page = api.world.events(run_id, query.clone()).await?;
        events.extend(page.data.iter().map(|e| (**e).clone()));
        match page.cursor {
            Some(cursor) if page.has_more => query.cursor = Some(cursor),
            _ => return Ok(events),
        }
    }
}

/// One sentence-sized answer for a failed, compensated, cancelled or quarantined run.
fn why(state: &WorkflowState, history: &[Event]) -> Option<Why> {
    let failed_step = state
        .activities
        .iter()
        .rev()
        .find(|a| a.error.is_some() && a.status == ActivityStatus::Failed);
    // A compensation is named by the step it ran (the last one scheduled before it ended).
    let mut compensations = Vec::new();
    let mut last_step: Option<&str> = None;
    for event in history {
        match &event.kind {
            EventKind::ActivityScheduled { name, .. } => last_step = Some(name),
            EventKind::WorkflowCompensating {} => last_step = None,
            EventKind::CompensationExecuted { .. } => {
                compensations.push(format!("undid {}", last_step.take().unwrap_or("(code)")));
            }
            EventKind::CompensationFailed { error, .. } => compensations.push(format!(
                "could not undo {}: {}",
                last_step.take().unwrap_or("(code)"),
                error.message
            )),
            _ => {}
        }
    }
    compensations.reverse();
    let error = state
        .error
        .as_ref()
        .map(|e| e.message.clone())
        .unwrap_or_default();
    let diverged = state.error.as_ref().and_then(|e| e.code.as_deref())
        == Some(worlds_engine::error::codes::NONDETERMINISM);
    let headline = match state.status {
        _ if diverged || state.quarantine.is_some() => format!(
            "The run is quarantined: its code no longer matches its history{}.",
            if diverged {
                " (the position and both commands are below)"
            } else {
                ""
            }
        ),
        RunStatus::Failed | RunStatus::Compensated | RunStatus::Compensating => match failed_step {
            Some(step) => format!(
                "Step {} failed after {} attempt{}{}.",
                clean(&step.name, NAME_TEXT),
                step.attempt,
                if step.attempt == 1 { "" } else { "s" },
                if compensations.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; {} compensation{} ran",
                        compensations.len(),
                        if compensations.len() == 1 { "" } else { "s" }
                    )
                }
            ),
            None => "The workflow failed.".to_owned(),
        },
        RunStatus::Cancelled => "The run was cancelled.".to_owned(),
        _ => return None,
    };
    let data = failed_step
        .and_then(|s| s.error.as_ref())
        .and_then(|e| e.data.as_deref())
        .or_else(|| state.error.as_ref().and_then(|e| e.data.as_deref()))
        .map(payload_text)
        .unwrap_or_default();
    let error = match (failed_step.and_then(|s| s.error.as_ref()), error.is_empty()) {
        (Some(step_error), _) if step_error.message != error && !error.is_empty() => {
            format!("{}\n(run: {error})", step_error.message)
        }
        (Some(step_error), _) => step_error.message.clone(),
        (None, _) => error,
    };
    Some(Why {
        headline,
        error: clean(&error, shown::SHOWN_TEXT),
        data,
        compensations,
    })
}

/// What an unfinished run waits on now, one line each, with a concern where the waiting
/// looks stuck (`worlds_engine::model::waits`).
fn waiting_on(
    state: &WorkflowState,
    history: &[Event],
    now: Millis,
    pauses: &[worlds_engine::model::Pause],
) -> Vec<WaitLine> {
    use worlds_engine::model::WaitOn;
    worlds_engine::model::waits_paused(state, history, now, pauses)
        .into_iter()
        .map(|wait| {
            let what = match &wait.on {
                WaitOn::Start => "a worker to start the run".to_owned(),
                WaitOn::WorkflowRetry { attempt } => format!("the workflow's attempt {attempt}"),
                WaitOn::StepQueued { name, .. } => format!("step {name}, queued for a worker"),
                WaitOn::StepRunning { name, attempt, .. } => {
                    format!("step {name}, attempt {attempt} running")
                }
                WaitOn::StepRetry { name, attempt, .. } => {
                    format!("step {name}, attempt {attempt} after its retry delay")
                }
                WaitOn::Timer { position } => format!("a timer (command #{position})"),
                WaitOn::Hook {
                    hook_id, webhook, ..
                } => format!("{} {hook_id}", if *webhook { "webhook" } else { "hook" }),
                WaitOn::Child { run_id } => format!("child run {run_id}"),
                WaitOn::Paused {
                    target,
                    by,
                    reason,
                    paused_since,
                    step,
                } => {
                    let held = match step {
                        Some((name, _)) => format!("step {name}"),
                        None => "its start".to_owned(),
                    };
                    let mut text = format!(
                        "{held}: {target} paused by {by} at {}",
                        clock_text(*paused_since)
                    );
                    if !reason.is_empty() {
                        text.push_str(&format!(" ({reason})"));
                    }
                    text
                }
            };
            let mut text = format!(
                "{what}, for {}",
                duration_text(now.saturating_sub(wait.since))
            );
            if let Some(due) = wait.due {
                text.push_str(&format!("; due {}", clock_text(due)));
            }
            // Step names and hook ids are the caller's: shown on one line, escaped, bounded.
            WaitLine {
                text: one_line(&text, LINE_TEXT),
                concern: one_line(&wait.concern.unwrap_or_default(), LINE_TEXT),
            }
        })
        .collect()
}

/// The most characters of a line of "Waiting on".
const LINE_TEXT: usize = 600;

/// One line of "Waiting on".
struct WaitLine {
    text: String,
    /// Why it looks stuck, or empty.
    concern: String,
}

/// What a history row says that its event alone does not: the names of the steps, where the
/// run resumed after its process stopped, and which timers fired late.
struct HistoryContext {
    names: std::collections::HashMap<u32, String>,
    resumed: Vec<worlds_engine::model::Resumption>,
    late: Vec<worlds_engine::model::LateTimer>,
}

impl HistoryContext {
    fn of(history: &[Event]) -> HistoryContext {
        let names = history
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::ActivityScheduled { position, name, .. } => {
                    Some((*position, name.clone()))
                }
                _ => None,
            })
            .collect();
        HistoryContext {
            names,
            resumed: worlds_engine::model::resumptions(history),
            late: worlds_engine::model::late_timers(history),
        }
    }
}

fn event_view(event: &Event, start: Millis, context: &HistoryContext) -> EventView {
    let json = serde_json::to_value(event).unwrap_or_default();
    let kind = json["type"].as_str().unwrap_or("event").to_owned();
    let step = |position: &u32, attempt: &u32| match context.names.get(position) {
        Some(name) => format!("{name}, attempt {attempt}"),
        None => format!("attempt {attempt}"),
    };
    let brief = match &event.kind {
        EventKind::ActivityScheduled { name, .. } => name.clone(),
        EventKind::ActivityStarted { position, attempt }
        | EventKind::ActivityCompleted {
            position, attempt, ..
        }
        | EventKind::ActivityHeartbeat {
            position, attempt, ..
        } => step(position, attempt),
        EventKind::ActivityRetry {
            position, attempt, ..
        } => format!("{} next", step(position, attempt)),
        EventKind::TimerFired { .. } => match context.late.iter().find(|t| t.seq == event.seq) {
            Some(timer) if timer.world_stopped => format!(
                "fired {} late: the world was not running when it was due",
                duration_text(timer.late_ms)
            ),
            Some(timer) => format!("fired {} late", duration_text(timer.late_ms)),
            None => String::new(),
        },
        EventKind::ActivityFailed { error, .. }
        | EventKind::WorkflowFailed { error }
        | EventKind::CompensationFailed { error, .. }
        | EventKind::ChildWorkflowFailed { error, .. } => error.message.clone(),
        EventKind::ChildWorkflowStarted { child_id, .. } => child_id.clone(),
        EventKind::HookCreated { hook_id, .. }
        | EventKind::HookReceived { hook_id, .. }
        | EventKind::HookConflict { hook_id, .. }
        | EventKind::HookExpired { hook_id, .. }
        | EventKind::HookDisposed { hook_id, .. } => hook_id.clone(),
        EventKind::TimerScheduled {
            timer_id, fire_at, ..
        } => match timer_id {
            Some(id) => format!("{id}, until {}", clock_text(*fire_at)),
            None => format!("until {}", clock_text(*fire_at)),
        },
        EventKind::AttributesSet { changes, .. } => changes
            .iter()
            .map(|c| match &c.value {
                Some(value) => format!("{} = {value}", c.key),
                None => format!("{} removed", c.key),
            })
            .collect::<Vec<_>>()
            .join(", "),
        EventKind::RunReopened {
            action,
            kept_until,
            by,
            reason,
            ..
        } => format!(
            "{action} by {}, from command #{kept_until}{}",
            by.as_deref().unwrap_or("?"),
            reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ),
        _ => String::new(),
    };
    let mut class = match &event.kind {
        EventKind::ActivityFailed { .. }
        | EventKind::WorkflowFailed { .. }
        | EventKind::CompensationFailed { .. }
        | EventKind::ChildWorkflowFailed { .. } => "failed",
        _ => "",
    };
    let mut brief = brief;
    if let Some(resumed) = context.resumed.iter().find(|r| r.seq == event.seq) {
        let mark = format!(
            "⟲ resumed after a restart or takeover, {} after the event before",
            duration_text(resumed.at - resumed.last_before)
        );
        brief = if brief.is_empty() {
            mark
        } else {
            format!("{mark}: {brief}")
        };
        class = "resumed";
    }
    if brief.chars().count() > 120 {
        brief = brief.chars().take(120).collect::<String>() + "…";
    }
    let brief = brief
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    // Binary values are summarized as bytes; cut, the API has the event whole.
    let mut json = json_text(json);
    if json.len() > shown::SHOWN_TEXT {
        json.push_str("\n(the API's /v1/runs/{id}/events has it whole)");
    }
    EventView {
        seq: event.seq,
        offset: duration_text(event.timestamp - start),
        kind,
        brief,
        class,
        json,
    }
}

#[derive(Deserialize)]
pub(crate) struct CancelForm {
    #[serde(default)]
    reason: String,
}

pub(crate) async fn cancel(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    Form(form): Form<CancelForm>,
) -> Response {
    if !may_act(&principal) {
        return forbidden(&principal, "cancel runs");
    }
    let reason = if form.reason.trim().is_empty() {
        "cancelled from the dashboard".to_owned()
    } else {
        form.reason.trim().to_owned()
    };
    match api.world.cancel_with_reason(&id, reason).await {
        Ok(()) => Redirect::to(&format!(
            "/runs/{}?{}",
            segment(&id),
            query(&[("notice", "Cancelled.")])
        ))
        .into_response(),
        Err(e) => run_page(&api, &principal, &id, e.to_string(), StatusCode::CONFLICT).await,
    }
}

#[derive(Deserialize)]
pub(crate) struct RecoverForm {
    #[serde(default)]
    reason: String,
    /// For a reset.
    position: Option<u32>,
}

/// Retries, resets or resumes a failed run (`action`), recorded with the signed-in key.
pub(crate) async fn recover(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path((id, action)): Path<(String, String)>,
    Form(form): Form<RecoverForm>,
) -> Response {
    if !may_act(&principal) {
        return forbidden(&principal, "retry, reset or resume runs");
    }
    let request = match (action.as_str(), form.position) {
        ("retry", _) => ReopenRequest::retry(),
        ("resume", _) => ReopenRequest::resume(),
        ("reset", Some(position)) => ReopenRequest::reset(position),
        _ => {
            return run_page(
                &api,
                &principal,
                &id,
                "Choose retry, resume, or reset with a position.".into(),
                StatusCode::BAD_REQUEST,
            )
            .await
        }
    };
    let mut request = request.by(principal.subject.clone());
    if !form.reason.trim().is_empty() {
        request.reason = Some(form.reason.trim().to_owned());
    }
    match api.world.reopen(&id, request).await {
        Ok(reopened) => {
            let notice = format!(
                "Reopened ({}): attempt {} runs again from command #{}.",
                reopened.action, reopened.attempt, reopened.kept_until
            );
            Redirect::to(&format!(
                "/runs/{}?{}",
                segment(&id),
                query(&[("notice", notice)])
            ))
            .into_response()
        }
        Err(e) => {
            let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::CONFLICT);
            run_page(&api, &principal, &id, e.to_string(), status).await
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct ResumeForm {
    payload: String,
}

pub(crate) async fn resume_hook(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path((id, hook)): Path<(String, String)>,
    Form(form): Form<ResumeForm>,
) -> Response {
    if !may_act(&principal) {
        return forbidden(&principal, "resume hooks");
    }
    let payload: serde_json::Value = match serde_json::from_str(&form.payload) {
        Ok(payload) => payload,
        Err(e) => {
            return run_page(
                &api,
                &principal,
                &id,
                format!("The payload is not JSON ({e}); the hook keeps waiting."),
                StatusCode::BAD_REQUEST,
            )
            .await
        }
    };
    match api.world.resume_hook_by_id(&hook, &payload).await {
        Ok(_) => Redirect::to(&format!(
            "/runs/{}?{}",
            segment(&id),
            query(&[("notice", "Hook resumed.")])
        ))
        .into_response(),
        Err(e) => {
            let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
            run_page(&api, &principal, &id, e.to_string(), status).await
        }
    }
}

/// What the payload check answers: `{"ok": true}`, or `{"ok": false, "error": "…"}` saying
/// what the hook would refuse.
#[derive(serde::Serialize)]
struct Checked {
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Checks a hook's payload as a resume would (JSON, size, the hook's payload type) without
/// delivering it: the form asks before it sends.
pub(crate) async fn check_hook_payload(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path((_, hook)): Path<(String, String)>,
    Form(form): Form<ResumeForm>,
) -> Response {
    if !may_act(&principal) {
        return forbidden(&principal, "resume hooks");
    }
    let checked = match serde_json::from_str::<serde_json::Value>(&form.payload) {
        Err(e) => Err(format!("The payload is not JSON ({e}).")),
        Ok(payload) => api
            .world
            .check_hook_payload(&hook, &payload)
            .await
            .map_err(|e| e.to_string()),
    };
    let answer = match checked {
        Ok(()) => Checked {
            ok: true,
            error: None,
        },
        Err(error) => Checked {
            ok: false,
            error: Some(error),
        },
    };
    axum::Json(answer).into_response()
}
