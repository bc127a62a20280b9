//! The schedules page (pause, resume) and the workers page with its charts.

use super::*;
use worlds_engine::ErrorKind;

// ---- schedules, workers ----

struct ScheduleRow {
    id: String,
    workflow: String,
    when: String,
    next: String,
    /// The last run, linked; empty when there is none to link to.
    last_run: String,
    /// The last run once retention removed it: shown as text, not linked.
    removed_run: String,
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
            Some(id) => match api.world.get_run(id, ResolveData::None).await {
                Ok(run) => LastRun::Status(run.status),
                // Removed by a sweep that had not yet changed the schedule (or was stopped
                // before it could): no link to a page that is gone.
                Err(e) if e.kind() == ErrorKind::NotFound => LastRun::Gone,
                Err(_) => LastRun::Unknown,
            },
            None => LastRun::Unknown,
        };
        rows.push(schedule_row(schedule, last));
    }
    render(&Schedules { page, rows }, StatusCode::OK)
}

/// What the dashboard found of the run a schedule started last.
enum LastRun {
    /// It exists, with this status.
    Status(RunStatus),
    /// The store has no such run: retention removed it.
    Gone,
    /// None is named, or it could not be read.
    Unknown,
}

/// A schedule as its row shows it, with what was found of the run it started last.
fn schedule_row(schedule: &ScheduleConfig, last: LastRun) -> ScheduleRow {
    let when = match (&schedule.cron_expression, &schedule.time_zone) {
        (Some(cron), Some(zone)) => format!("{cron} ({zone})"),
        (Some(cron), None) => cron.clone(),
        (None, _) => "on demand".to_owned(),
    };
    let last_result = match (&schedule.last_error, &last) {
        (Some(error), _) => format!("could not start: {error}"),
        (None, LastRun::Status(status)) => status.as_str().to_owned(),
        (None, _) => String::new(),
    };
    let (last_run, removed_run) = match (&schedule.last_run_id, last) {
        (Some(id), LastRun::Gone) => (String::new(), id.clone()),
        (Some(id), _) => (id.clone(), String::new()),
        (None, _) => (
            String::new(),
            schedule.removed_last_run_id.clone().unwrap_or_default(),
        ),
    };
    ScheduleRow {
        id: schedule.id.clone(),
        workflow: schedule.workflow_name.clone(),
        when,
        next: schedule.next_execution.map(clock_text).unwrap_or_default(),
        last_run,
        removed_run,
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
    charts: Vec<crate::dashboard::charts::Chart>,
}

pub(crate) async fn workers(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Extension(samples): Extension<Arc<crate::dashboard::charts::Samples>>,
) -> Response {
    let metrics = api.world.get_metrics();
    let now = crate::dashboard::charts::Sample::of(api.world.clock().now_ms(), &metrics);
    let charts = crate::dashboard::charts::charts(samples.all(), now);
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
