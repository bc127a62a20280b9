//! Retention over real loopback HTTP: a sweep needs an admin key, its preview removes nothing,
//! its report and the world's policy are readable, bad bodies and ids are refused.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use worlds_engine::duration::Dur;
use worlds_engine::prelude::*;
use worlds_engine::ResolveData;
use worlds_server::auth::{ApiKeys, Scope};
use worlds_server::{serve, ApiOptions};

#[tokio::test]
async fn sweeps_over_the_api_need_an_admin_key_and_report_what_they_removed() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = WorldConfig::memory();
    config.retention.completed = Dur(Duration::from_millis(1));
    config.retention.sweep_interval = Dur(Duration::from_secs(86_400));
    let world = Arc::new(World::new(config).unwrap());
    let done = workflow("done", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    world.register(&done).unwrap();
    world.start().await.unwrap();
    let keys = ApiKeys::open(world.clone()).await.unwrap();
    let admin = keys.create("root", Scope::Admin, None).await.unwrap().key;
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

    let mut ids = Vec::new();
    for n in 0..5u64 {
        let handle = world
            .execute(&done, n, WorkflowOptions::default())
            .await
            .unwrap();
        handle.result().await.unwrap();
        ids.push(handle.id);
    }
    // Past the 1 ms the policy keeps completed runs.
    tokio::time::sleep(Duration::from_millis(5)).await;

    for key in [&write, &read] {
        let refused = http
            .post(format!("{base}/v1/prune"))
            .bearer_auth(key)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    }

    // The preview removes nothing.
    let preview = http
        .post(format!("{base}/v1/prune"))
        .bearer_auth(&admin)
        .json(&json!({ "dry_run": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(preview.status(), StatusCode::OK);
    let preview: Value = preview.json().await.unwrap();
    assert_eq!(preview["dry_run"], true);
    assert!(preview["removed"].as_u64().unwrap() >= 5, "{preview}");
    assert!(preview["bytes"].as_u64().unwrap() > 0, "{preview}");
    assert!(world.get_run(&ids[0], ResolveData::None).await.is_ok());

    // The sweep, followed to its end.
    let started = http
        .post(format!("{base}/v1/prune"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), StatusCode::ACCEPTED);
    let started: Value = started.json().await.unwrap();
    let sweep = started["id"].as_str().unwrap().to_owned();
    let mut report = started;
    for _ in 0..500 {
        if report["done"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        report = http
            .get(format!("{base}/v1/prune/{sweep}"))
            .bearer_auth(&read)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    }
    assert_eq!(report["done"], true, "{report}");
    assert!(report["removed"].as_u64().unwrap() >= 5, "{report}");
    for id in &ids {
        let gone = http
            .get(format!("{base}/v1/runs/{id}"))
            .bearer_auth(&read)
            .send()
            .await
            .unwrap();
        assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    }

    // The policy and the newest sweep.
    let status: Value = http
        .get(format!("{base}/v1/retention"))
        .bearer_auth(&read)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["enabled"], true, "{status}");
    assert_eq!(
        status["policy"]["completed"], 1,
        "durations in ms: {status}"
    );
    assert!(status["next_sweep_at"].as_i64().is_some(), "{status}");
    assert_eq!(status["last_sweep"]["id"], sweep.as_str(), "{status}");

    // Bad bodies and ids.
    for body in [json!({ "dry_run": "yes" }), json!({ "dryrun": true })] {
        let refused = http
            .post(format!("{base}/v1/prune"))
            .bearer_auth(&admin)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{body}");
    }
    let other = world
        .execute(&done, 9, WorkflowOptions::default())
        .await
        .unwrap();
    let not_a_sweep = http
        .get(format!("{base}/v1/prune/{}", other.id))
        .bearer_auth(&read)
        .send()
        .await
        .unwrap();
    assert_eq!(not_a_sweep.status(), StatusCode::BAD_REQUEST);
    for hostile in ["nope", "..%2F..%2Fkeys", "%00", &"x".repeat(5000)] {
        let refused = http
            .get(format!("{base}/v1/prune/{hostile}"))
            .bearer_auth(&read)
            .send()
            .await
            .unwrap();
        assert!(
            refused.status().is_client_error(),
            "{hostile}: {}",
            refused.status()
        );
    }
    server.shutdown().await;
    world.shutdown().await.unwrap();
}
