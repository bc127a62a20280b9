//! `events.create` of the event-sourced DevKit World (spec version 2 and later): one DevKit
//! event is one atomic write to the engine run (planned in `plan.rs`), answered with the event
//! and the entity it changed; and `experimentalSetAttributes`, an `attr_set` by another road.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use worlds_engine::model::HookStatus;
use worlds_engine::{Event, EventKind, RunStatus, WorkflowState, WorldError};

use crate::error::ApiError;
use crate::state::Api;

use super::event::{too_early, CreateEvent, NewEvent};
use super::log::{self, LogEvent, LogReader, SPEC_VERSION};
use super::plan::{find_step, plan};

/// The last DevKit event of type `event_type` among `state.history[from..]` (the events a write
/// just appended), read with the history before them.
pub(crate) fn recorded(
    state: &WorkflowState,
    from: usize,
    event_type: &str,
    resolve: bool,
) -> Option<LogEvent> {
    LogReader::events_from(&state.history, from, resolve)
        .into_iter()
        .rev()
        .find(|e| e.event_type == event_type)
}

/// The `EventResult` of a write: the event and the entity it touched.
pub(crate) fn result(
    state: &WorkflowState,
    event: &NewEvent,
    recorded: Option<LogEvent>,
    resolve: bool,
) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(e) = recorded {
        out.insert("event".into(), e.value);
    }
    let kind = event.event_type.as_str();
    if kind.starts_with("run_") || kind == "attr_set" {
        out.insert("run".into(), log::run(state, resolve));
    } else if kind.starts_with("step_") {
        if let Some(id) = event.correlation_id.as_deref() {
            if let Some(a) = find_step(state, id) {
                out.insert("step".into(), log::step(state, a, resolve));
            }
        }
    } else if kind == "hook_created" {
        if let Some(h) = state
            .hooks
            .iter()
            .find(|h| Some(h.id.as_str()) == event.correlation_id.as_deref())
            .filter(|h| h.status != HookStatus::Conflict)
        {
            out.insert(
                "hook".into(),
                log::hook(state, h, event.text("token").as_deref(), resolve),
            );
        }
    } else if kind.starts_with("wait_") {
        if let Some(w) = event
            .correlation_id
            .as_deref()
            .and_then(|id| log::wait(state, id))
        {
            out.insert("wait".into(), w);
        }
    }
    out
}

/// The events of the run after `cursor` (one page), for an answer that carries them.
pub(crate) fn events_after(
    state: &WorkflowState,
    cursor: Option<u64>,
    resolve: bool,
    out: &mut Map<String, Value>,
) {
    const PAGE: usize = 1_000;
    // The history is in `seq` order: the events after the cursor are a tail of it.
    let from = cursor.map_or(0, |c| state.history.partition_point(|e| e.seq <= c));
    let mut events = LogReader::events_from(&state.history, from, resolve);
    let has_more = events.len() > PAGE;
    events.truncate(PAGE);
    let last = events.last().map(|e| e.seq.to_string());
    out.insert(
        "events".into(),
        Value::Array(events.into_iter().map(|e| e.value).collect()),
    );
    out.insert(
        "cursor".into(),
        json!(last.or_else(|| cursor.map(|c| c.to_string()))),
    );
    out.insert("hasMore".into(), json!(has_more));
}

/// Adds what a write appended to the state it was planned on, as a read after it would find.
fn applied(state: &mut WorkflowState, events: &[Arc<Event>]) {
    for event in events {
        state.apply(event);
        state.history.push((**event).clone());
    }
}

/// The run to write to, with its history; a `run_started` of a run not created yet (the
/// runtime queues the run's first message while it creates the run) creates it from the
/// event's data.
async fn load(
    external: &worlds_engine::ExternalRuns<'_>,
    run_id: &str,
    event: &NewEvent,
) -> Result<WorkflowState, ApiError> {
    let state = match external.get_with_history(run_id).await {
        Err(WorldError::NotFound { .. }) if event.can_create_run() => {
            match external
                .create_run(event.new_run(Some(run_id.to_owned()))?)
                .await
            {
                Ok(_) | Err(WorldError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            external.get_with_history(run_id).await?
        }
        other => other?,
    };
    if let Some(v) = state
        .runtime
        .as_ref()
        .and_then(|r| r.spec_version)
        .filter(|v| *v > SPEC_VERSION)
    {
        return Err(ApiError::upgrade_required(format!(
            "run {} was made by a DevKit runtime of spec version {v}; this server speaks version {SPEC_VERSION}",
            state.id
        )));
    }
    Ok(state)
}

/// `events.create`: records one DevKit event atomically and answers with it and the entity it
/// changed (`EventResult`). See `plan.rs` for what is refused.
#[utoipa::path(post, path = "/v1/devkit/events", tag = "devkit", request_body = crate::openapi::DevkitBody,
    security(("api_key" = [])),
    responses((status = 200, description = "The event and the entity it changed"), (status = 400, body = crate::openapi::ErrorDoc), (status = 404, body = crate::openapi::ErrorDoc), (status = 409, body = crate::openapi::ErrorDoc), (status = 410, body = crate::openapi::ErrorDoc), (status = 425, body = crate::openapi::ErrorDoc), (status = 426, body = crate::openapi::ErrorDoc)))]
