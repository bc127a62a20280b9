//! Hostile request bodies over real loopback HTTP: JSON nested 100 000 levels deep as a run's
//! input or a hook's payload gets a clear 400 (never a stack overflow) and records nothing;
//! strings with NUL and lone surrogate escapes round-trip as the caller sent them.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use worlds_engine::prelude::*;
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions};

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[tokio::test]
async fn deeply_nested_bodies_are_refused_and_odd_strings_round_trip() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let world = Arc::new(World::new(WorldConfig::memory()).unwrap());
    let echo = workflow("echo", |_ctx: WorkflowContext, input: Value| async move {
        Ok::<_, WorkflowError>(input)
    });
    let wait = workflow("wait", |ctx: WorkflowContext, _: ()| async move {
        let hook = ctx.create_hook_with::<Value>(HookOptions::new().token("deep"));
        Ok::<_, WorkflowError>(hook.wait().await?)
    });
    world.register(&echo).unwrap().register(&wait).unwrap();
    world.start().await.unwrap();
    let keys = Arc::new(KeyRing::new());
    let key = keys
        .create("t", Scope::Write, world.clock().now_ms(), None)
        .key;
    let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let http = Client::new();
    let post = |path: &str, body: String| {
        let request = http
            .post(format!("{base}{path}"))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };

    let deep = nested(100_000);
    let (status, body) = post(
        "/v1/runs",
        format!(r#"{{"workflow": "echo", "input": {deep}}}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "INVALID_INPUT", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("deeper than 128 levels"),
        "{body}"
    );
    assert_eq!(world.count_runs(Default::default(), 10).await.unwrap(), 0);

    let run = world
        .execute(&wait, (), WorkflowOptions::default())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        while run.query().await.unwrap().hooks.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    let (status, body) = post(
        "/v1/hooks/resume",
        format!(r#"{{"token": "deep", "payload": {deep}}}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(run.query().await.unwrap().hooks[0].status == worlds_engine::HookStatus::Waiting);

    // A NUL escape round-trips: the run gets it and gives it back.
    let (status, body) = post(
        "/v1/runs",
        r#"{"workflow": "echo", "input": {"text": "nul:\u0000 end"}}"#.to_owned(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["run_id"].as_str().unwrap().to_owned();
    let handle = world.handle::<Value>(&id).await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), handle.result())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out, json!({"text": "nul:\u{0} end"}));
    // A lone surrogate is no Unicode text: a clear 400, nothing recorded.
    let before = world.count_runs(Default::default(), 100).await.unwrap();
    let (status, body) = post(
        "/v1/runs",
        r#"{"workflow": "echo", "input": {"text": "lone:\ud800"}}"#.to_owned(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("surrogate"),
        "{body}"
    );
    assert_eq!(
        world.count_runs(Default::default(), 100).await.unwrap(),
        before
    );
    server.shutdown().await;
    world.shutdown().await.unwrap();
}
