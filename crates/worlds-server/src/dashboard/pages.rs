//! The dashboard's pages and actions. Each page reads through the same world methods as the
//! JSON API, so the two always agree on a run's status.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use axum::extract::{Extension, Form, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use futures::Stream;
use serde::Deserialize;
use worlds_engine::clock::Millis;
use worlds_engine::model::{ActivityStatus, ListQuery, SortOrder, StatusFilter};
use worlds_engine::schedule::ScheduleConfig;
use worlds_engine::telemetry::WorldMetrics;
use worlds_engine::{
    Event, EventKind, HookStatus, ResolveData, RunStatus, WorkflowQueryFilter, WorkflowState,
    WorldError,
};

use super::may_act;
use super::session::Sessions;
use super::timeline::Timeline;
use crate::auth::{Principal, Scope};
use crate::routes::Api;

/// Runs per page of the list.
const PAGE: usize = 50;
/// Counts by status stop at this many ("1000+").
const COUNT_CAP: usize = 1_000;
/// A history longer than this shows its first and last events only.
const HISTORY_SHOWN: usize = 200;
/// How often a live page checks for changes.
const LIVE_EVERY: Duration = Duration::from_millis(400);
/// How often a live runs list looks for changes nobody told it of (other processes sharing a
/// PostgreSQL store).
const LIST_POLL_EVERY: Duration = Duration::from_secs(5);

/// What every page's frame needs.
pub(crate) struct Page {
    signed_in: bool,
    section: &'static str,
    who: String,
    /// `data-live` of `<main>`: what the script watches (`runs`, `run:<id>`), or empty.
    live: String,
    notice: String,
}

impl Page {
    fn of(principal: &Principal, section: &'static str) -> Self {
        Page {
            signed_in: true,
            section,
            who: format!("{} ({})", principal.subject, principal.scope.as_str()),
            live: String::new(),
            notice: String::new(),
        }
    }
}

fn render(template: &impl Template, status: StatusCode) -> Response {
    match template.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "a dashboard page failed to render");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page failed to render",
            )
                .into_response()
        }
    }
}

/// A world error as a small page.
fn failure(principal: &Principal, error: &WorldError) -> Response {
    let mut page = Page::of(principal, "runs");
    page.notice = error.to_string();
    let status =
        StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    render(&Message { page }, status)
}

#[derive(Template)]
#[template(
    source = "{% extends \"base.html\" %}{% block title %}worlds{% endblock %}{% block main %}<p><a href=\"/\">Back to the runs</a></p>{% endblock %}",
    ext = "html"
)]
struct Message {
    page: Page,
}

// ---- sign-in ----

#[derive(Template)]
#[template(path = "login.html")]
struct Login {
    page: Page,
    error: String,
}

fn login_page(error: String) -> Login {
    Login {
        page: Page {
            signed_in: false,
            section: "",
            who: String::new(),
            live: String::new(),
            notice: String::new(),
        },
        error,
    }
}

pub(crate) async fn login_form() -> Response {
    render(&login_page(String::new()), StatusCode::OK)
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    key: String,
}

pub(crate) async fn login(
    Extension(sessions): Extension<Arc<Sessions>>,
    Form(form): Form<LoginForm>,
) -> Response {
    match sessions.sign_in(&form.key).await {
        Ok((_, cookie)) => {
            let mut response = Redirect::to("/").into_response();
            response.headers_mut().insert(header::SET_COOKIE, cookie);
            response
        }
        Err(e) => render(
            &login_page(format!("Not signed in: {e}.")),
            StatusCode::UNAUTHORIZED,
        ),
    }
}

pub(crate) async fn logout(
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
) -> Response {
    let cookie = sessions.sign_out(&headers);
    let mut response = Redirect::to("/login").into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response
}

// ---- runs ----

/// The list's filters, as the form sends them.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RunsQuery {
    #[serde(default)]
    status: String,
    #[serde(default)]
    workflow: String,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    after: String,
    #[serde(default)]
    before: String,
    #[serde(default)]
    order: String,
    /// `true`: quarantined runs only, with their reasons.
    #[serde(default)]
    quarantined: String,
    #[serde(default)]
    cursor: String,
}

/// The filters shown back in the form.
struct FilterView {
    status: String,
    workflow: String,
    prefix: String,
    after: String,
    before: String,
    order: String,
    quarantined: bool,
}

struct CountView {
    status: &'static str,
    shown: String,
}

