//! Encryption at rest over real HTTP: a server whose world cannot open a run stored encrypted
//! (no keys, or a key of the right id with other bytes) refuses every write to it, the API's
//! and the DevKit's, and every read that would hand out its sealed values, with 501 and a
//! message saying what it lacks; nothing of what it was sent reaches the disk, and the world
//! with the key carries on.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};
use worlds_engine::prelude::*;
use worlds_engine::{EncryptionKeys, HookOptions, HookStatus, ResolveData};
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions};

/// Sent by the servers that cannot open the run; must never be stored.
const FORGED: &str = "forged-over-http-5521";

fn config(dir: &Path, keys: Option<EncryptionKeys>) -> WorldConfig {
    let mut config = WorldConfig::memory();
    config.persistence = Persistence::Hybrid;
    config.persistence_path = dir.to_path_buf();
    config.encryption_keys = keys;
    config
}

/// Writes a chunk, then waits on a hook with a known token and returns its payload.
fn waiter() -> Workflow<String, String> {
    workflow("waiter", |ctx: WorkflowContext, input: String| async move {
        ctx.get_writable()
            .write(format!("chunk of {input}"))
            .map_err(|e| WorkflowError::msg(e.to_string()))?;
        let answer = ctx
            .create_hook_with::<String>(HookOptions::new().token("approval-1"))
            .wait()
            .await?;
        Ok::<_, WorkflowError>(answer)
    })
}

fn echo() -> Workflow<String, String> {
    workflow("echo", |_ctx: WorkflowContext, input: String| async move {
        Ok::<_, WorkflowError>(input)
    })
}

/// Every byte of every file under `dir` that holds `needle`: (path).
fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle.as_bytes())
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

/// A server on a world of `dir` with these keys (not started: it only answers calls), and an
/// admin key for it.
async fn served(
    dir: &Path,
    keys: Option<EncryptionKeys>,
) -> (Arc<World>, worlds_server::ApiServer, String, String) {
    let world = Arc::new(World::new(config(dir, keys)).unwrap());
    let ring = Arc::new(KeyRing::new());
    let admin = ring
        .create("admin", Scope::Admin, world.clock().now_ms(), None)
        .key;
    let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(ring))
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    (world, server, base, admin)
}

