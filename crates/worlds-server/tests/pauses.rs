//! Pauses over real loopback HTTP: pausing and resuming needs an admin key and records it as
//! who paused; a held run waits on the pause in `…/waits` and starts once it is resumed;
//! hostile kinds and names are refused; resuming what is not paused is a 404.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use worlds_engine::prelude::*;
use worlds_engine::{ResolveData, RunStatus};
use worlds_server::auth::{ApiKeys, Scope};
use worlds_server::{serve, ApiOptions};

#[tokio::test]
async fn an_admin_pauses_a_workflow_over_http_and_its_new_runs_wait_until_resumed() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let world = Arc::new(World::new(WorldConfig::memory()).unwrap());
    let done = workflow("done", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    world.register(&done).unwrap();
    world.start().await.unwrap();
    let keys = ApiKeys::open(world.clone()).await.unwrap();
    let admin = keys.create("root", Scope::Admin, None).await.unwrap();
    let write = keys.create("svc", Scope::Write, None).await.unwrap().key;
    let read = keys.create("ro", Scope::Read, None).await.unwrap().key;
    let server = serve(
        world.clone(),
        "127.0.0.1:0",
        ApiOptions::with_world_keys(keys),
    )
    .await
    .unwrap();
    let base = format!("http://{}", server.local_addr());
    let http = reqwest::Client::new();
    let url = format!("{base}/v1/pauses/workflow/done");

    for key in [&write, &read] {
        let refused = http.put(&url).bearer_auth(key).send().await.unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    }
    let paused = http
        .put(&url)
        .bearer_auth(&admin.key)
        .json(&json!({ "reason": "provider incident" }))
        .send()
        .await
        .unwrap();
    assert_eq!(paused.status(), StatusCode::OK);
    let paused: Value = paused.json().await.unwrap();
    assert_eq!(
        paused["target"],
        json!({"kind": "workflow", "name": "done"})
    );
    assert_eq!(paused["reason"], "provider incident");
    let by = paused["by"].as_str().unwrap().to_owned();
    assert!(by.contains(&admin.record.id), "{by}");

    let listed: Value = http
        .get(format!("{base}/v1/pauses"))
        .bearer_auth(&read)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed, json!([paused]));

    let handle = world
        .execute(&done, 5, WorkflowOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let run = world.get_run(&handle.id, ResolveData::None).await.unwrap();
    assert_eq!(run.status, RunStatus::Pending);
    let waits: Value = http
        .get(format!("{base}/v1/runs/{}/waits", handle.id))
        .bearer_auth(&read)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(waits[0]["on"], "paused", "{waits}");
    assert_eq!(waits[0]["by"], by.as_str());
    assert_eq!(waits[0]["reason"], "provider incident");

    let resumed = http
        .delete(&url)
        .bearer_auth(&admin.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), StatusCode::OK);
    assert_eq!(resumed.json::<Value>().await.unwrap(), paused);
    assert_eq!(handle.result().await.unwrap(), 5);
    let again = http
        .delete(&url)
        .bearer_auth(&admin.key)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_FOUND);

    // Hostile kinds and names: refused, nothing stored.
    let huge = "x".repeat(5_000);
    for path in [
        "run/done".to_owned(),
        "workflow/a%00b".to_owned(),
        "task_queue/a%0Ab".to_owned(),
        format!("workflow/{huge}"),
    ] {
        let refused = http
            .put(format!("{base}/v1/pauses/{path}"))
            .bearer_auth(&admin.key)
            .send()
            .await
            .unwrap();
        assert_eq!(
            refused.status(),
            StatusCode::BAD_REQUEST,
            "{}",
            &path[..20.min(path.len())]
        );
    }
    let too_long = http
        .put(&url)
        .bearer_auth(&admin.key)
        .json(&json!({ "reason": "r".repeat(5_000) }))
        .send()
        .await
        .unwrap();
    assert_eq!(too_long.status(), StatusCode::BAD_REQUEST);
    let unknown = http
        .put(&url)
        .bearer_auth(&admin.key)
        .json(&json!({ "reason": "x", "until": 5 }))
        .send()
        .await
        .unwrap();
    assert!(unknown.status().is_client_error());
    assert!(world.pauses().await.unwrap().is_empty());
    server.shutdown().await;
}