struct RunRow {
    id: String,
    workflow_id: String,
    name: String,
    status: &'static str,
    created: String,
    created_iso: String,
    duration: String,
    /// Why it is quarantined, if it is.
    quarantine: String,
}

#[derive(Template)]
#[template(path = "runs.html")]
struct Runs {
    page: Page,
    counts: Vec<CountView>,
    statuses: Vec<&'static str>,
    workflow_names: Vec<String>,
    filter: FilterView,
    rows: Vec<RunRow>,
    next: String,
}

pub(crate) async fn runs(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Query(q): Query<RunsQuery>,
) -> Response {
    let mut filter = WorkflowQueryFilter::new().limit(PAGE);
    let mut bad = Vec::new();
    if !q.status.is_empty() {
        match q.status.parse::<RunStatus>() {
            Ok(status) => filter.status = Some(StatusFilter::Any(vec![status])),
            Err(e) => bad.push(e.to_string()),
        }
    }
    if !q.workflow.trim().is_empty() {
        filter.workflow_name = Some(q.workflow.trim().to_owned());
    }
    if !q.prefix.trim().is_empty() {
        filter.workflow_id_prefix = Some(q.prefix.trim().to_owned());
    }
    for (field, text, slot) in [
        ("started after", &q.after, &mut filter.started_after),
        ("started before", &q.before, &mut filter.started_before),
    ] {
        if !text.is_empty() {
            match local_time_ms(text) {
                Some(ms) => *slot = Some(ms),
                None => bad.push(format!("{field}: {text:?} is not a date and time")),
            }
        }
    }
    filter.oldest_first = q.order == "oldest";
    let quarantined = q.quarantined == "true";
    if quarantined {
        filter.quarantined = Some(true);
    }
    if !q.cursor.is_empty() {
        filter.cursor = Some(q.cursor.clone());
    }
    let page_of_runs = match api.world.list_runs(filter).await {
        Ok(page) => page,
        Err(e) => return failure(&principal, &e),
    };
    let mut counts = Vec::new();
    for status in RunStatus::ALL {
        // One more than the cap tells "1000" from "more than 1000".
        let count = api
            .world
            .count_runs(WorkflowQueryFilter::new().status(status), COUNT_CAP + 1)
            .await
            .unwrap_or(0);
        counts.push(CountView {
            status: status.as_str(),
            shown: if count > COUNT_CAP {
                format!("{COUNT_CAP}+")
            } else {
                count.to_string()
            },
        });
    }
    let next = match (&page_of_runs.cursor, page_of_runs.has_more) {
        (Some(cursor), true) => {
            let mut pairs = form_urlencoded_pairs(&q);
            pairs.push(("cursor", cursor.clone()));
            format!("/?{}", query(&pairs))
        }
        _ => String::new(),
    };
    let mut page = Page::of(&principal, if quarantined { "quarantine" } else { "runs" });
    page.live = "runs".into();
    if !bad.is_empty() {
        page.notice = format!("Some filters were left out: {}", bad.join("; "));
    }
    let now = api.world.clock().now_ms();
    let view = Runs {
        page,
        counts,
        statuses: RunStatus::ALL.iter().map(|s| s.as_str()).collect(),
        workflow_names: api.world.workflow_names(),
        filter: FilterView {
            status: q.status.clone(),
            workflow: q.workflow.clone(),
            prefix: q.prefix.clone(),
            after: q.after.clone(),
            before: q.before.clone(),
            order: if q.order == "oldest" {
                "oldest"
            } else {
                "newest"
            }
            .into(),
            quarantined,
        },
        rows: page_of_runs
            .data
            .iter()
            .map(|run| RunRow {
                id: run.id.clone(),
                workflow_id: run.workflow_id.clone(),
                name: run.name.clone(),
                status: run.status.as_str(),
                created: clock_text(run.created_at),
                created_iso: iso(run.created_at),
                duration: duration_text(run.completed_at.unwrap_or(now) - run.created_at),
                quarantine: run.quarantine.clone().unwrap_or_default(),
            })
            .collect(),
        next,
    };
    render(&view, StatusCode::OK)
}

fn form_urlencoded_pairs(q: &RunsQuery) -> Vec<(&'static str, String)> {
    [
        ("status", &q.status),
        ("workflow", &q.workflow),
        ("prefix", &q.prefix),
        ("after", &q.after),
        ("before", &q.before),
        ("order", &q.order),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| (k, v.clone()))
    .collect()
}