/// Calls the API: (status, JSON body).
async fn call(
    base: &str,
    key: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = Client::new()
        .request(method, format!("{base}{path}"))
        .bearer_auth(key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The refusal: 501, the error shape, and a message saying why.
fn assert_refused(what: &str, (status, body): (StatusCode, Value), says: &str) {
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{what}: {body}");
    assert_eq!(body["code"], "UNSUPPORTED", "{what}: {body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "{what}: {message}");
    assert!(message.contains("'k1'"), "{what}: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_open_a_run_refuses_to_write_to_it_or_hand_out_its_sealed_values() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let k1 = EncryptionKeys::new("k1", [5; 32]).unwrap();

    // With the key: a run waiting on its hook, a finished run, a schedule.
    let (waiting, finished, external) = {
        let world = World::new(config(dir.path(), Some(k1.clone()))).unwrap();
        world.register(waiter()).unwrap().register(echo()).unwrap();
        world.start().await.unwrap();
        let finished = world
            .execute(
                &echo(),
                "the secret output".to_owned(),
                WorkflowOptions::default(),
            )
            .await
            .unwrap();
        finished.result().await.unwrap();
        let waiting = world
            .execute(
                &waiter(),
                "the secret input".to_owned(),
                WorkflowOptions::default(),
            )
            .await
            .unwrap()
            .id;
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let state = world.get_run(&waiting, ResolveData::None).await.unwrap();
                if state.hooks.iter().any(|h| h.status == HookStatus::Waiting) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the run waits on its hook");
        world
            .schedules()
            .cron("nightly", "echo", "the secret schedule input", "0 3 * * *")
            .await
            .unwrap();
        // A run a DevKit runtime drives, started.
        let external = world
            .external()
            .create(
                "workflow//app.ts//order",
                worlds_engine::Payload::encode(&["the secret order"]).unwrap(),
                None,
            )
            .await
            .unwrap()
            .id;
        world
            .external()
            .append(
                &external,
                vec![worlds_engine::EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                }],
            )
            .await
            .unwrap();
        world.shutdown().await.unwrap();
        (waiting, finished.id, external)
    };

    let no_keys = "encrypted, and this world has no keys";
    let wrong_key = "may not be the ones it was sealed with";
    for (keys, says) in [
        (None, no_keys),
        (Some(EncryptionKeys::new("k1", [6; 32]).unwrap()), wrong_key),
    ] {
        let (world, server, base, admin) = served(dir.path(), keys).await;
        let call = |method: Method, path: String, body: Option<Value>| {
            let (base, admin) = (base.clone(), admin.clone());
            async move { call(&base, &admin, method, &path, body).await }
        };
        assert_refused(
            "resume",
            call(
                Method::POST,
                "/v1/hooks/resume".into(),
                Some(json!({ "token": "approval-1", "payload": FORGED })),
            )
            .await,
            says,
        );
        assert_refused(
            "cancel",
            call(
                Method::POST,
                format!("/v1/runs/{waiting}/cancel"),
                Some(json!({ "reason": FORGED })),
            )
            .await,
            says,
        );
        let written = Client::new()
            .post(format!("{base}/v1/runs/{waiting}/streams/default"))
            .bearer_auth(&admin)
            .body(FORGED)
            .send()
            .await
            .unwrap();
        let status = written.status();
        let body: Value = written.json().await.unwrap();
        assert_refused("stream write", (status, body), says);
        // What a DevKit runtime records (a step, a hook, attributes), each an `events.create`
        // or the attributes route of the 5.x World.
        for (what, event) in [
            (
                "DevKit step",
                json!({"eventType": "step_created", "correlationId": "step_forged_1", "eventData": {"stepName": "step//app.ts//charge", "input": [FORGED]}}),
            ),
            (
                "DevKit step started",
                json!({"eventType": "step_started", "correlationId": "step_forged_2", "eventData": {"stepName": "step//app.ts//charge", "input": [FORGED]}}),
            ),
            (
                "DevKit hook",
                json!({"eventType": "hook_created", "correlationId": "hook_forged_1", "eventData": {"token": FORGED}}),
            ),
            (
                "DevKit attributes",
                json!({"eventType": "attr_set", "eventData": {"changes": [{"key": "note", "value": FORGED}]}}),
            ),
            (
                "DevKit completion",
                json!({"eventType": "run_completed", "eventData": {"output": FORGED}}),
            ),
        ] {
            assert_refused(
                what,
                call(
                    Method::POST,
                    "/v1/devkit/events".into(),
                    Some(json!({ "runId": external, "event": event, "params": {} })),
                )
                .await,
                says,
            );
        }
        assert_refused(
            "DevKit attributes route",
            call(
                Method::POST,
                format!("/v1/devkit/runs/{external}/attributes"),
                Some(json!({ "changes": [{"key": "note", "value": FORGED}] })),
            )
            .await,
            says,
        );
        assert_refused(
            "result",
            call(
                Method::GET,
                format!("/v1/runs/{finished}/result?wait_ms=0"),
                None,
            )
            .await,
            says,
        );
        assert_refused(
            "stream chunks",
            call(
                Method::GET,
                format!("/v1/runs/{waiting}/streams/default"),
                None,
            )
            .await,
            says,
        );
        assert_refused(
            "schedule",
            call(Method::GET, "/v1/schedules/nightly".into(), None).await,
            says,
        );
        server.shutdown().await;
        world.shutdown().await.unwrap();
        drop(world);
        assert_eq!(files_holding(dir.path(), FORGED), Vec::<String>::new());
    }

    // With the key again: the real answer is taken and the run ends with it.
    let world = World::new(config(dir.path(), Some(k1))).unwrap();
    world.register(waiter()).unwrap().register(echo()).unwrap();
    world.start().await.unwrap();
    world
        .resume_hook("approval-1", "the real answer")
        .await
        .unwrap();
    let handle = world.handle::<String>(&waiting).await.unwrap();
    let output = tokio::time::timeout(Duration::from_secs(10), handle.result())
        .await
        .expect("the run ends")
        .unwrap();
    assert_eq!(output, "the real answer");
    world.shutdown().await.unwrap();
    assert_eq!(
        files_holding(dir.path(), "the real answer"),
        Vec::<String>::new()
    );
}
