//! The OpenAPI document served at `GET /v1/openapi.json`.
//!
//! It is collected from the same route list the router is built from (utoipa-axum's
//! `routes!`), so a route cannot exist without its entry or the reverse. The request bodies,
//! query parameters and answers of the API's own types are described field by field, from the
//! `worlds-wire` types the handlers read and write (the client's too); the engine's records (a
//! run, an event, a step…) appear as named objects whose description says which engine type
//! they serialize, with their fields documented in the engine's rustdoc. Those a wire body
//! carries are declared in `worlds_wire::openapi`, the others here.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi;
use utoipa::Modify;
use worlds_wire::engine_record;

/// Every refusal's schema, named `Error` (the body is [`worlds_wire::ErrorBody`]).
pub(crate) use worlds_wire::ErrorBody as ErrorDoc;

/// Where the OpenAPI document is served (read scope).
pub const OPENAPI_PATH: &str = "/v1/openapi.json";

/// The name of the security scheme every guarded route requires.
pub(crate) const BEARER: &str = "api_key";

engine_record!(
    pub(crate) Run,
    "A run: status, input, output or error, its steps, hooks and children (`worlds_engine::WorkflowState`)."
);
engine_record!(
    pub(crate) HistoryEvent,
    "One event of a run's history: `seq`, `at`, and the event's `type` with its fields (`worlds_engine::Event`)."
);
engine_record!(
    pub(crate) Step,
    "A step of a run: name, position, status, attempts, output or last error (`worlds_engine::model::ActivityState`)."
);
engine_record!(
    pub(crate) Hook,
    "A hook and the run waiting on it; never its token (`worlds_engine::HookRecord`)."
);
engine_record!(
    pub(crate) Schedule,
    "A schedule: id, workflow, cron or interval, input, paused, last and next firing, the last run (`last_run_id`; `removed_last_run_id` once retention removed it) (`worlds_engine::schedule::ScheduleConfig`)."
);
engine_record!(
    pub(crate) PauseRecord,
    "A pause in force: `target` (`{\"kind\": \"workflow\" | \"task_queue\", \"name\"}`), `by` (who paused it: `key:<id>` over the API), `reason`, `since` (ms since the Unix epoch) (`worlds_engine::model::Pause`)."
);
engine_record!(
    pub(crate) Metrics,
    "The world's counters and gauges: runs by status, queue depth, workers, step latencies (`worlds_engine::WorldMetrics`)."
);
engine_record!(
    pub(crate) RunWait,
    "One thing an unfinished run waits on: `on` (`start`, `step_queued`, `step_running`, `step_retry`, `timer`, `hook`, `child`, `workflow_retry`, `paused` with the pause's `target`, `by`, `reason`, `paused_since` and the held `step`) with its fields, `since`, `due`, and a `concern` when the waiting looks stuck (`worlds_engine::model::Wait`)."
);
engine_record!(
    pub(crate) PruneReport,
    "What a retention sweep did, or its preview would do: `id` (the sweep's run, none for a preview), `dry_run`, `at` (the time the policy judged by, ms since the Unix epoch), `status`, `looked_at`, `removed`, `events`, `bytes` (preview only), `kept_by_policy`, `kept_in_use`, `kept_for_bulk`, `already_gone`, `next_due`, `done` (`worlds_engine::PruneReport`)."
);
engine_record!(
    pub(crate) Retention,
    "The world's retention: `policy` (`completed`, `failed`, `cancelled`, `quarantined` durations, 0 keeping for ever; `workflows` rules by name; `sweep_interval`), `enabled`, `next_sweep_at`, `last_sweep` (a PruneReport) (`worlds_engine::RetentionStatus`)."
);
engine_record!(
    pub(crate) DevkitRun,
    "A Workflow DevKit run (`WorkflowRun` of spec version 5): `runId`, `deploymentId`, `workflowName`, `status`, `specVersion`, `executionContext`, `attributes`, `input`, `output` or `error` and `errorCode`, `startedAt`, `completedAt`, `createdAt`, `updatedAt` (RFC 3339; absent fields left out; payloads as stored, bytes as `{\"$bytes\": base64}`)."
);
engine_record!(
    pub(crate) DevkitStep,
    "A Workflow DevKit step: `runId`, `stepId`, `stepName`, `status`, `input`, `output` or `error`, `attempt`, `startedAt` (the first attempt's), `completedAt`, `createdAt`, `updatedAt`, `retryAfter`, `specVersion` (RFC 3339 times)."
);
engine_record!(
    pub(crate) DevkitHook,
    "A Workflow DevKit hook: `runId`, `hookId`, `token` (only where the caller gave it: only its digest is stored), `metadata`, `ownerId`, `projectId`, `environment`, `createdAt`, `specVersion`."
);
engine_record!(
    pub(crate) DevkitEvent,
    "A Workflow DevKit event of a run's event log: `runId`, `eventId` (`evnt_…`), `eventType`, `correlationId`, `eventData`, `createdAt`, `specVersion`."
);
engine_record!(
    pub(crate) DevkitPage,
    "One page of DevKit records: `data`, `cursor` (null on the last page), `hasMore`."
);
engine_record!(
    pub(crate) DevkitQueued,
    "A queued DevKit message: `messageId`, the id of the run that delivers it."
);
engine_record!(
    pub(crate) DevkitBody,
    "The body of a Workflow DevKit World call, as the `@worlds-engine/devkit-world` package sends it (camelCase fields; see the route's description)."
);

/// Adds the bearer scheme, which every guarded route names.
pub(crate) struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("wek_…")
                    .description(Some(
                        "An API key (`Authorization: Bearer wek_…`); its scope (read, write, admin) must cover the route",
                    ))
                    .build(),
            ),
        );
    }
}

/// The document's title, version and description over the collected paths.
pub(crate) fn finish(mut doc: OpenApi) -> OpenApi {
    doc.info.title = "worlds-engine API".into();
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    doc.info.description = Some(
        "Start and watch durable workflow runs, resume hooks, read streams and manage schedules. Every route but the health checks needs an API key.".into(),
    );
    Security.modify(&mut doc);
    doc
}
