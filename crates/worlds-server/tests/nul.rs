//! NUL (U+0000) in every string a caller of the API can choose, over real loopback HTTP, on
//! memory, file, hybrid and PostgreSQL storage: never a 500, and the same answer from every
//! backend — identifiers and names holding NUL are refused with a 400 naming the field, lookups,
//! filters and cursors holding it find nothing, and payloads holding it round-trip.

use std::sync::Arc;

use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};
use worlds_engine::prelude::*;
use worlds_engine::Persistence;
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions};

/// What one backend answered to every request of the walk: (request, status, error code or
/// the part of the body that must match across backends).
type Answers = Vec<(String, u16, Value)>;

async fn walk(world: Arc<World>) -> Answers {
    let echo = workflow("echo", |_ctx: WorkflowContext, input: Value| async move {
        Ok::<_, WorkflowError>(input)
    });
    world.register(&echo).unwrap();
    world.start().await.unwrap();
    let keys = Arc::new(KeyRing::new());
    let key = keys
        .create("t", Scope::Admin, world.clock().now_ms(), None)
        .key;
    let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let http = Client::new();
    let call = |method: Method, path: String, body: Option<Value>| {
        let mut request = http
            .request(method, format!("{base}{path}"))
            .bearer_auth(&key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            let text = response.text().await.unwrap();
            let body: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {text}"));
            (status, body)
        }
    };

    // A run driven from outside, to hang steps, hooks and waits on: created and started as a
    // DevKit 5.x runtime does, each write an `events.create`.
    let (status, created) = call(
        Method::POST,
        "/v1/devkit/events".into(),
        Some(
            json!({"runId": null, "event": {"eventType": "run_created", "eventData": {"workflowName": "w", "input": []}}}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let id = created["run"]["runId"].as_str().unwrap().to_owned();
    let (status, started) = call(
        Method::POST,
        "/v1/devkit/events".into(),
        Some(json!({"runId": id, "event": {"eventType": "run_started"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    // An `events.create` of `run` (the run above unless another is named).
    let event = |run: &str, event: Value| {
        (
            Method::POST,
            "/v1/devkit/events".to_owned(),
            Some(json!({"runId": run, "event": event, "params": {}})),
        )
    };

    let nul = "a\u{0}b";
    let requests: Vec<(Method, String, Option<Value>)> = vec![
        // Identifiers and names a caller chooses: 400 naming the field.
        (
            Method::POST,
            "/v1/runs".into(),
            Some(json!({"workflow": "echo", "input": 1, "options": {"idempotency_key": nul}})),
        ),
        (
            Method::POST,
            "/v1/runs".into(),
            Some(json!({"workflow": "echo", "input": 1, "options": {"workflow_id": nul}})),
        ),
        (
            Method::POST,
            "/v1/runs".into(),
            Some(json!({"workflow": nul, "input": 1})),
        ),
        event(
            &id,
            json!({"eventType": "step_created", "correlationId": nul, "eventData": {"stepName": "s", "input": []}}),
        ),
        event(
            &id,
            json!({"eventType": "step_started", "correlationId": nul, "eventData": {"stepName": "s", "input": []}}),
        ),
        event(
            &id,
            json!({"eventType": "step_created", "correlationId": "step_n", "eventData": {"stepName": nul, "input": []}}),
        ),
        event(
            &id,
            json!({"eventType": "hook_created", "correlationId": nul, "eventData": {"token": "tok-1"}}),
        ),
        event(
            &id,
            json!({"eventType": "wait_created", "correlationId": nul, "eventData": {"resumeAt": 1}}),
        ),
        event(
            &id,
            json!({"eventType": "attr_set", "eventData": {"changes": [{"key": nul, "value": "v"}]}}),
        ),
        (
            Method::POST,
            format!("/v1/devkit/runs/{id}/attributes"),
            Some(json!({"changes": [{"key": "k", "value": nul}]})),
        ),
        (
            Method::POST,
            "/v1/devkit/events".into(),
            Some(
                json!({"runId": null, "event": {"eventType": "run_created", "eventData": {"workflowName": nul, "input": []}}}),
            ),
        ),
        (
            Method::POST,
            "/v1/devkit/events".into(),
            Some(
                json!({"runId": null, "event": {"eventType": "run_created", "eventData": {"workflowName": "w", "deploymentId": nul, "input": []}}}),
            ),
        ),
        (
            Method::POST,
            "/v1/devkit/events".into(),
            Some(
                json!({"runId": null, "event": {"eventType": "run_created", "eventData": {"workflowName": "w", "input": [], "attributes": {"a": nul}}}}),
            ),
        ),
        event(
            "wrun_a\u{0}b",
            json!({"eventType": "run_created", "eventData": {"workflowName": "w", "input": []}}),
        ),
        // A run_started of a run not created yet creates it: the id it names is refused.
        event(
            "wrun_a\u{0}c",
            json!({"eventType": "run_started", "eventData": {"workflowName": "w", "deploymentId": "d", "input": []}}),
        ),
        (
            Method::POST,
            "/v1/schedules".into(),
            Some(json!({"id": nul, "workflow": "echo", "cron": "0 * * * *"})),
        ),
        (Method::POST, format!("/v1/runs/{id}/streams/a%00b"), None),
        // A token is only ever stored as its digest: it may hold NUL.
        event(
            &id,
            json!({"eventType": "hook_created", "correlationId": "hook_t", "eventData": {"token": nul}}),
        ),
        (
            Method::POST,
            "/v1/devkit/hooks/by-token".into(),
            Some(json!({"token": nul})),
        ),
        (
            Method::POST,
            "/v1/hooks/resume".into(),
            Some(json!({"token": "a\u{0}c", "payload": 1})),
        ),
        // Lookups, filters and cursors: nothing found.
        (Method::GET, "/v1/runs?cursor=%00".into(), None),
        (
            Method::GET,
            "/v1/runs?cursor=%00&order=ascending&limit=1".into(),
            None,
        ),
        (Method::GET, "/v1/runs?parent=%00".into(), None),
        (Method::GET, "/v1/runs?workflow=%00".into(), None),
        (Method::GET, "/v1/runs?code_version=%00".into(), None),
        (Method::GET, "/v1/runs?workflow_id_prefix=%00".into(), None),
        (Method::GET, "/v1/runs/a%00b".into(), None),
        (Method::GET, "/v1/runs/a%00b/events".into(), None),
        (Method::GET, "/v1/runs/a%00b/steps".into(), None),
        (Method::GET, "/v1/runs/a%00b/waits".into(), None),
        (Method::GET, "/v1/runs/a%00b/hooks".into(), None),
        (Method::GET, "/v1/runs/a%00b/streams".into(), None),
        (Method::GET, "/v1/runs/a%00b/result?wait_ms=0".into(), None),
        (
            Method::POST,
            "/v1/runs/a%00b/cancel".into(),
            Some(json!({})),
        ),
        (
            Method::GET,
            format!("/v1/runs/{id}/events?cursor=%00"),
            None,
        ),
        (Method::GET, format!("/v1/runs/{id}/steps?cursor=%00"), None),
        (Method::GET, format!("/v1/runs/{id}/streams/a%00b"), None),
        (Method::GET, "/v1/hooks/a%00b".into(), None),
        (Method::GET, "/v1/hooks?cursor=%00".into(), None),
        (Method::GET, "/v1/schedules/a%00b".into(), None),
        (
            Method::GET,
            "/v1/devkit/events?correlationId=%00".into(),
            None,
        ),
        (
            Method::GET,
            "/v1/devkit/events?correlationId=step_x&cursor=%00".into(),
            None,
        ),
        (Method::GET, "/v1/devkit/runs/a%00b/steps".into(), None),
        (Method::GET, "/v1/devkit/runs/a%00b/steps/x".into(), None),
        (Method::GET, "/v1/devkit/runs/a%00b/events".into(), None),
        (Method::GET, "/v1/devkit/runs/a%00b/events/x".into(), None),
        (
            Method::GET,
            format!("/v1/devkit/runs/{id}/events/a%00b"),
            None,
        ),
        (
            Method::POST,
            "/v1/devkit/runs/a%00b/attributes".into(),
            Some(json!({"changes": [{"key": "k", "value": "v"}]})),
        ),
        event(
            "a\u{0}b",
            json!({"eventType": "step_started", "correlationId": "step_x"}),
        ),
        event(
            &id,
            json!({"eventType": "step_started", "correlationId": nul}),
        ),
        event(
            &id,
            json!({"eventType": "hook_received", "correlationId": nul, "eventData": {"payload": 1}}),
        ),
        event(
            &id,
            json!({"eventType": "wait_completed", "correlationId": nul}),
        ),
        (Method::GET, "/v1/devkit/runs?cursor=%00".into(), None),
        (Method::GET, "/v1/devkit/runs?workflowName=%00".into(), None),
        (Method::GET, "/v1/devkit/runs/a%00b".into(), None),
        (
            Method::GET,
            format!("/v1/devkit/runs/{id}/steps/a%00b"),
            None,
        ),
        (
            Method::GET,
            format!("/v1/devkit/runs/{id}/events?cursor=%00"),
            None,
        ),
        (Method::GET, "/v1/devkit/hooks/a%00b".into(), None),
        (Method::GET, "/v1/devkit/hooks?runId=a%00b".into(), None),
        (Method::GET, "/v1/devkit/hooks?cursor=%00".into(), None),
        event(
            &id,
            json!({"eventType": "hook_disposed", "correlationId": nul}),
        ),
        // Payloads holding NUL are taken and kept.
        event(
            &id,
            json!({"eventType": "step_created", "correlationId": "step_p", "eventData": {"stepName": "s", "input": [nul]}}),
        ),
        (
            Method::GET,
            format!("/v1/devkit/runs/{id}/steps/step_p"),
            None,
        ),
    ];
    let mut answers = Vec::new();
    for (method, path, body) in requests {
        let request = format!(
            "{method} {path} {}",
            body.as_ref().map(Value::to_string).unwrap_or_default()
        )
        .replace(&id, "{run}");
        let (status, body) = call(method, path, body).await;
        assert!(!status.is_server_error(), "{request} → {status} {body}");
        let kept = match status.is_success() {
            // What must match: the error's code and, for a refused field, the field.
            false => json!({"code": body["code"], "field": body["details"]["field"]}),
            true => match &body {
                Value::Object(map) if map.contains_key("data") => {
                    json!({"data": body["data"].as_array().map(Vec::len)})
                }
                Value::Object(map) if map.contains_key("input") => json!({"input": body["input"]}),
                _ => Value::Null,
            },
        };
        answers.push((request, status.as_u16(), kept));
    }

    // A run started with NUL in its input gets it back byte for byte.
    let (status, started) = call(
        Method::POST,
        "/v1/runs?wait_ms=10000".into(),
        Some(json!({"workflow": "echo", "input": {"text": nul}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    answers.push(("echo".into(), status.as_u16(), started["output"].clone()));
    server.shutdown().await;
    world.shutdown().await.unwrap();
    answers
}

fn on_disk(persistence: Persistence, dir: &std::path::Path) -> WorldConfig {
    let mut config = WorldConfig::memory();
    config.persistence = persistence;
    config.persistence_path = dir.to_path_buf();
    config
}

#[tokio::test]
async fn nul_in_what_a_caller_chooses_gets_the_same_answer_on_every_backend() {
    use worlds_postgres::testing::{database_up, test_url, TestSchema};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let memory = walk(Arc::new(World::new(WorldConfig::memory()).unwrap())).await;
    let refused: Vec<&str> = memory
        .iter()
        .filter(|(_, status, _)| *status == 400)
        .filter_map(|(_, _, kept)| kept["field"].as_str())
        .collect();
    for field in [
        "idempotency key",
        "workflow id",
        "step id",
        "step name",
        "hook id",
        "wait id",
        "workflow name",
        "code version",
        "attributes",
    ] {
        assert!(refused.contains(&field), "{field} not refused: {memory:#?}");
    }
    assert_eq!(
        memory.last().unwrap().2,
        json!({"text": "a\u{0}b"}),
        "{memory:#?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let file = walk(Arc::new(
        World::new(on_disk(Persistence::File, &dir.path().join("file"))).unwrap(),
    ))
    .await;
    let hybrid = walk(Arc::new(
        World::new(on_disk(Persistence::Hybrid, &dir.path().join("hybrid"))).unwrap(),
    ))
    .await;
    for (backend, answers) in [("file", &file), ("hybrid", &hybrid)] {
        for (theirs, ours) in answers.iter().zip(&memory) {
            assert_eq!(theirs, ours, "{backend} differs from memory");
        }
    }
    if !database_up().await {
        return;
    }
    let schema = TestSchema::fresh();
    let mut config = WorldConfig::postgres(test_url());
    config.database.schema = schema.name().to_owned();
    let postgres = walk(Arc::new(worlds_postgres::open(config).await.unwrap())).await;
    for (theirs, ours) in postgres.iter().zip(&memory) {
        assert_eq!(theirs, ours, "PostgreSQL differs from memory");
    }
}