pub(crate) async fn create_event(
    State(api): State<Api>,
    body: Result<Json<CreateEvent>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(CreateEvent {
        run_id,
        event,
        params,
    }) = body?;
    let resolve = params.resolve();
    if let Some(v) = event.spec_version.filter(|v| *v > SPEC_VERSION) {
        return Err(ApiError::upgrade_required(format!(
            "this event is of DevKit spec version {v}; this server speaks version {SPEC_VERSION}: upgrade the worlds server, or run the app on a DevKit runtime of spec version {SPEC_VERSION}"
        )));
    }
    let external = api.world.external();
    if event.event_type == "run_created" {
        let state = external.create_run(event.new_run(run_id)?).await?;
        let state = external.get_with_history(&state.id).await?;
        let out = result(
            &state,
            &event,
            recorded(&state, 0, "run_created", resolve),
            resolve,
        );
        return Ok(Json(Value::Object(out)));
    }
    let run_id = run_id
        .filter(|id| !id.is_empty())
        .ok_or_else(|| ApiError::invalid("runId", "every event but run_created names its run"))?;
    let _turn = api.devkit.lock(&run_id).await;
    let mut state = load(&external, &run_id, &event).await?;
    let now = api.world.clock().now_ms();
    if event.event_type == "step_started" {
        if let Some(a) = event
            .correlation_id
            .as_deref()
            .and_then(|id| find_step(&state, id))
        {
            if let Some(at) = log::retry_after(&state, a).filter(|at| *at > now) {
                return Err(too_early(&a.id, at, now));
            }
        }
    }
    if event.event_type == "run_started" && state.status == RunStatus::Running {
        // Started already (a second delivery): answered as it stands, nothing recorded.
        let mut out = Map::new();
        out.insert("run".into(), log::run(&state, resolve));
        return Ok(Json(Value::Object(out)));
    }
    let plan = plan(&state, &event, now)?;
    let before = state.history.len();
    if !plan.kinds.is_empty() {
        let appended = external.append(&state.id, plan.kinds).await?;
        applied(&mut state, &appended.events);
    }
    let mut conflict_event = None;
    if let Some(hook) = plan.hook {
        let Some(made) = external
            .create_hook(
                &state.id,
                hook.position,
                &hook.hook_id,
                &hook.token,
                hook.metadata,
            )
            .await?
        else {
            return Err(WorldError::Gone(format!(
                "run {} has ended; it takes no new hooks",
                state.id
            ))
            .into());
        };
        applied(&mut state, &made);
        if made
            .iter()
            .any(|e| matches!(e.kind, EventKind::HookConflict { .. }))
        {
            let holder = external.hook_by_token(&hook.token).await?.map(|h| h.run_id);
            conflict_event = Some((hook.token, holder));
        }
    }
    let event_type = if conflict_event.is_some() {
        "hook_conflict"
    } else {
        event.event_type.as_str()
    };
    let mut logged = recorded(&state, before, event_type, resolve);
    if let (Some(e), Some((token, holder))) = (logged.as_mut(), conflict_event) {
        if let Some(data) = e.value.as_object_mut() {
            let mut fields = Map::new();
            fields.insert("token".into(), json!(token));
            if let Some(holder) = holder {
                fields.insert("conflictingRunId".into(), json!(holder));
            }
            data.insert("eventData".into(), Value::Object(fields));
        }
    }
    let mut out = result(&state, &event, logged, resolve);
    if plan.step_created {
        out.insert("stepCreated".into(), json!(true));
    }
    if event.event_type == "run_started" && params.skip_preload != Some(true) {
        events_after(&state, None, resolve, &mut out);
    }
    if matches!(event.event_type.as_str(), "step_completed" | "step_failed") {
        if let Some(cursor) = params.since_cursor.as_deref().and_then(|c| c.parse().ok()) {
            events_after(&state, Some(cursor), resolve, &mut out);
        }
    }
    Ok(Json(Value::Object(out)))
}

/// The body of `experimentalSetAttributes`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SetAttributes {
    changes: Value,
    #[serde(default)]
    allow_reserved_attributes: bool,
}

/// `runs.experimentalSetAttributes`: changes a run's attributes (a value sets its key, `null`
/// removes it) and answers with all of them, recorded as an `attr_set` event of the run (no
/// correlation id, so a repeat is applied again, which leaves the same attributes).
#[utoipa::path(post, path = "/v1/devkit/runs/{id}/attributes", tag = "devkit", request_body = crate::openapi::DevkitBody,
    params(("id" = String, Path, description = "A run id")),
    security(("api_key" = [])),
    responses((status = 200, description = "The run's attributes after the change"), (status = 400, body = crate::openapi::ErrorDoc), (status = 404, body = crate::openapi::ErrorDoc), (status = 409, body = crate::openapi::ErrorDoc)))]
pub(crate) async fn set_attributes(
    State(api): State<Api>,
    Path(run_id): Path<String>,
    body: Result<Json<SetAttributes>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body?;
    let mut data = Map::new();
    data.insert("changes".into(), body.changes);
    data.insert(
        "allowReservedAttributes".into(),
        Value::Bool(body.allow_reserved_attributes),
    );
    let event = NewEvent::new("attr_set", data);
    let external = api.world.external();
    let _turn = api.devkit.lock(&run_id).await;
    let mut state = load(&external, &run_id, &event).await?;
    let plan = plan(&state, &event, api.world.clock().now_ms())?;
    let appended = external.append(&state.id, plan.kinds).await?;
    applied(&mut state, &appended.events);
    let attributes = state
        .runtime
        .as_ref()
        .map(|r| r.attributes.clone())
        .unwrap_or_default();
    Ok(Json(json!({ "attributes": attributes })))
}