/// `k=v&…`, form-encoded.
fn query<V: serde::Serialize>(pairs: &[(&str, V)]) -> String {
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

/// `text` as one path segment: everything but unreserved characters percent-encoded.
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A `datetime-local` value (`2026-11-27T08:30`, read as UTC) as ms since the epoch.
fn local_time_ms(text: &str) -> Option<Millis> {
    let civil: jiff::civil::DateTime = text.parse().ok()?;
    let zoned = civil.to_zoned(jiff::tz::TimeZone::UTC).ok()?;
    Some(zoned.timestamp().as_millisecond())
}

fn iso(at: Millis) -> String {
    jiff::Timestamp::from_millisecond(at)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// `2026-11-27 08:30:12` (UTC).
fn clock_text(at: Millis) -> String {
    jiff::Timestamp::from_millisecond(at)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

fn duration_text(ms: Millis) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m {}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h {}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

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
    input: String,
    output: String,
}

/// The answer to "what happened and why", for a run that did not simply complete.
struct Why {
    headline: String,
    error: String,
    compensations: Vec<String>,
}

struct HookView {
    id: String,
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
    timeline: Timeline,
    events: Vec<EventView>,
    truncated: bool,
    /// The names of the run's streams.
    streams: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Notice {
    #[serde(default)]
    notice: String,
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
    let state = match api.world.get_run(id, ResolveData::All).await {
        Ok(state) => state,
        Err(e) => return failure(principal, &e),
    };
    let history = match read_history(api, &state.id).await {
        Ok(history) => history,
        Err(e) => return failure(principal, &e),
    };
    let now = api.world.clock().now_ms();
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
    let streams = api
        .world
        .streams()
        .list(&state.id)
        .await
        .unwrap_or_default();
    let view = RunPage {
        page,
        why: why(&state, &history),
        waiting: waiting_on(&state, &history, now),
        hooks,
        can_cancel: acts && !state.status.is_terminal(),
        timeline,
        events: shown.into_iter().map(|e| event_view(e, start)).collect(),
        truncated,
        streams,
        run: RunView {
            id: state.id.clone(),
            workflow_id: state.workflow_id.clone(),
            name: state.name.clone(),
            status: state.status.as_str(),
            created: clock_text(state.created_at),
            duration: duration_text(state.completed_at.unwrap_or(now) - state.created_at),
            attempt: state.attempt,
            parent: state.parent_id.clone(),
            input: pretty(state.input.as_ref().map(|p| p.to_value())),
            output: pretty(state.output.as_ref().map(|p| p.to_value())),
        },
    };
    render(&view, status)
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

fn pretty(value: Option<serde_json::Value>) -> String {
    value
        .map(|v| serde_json::to_string_pretty(&v).unwrap_or_default())
        .unwrap_or_default()
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
                step.name,
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
    let error = match (failed_step.and_then(|s| s.error.as_ref()), error.is_empty()) {
        (Some(step_error), _) if step_error.message != error && !error.is_empty() => {
            format!("{}\n(run: {error})", step_error.message)
        }
        (Some(step_error), _) => step_error.message.clone(),
        (None, _) => error,
    };
    Some(Why {
        headline,
        error,
        compensations,
    })
}

/// What an unfinished run waits on now, one line each, with a concern where the waiting
/// looks stuck (`worlds_engine::model::waits`).
fn waiting_on(state: &WorkflowState, history: &[Event], now: Millis) -> Vec<WaitLine> {
    use worlds_engine::model::WaitOn;
    worlds_engine::model::waits(state, history, now)
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
            };
            let mut text = format!(
                "{what}, for {}",
                duration_text(now.saturating_sub(wait.since))
            );
            if let Some(due) = wait.due {
                text.push_str(&format!("; due {}", clock_text(due)));
            }
            WaitLine {
                text,
                concern: wait.concern.unwrap_or_default(),
            }
        })
        .collect()
}

/// One line of "Waiting on".
struct WaitLine {
    text: String,
    /// Why it looks stuck, or empty.
    concern: String,
}

fn event_view(event: &Event, start: Millis) -> EventView {
    let json = serde_json::to_value(event).unwrap_or_default();
    let kind = json["type"].as_str().unwrap_or("event").to_owned();
    let brief = match &event.kind {
        EventKind::ActivityScheduled { name, .. } => name.clone(),
        EventKind::ActivityFailed { error, .. }
        | EventKind::WorkflowFailed { error }
        | EventKind::CompensationFailed { error, .. }
        | EventKind::ChildWorkflowFailed { error, .. } => error.message.clone(),
        EventKind::ChildWorkflowStarted { child_id, .. } => child_id.clone(),
        _ => String::new(),
    };
    let class = match &event.kind {
        EventKind::ActivityFailed { .. }
        | EventKind::WorkflowFailed { .. }
        | EventKind::CompensationFailed { .. }
        | EventKind::ChildWorkflowFailed { .. } => "failed",
        _ => "",
    };
    let mut brief = brief;
    if brief.chars().count() > 120 {
        brief = brief.chars().take(120).collect::<String>() + "…";
    }
    let mut json = serde_json::to_string_pretty(&json).unwrap_or_default();
    if json.len() > 16 * 1024 {
        json.truncate(json.floor_char_boundary(16 * 1024));
        json.push_str("\n… (cut; the API's /v1/runs/{id}/events has it whole)");
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

fn forbidden(principal: &Principal, what: &str) -> Response {
    let mut page = Page::of(principal, "runs");
    page.notice = format!(
        "Your key has the {} scope: to {what}, sign in with a key of more scope.",
        principal.scope.as_str()
    );
    render(&Message { page }, StatusCode::FORBIDDEN)
}

// ---- schedules, workers ----

struct ScheduleRow {
    id: String,
    workflow: String,
    when: String,
    next: String,
    last_run: String,
    /// The last run's status, or why the last firing could not start one.
    last_result: String,
    /// Runs it has started.
    runs: u64,
    paused: bool,
}

#[derive(Template)]
#[template(path = "schedules.html")]
struct Schedules {
    page: Page,
    rows: Vec<ScheduleRow>,
}

pub(crate) async fn schedules(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Query(notice): Query<Notice>,
) -> Response {
    let list = match api.world.schedules().list().await {
        Ok(list) => list,
        Err(e) => return failure(&principal, &e),
    };
    let mut page = Page::of(&principal, "schedules");
    page.notice = notice.notice;
    let mut rows = Vec::with_capacity(list.len());
    for schedule in &list {
        let last = match &schedule.last_run_id {
            Some(id) => api
                .world
                .get_run(id, ResolveData::None)
                .await
                .ok()
                .map(|r| r.status),
            None => None,
        };
        rows.push(schedule_row(schedule, last));
    }
    render(&Schedules { page, rows }, StatusCode::OK)
}

/// A schedule as its row shows it; `last` is the status of the run it started last, if known.
fn schedule_row(schedule: &ScheduleConfig, last: Option<RunStatus>) -> ScheduleRow {
    let when = match (&schedule.cron_expression, &schedule.time_zone) {
        (Some(cron), Some(zone)) => format!("{cron} ({zone})"),
        (Some(cron), None) => cron.clone(),
        (None, _) => "on demand".to_owned(),
    };
    let last_result = match (&schedule.last_error, last) {
        (Some(error), _) => format!("could not start: {error}"),
        (None, Some(status)) => status.as_str().to_owned(),
        (None, None) => String::new(),
    };
    ScheduleRow {
        id: schedule.id.clone(),
        workflow: schedule.workflow_name.clone(),
        when,
        next: schedule.next_execution.map(clock_text).unwrap_or_default(),
        last_run: schedule.last_run_id.clone().unwrap_or_default(),
        last_result,
        runs: schedule.total_executions,
        paused: schedule.paused,
    }
}

pub(crate) async fn change_schedule(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path((id, action)): Path<(String, String)>,
) -> Response {
    if !principal.scope.allows(Scope::Admin) {
        return forbidden(&principal, "pause or resume schedules");
    }
    let changed = match action.as_str() {
        "pause" => api.world.schedules().pause(&id).await,
        "resume" => api.world.schedules().resume(&id).await,
        _ => {
            return failure(
                &principal,
                &WorldError::NotFound {
                    what: "schedule action",
                    id: action,
                },
            )
        }
    };
    match changed {
        Ok(schedule) => {
            let state = if schedule.paused { "paused" } else { "resumed" };
            let notice = format!("Schedule {id} {state}.");
            Redirect::to(&format!("/schedules?{}", query(&[("notice", notice)]))).into_response()
        }
        Err(e) => failure(&principal, &e),
    }
}

struct WorkerRow {
    id: String,
    status: String,
    task: String,
    done: u64,
}

#[derive(Template)]
#[template(path = "workers.html")]
struct Workers {
    page: Page,
    metrics: WorldMetrics,
    uptime: String,
    workers: Vec<WorkerRow>,
    charts: Vec<super::charts::Chart>,
}

pub(crate) async fn workers(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Extension(samples): Extension<Arc<super::charts::Samples>>,
) -> Response {
    let metrics = api.world.get_metrics();
    let now = super::charts::Sample::of(api.world.clock().now_ms(), &metrics);
    let charts = super::charts::charts(samples.all(), now);
    let workers = api
        .world
        .workers()
        .list()
        .into_iter()
        .map(|w| WorkerRow {
            status: serde_json::to_value(w.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            task: w.current_task.unwrap_or_default(),
            done: w.tasks_completed,
            id: w.id,
        })
        .collect();
    let view = Workers {
        page: Page::of(&principal, "workers"),
        uptime: duration_text(Millis::try_from(metrics.uptime).unwrap_or(Millis::MAX)),
        metrics,
        workers,
        charts,
    };
    render(&view, StatusCode::OK)
}

// ---- a run's stream, live ----

#[derive(Debug, Default, Deserialize)]
pub(crate) struct StreamQuery {
    run: String,
    name: String,
}

/// A run's stream from its first chunk, then live, as the API's `…/streams/{name}/live`
/// sends it (`chunk` events with the chunk as JSON, then `end`).
pub(crate) async fn live_stream(
    State(api): State<Api>,
    Query(q): Query<StreamQuery>,
    headers: HeaderMap,
) -> Response {
    // A reconnecting browser continues after the last chunk it got.
    let from = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map_or(0, |last| last.saturating_add(1));
    match api.world.streams().read(&q.run, &q.name, from).await {
        Ok(chunks) => Sse::new(crate::routes::streams::events(chunks))
            .keep_alive(KeepAlive::default())
            .into_response(),
        Err(e) => (
            StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::NOT_FOUND),
            e.to_string(),
        )
            .into_response(),
    }
}

// ---- live ----

#[derive(Debug, Default, Deserialize)]
pub(crate) struct LiveQuery {
    /// A run id: watch that run; without it, watch the list.
    #[serde(default)]
    run: String,
}

/// Server-Sent Events telling a page that what it shows changed (`change`), so its script
/// fetches the page again; a run page gets `end` once its run finished.
pub(crate) async fn live(
    State(api): State<Api>,
    Query(q): Query<LiveQuery>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let changes = api.world.status_changes();
    let stream = futures::stream::unfold(
        (api, q.run, changes, None::<String>, false),
        |(api, run, mut changes, mut last, ended)| async move {
            if ended {
                return None;
            }
            loop {
                let (now, done) = signature(&api, &run).await;
                let changed = last.as_ref().is_some_and(|l| *l != now);
                let first = last.is_none();
                last = Some(now);
                if done && !first {
                    let event = SseEvent::default().event("end").data("done");
                    return Some((Ok(event), (api, run, changes, last, true)));
                }
                if changed {
                    let event = SseEvent::default().event("change").data("changed");
                    return Some((Ok(event), (api, run, changes, last, false)));
                }
                if run.is_empty() {
                    // The runs list: woken by this process's status changes (at most every
                    // LIVE_EVERY), and looking anyway now and then for other processes'.
                    let _ = tokio::time::timeout(LIST_POLL_EVERY, changes.changed()).await;
                }
                tokio::time::sleep(LIVE_EVERY).await;
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// What a live page compares: a run's status and event count, or the first page of runs.
async fn signature(api: &Api, run: &str) -> (String, bool) {
    if run.is_empty() {
        let page = api
            .world
            .list_runs(WorkflowQueryFilter::new().limit(PAGE))
            .await;
        let text = page.map_or_else(
            |e| e.to_string(),
            |p| {
                p.data
                    .iter()
                    .map(|r| format!("{}:{}", r.id, r.status.as_str()))
                    .collect::<Vec<_>>()
                    .join(",")
            },
        );
        return (text, false);
    }
    match api.world.get_run(run, ResolveData::None).await {
        Ok(state) => (
            format!("{}:{}", state.status.as_str(), state.event_count),
            state.status.is_terminal(),
        ),
        Err(e) => (e.to_string(), true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations_read_well() {
        assert_eq!(local_time_ms("1970-01-01T00:01"), Some(60_000));
        assert_eq!(local_time_ms("yesterday"), None);
        assert_eq!(duration_text(250), "250 ms");
        assert_eq!(duration_text(1_500), "1.5 s");
        assert_eq!(duration_text(125_000), "2m 5s");
        assert_eq!(duration_text(3_900_000), "1h 5m");
        assert_eq!(segment("a b/ü"), "a%20b%2F%C3%BC");
        assert_eq!(query(&[("notice", "a b&c")]), "notice=a+b%26c");
    }
}
