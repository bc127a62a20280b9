//! Recovering failed runs over the API: retry, reset and resume on real loopback HTTP, each
//! recorded in the run's history with the caller's key and the reason given.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use worlds_engine::prelude::*;
use worlds_engine::{EventKind, WorkflowState};
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions};

#[tokio::test]
async fn a_failed_run_is_retried_reset_and_refused_over_http() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = WorldConfig::memory();
    config.failure_strategy = FailureStrategy::Ignore;
    let world = Arc::new(World::new(config).unwrap());
    let broken = Arc::new(AtomicBool::new(true));
    let (reserved, charged) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let reserve = {
        let calls = reserved.clone();
        activity("reserve", move |_ctx: ActivityContext, n: u64| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok::<_, StepError>(n + 1)
            }
        })
    };
    let charge = {
        let (calls, broken) = (charged.clone(), broken.clone());
        activity("charge", move |_ctx: ActivityContext, n: u64| {
            let (calls, broken) = (calls.clone(), broken.clone());
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                if broken.load(Ordering::SeqCst) {
                    return Err(StepError::fatal("card declined"));
                }
                Ok::<_, StepError>(n + 1)
            }
        })
    };
    let order = {
        let (reserve, charge) = (reserve.clone(), charge.clone());
        workflow("order", move |ctx: WorkflowContext, n: u64| {
            let (reserve, charge) = (reserve.clone(), charge.clone());
            async move {
                let r = ctx.run(&reserve, n).await?;
                Ok::<_, WorkflowError>(ctx.run(&charge, r).await?)
            }
        })
    };
    world.register(&reserve).unwrap();
    world.register(&charge).unwrap();
    world.register(&order).unwrap();
    world.start().await.unwrap();
    let now = world.clock().now_ms();
    let keys = Arc::new(KeyRing::new());
    let read = keys.create("viewer", Scope::Read, now, None).key;
    let write = keys.create("ops", Scope::Write, now, None);
    let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let http = Client::new();
    let post = |key: String, path: String, body: Value| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let response = http
                .post(format!("{base}{path}"))
                .bearer_auth(key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = response.status();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let end = |id: String| {
        let world = world.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    let state: WorkflowState = world.query(&id).await.unwrap();
                    if state.status.is_terminal() {
                        return state;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .unwrap()
        }
    };

    let a = world
        .execute(&order, 1, WorkflowOptions::default())
        .await
        .unwrap()
        .id;
    let b = world
        .execute(&order, 10, WorkflowOptions::default())
        .await
        .unwrap()
        .id;
    assert_eq!(end(a.clone()).await.status, RunStatus::Failed);
    assert_eq!(end(b.clone()).await.status, RunStatus::Failed);

    // A read key may not; a bad position is a 400; resume is only for quarantined runs.
    let (status, _) = post(read.clone(), format!("/v1/runs/{a}/retry"), json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = post(
        write.key.clone(),
        format!("/v1/runs/{a}/reset"),
        json!({"position": 7}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "INVALID_INPUT");
    let (status, body) = post(write.key.clone(), format!("/v1/runs/{a}/resume"), json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("not quarantined"));

    broken.store(false, Ordering::SeqCst);
    let (status, body) = post(
        write.key.clone(),
        format!("/v1/runs/{a}/retry"),
        json!({"reason": "card replaced"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"run_id": a, "action": "retry", "attempt": 2, "kept_until": 1, "already": false})
    );
    let (status, body) = post(
        write.key.clone(),
        format!("/v1/runs/{b}/reset"),
        json!({"position": 0}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let state = end(a.clone()).await;
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    assert_eq!(state.output.clone().unwrap().decode::<u64>().unwrap(), 3);
    let recorded = state
        .history
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::RunReopened { by, reason, .. } => Some((by.clone(), reason.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        recorded,
        (
            Some(format!("key:{}", write.record.id)),
            Some("card replaced".to_owned())
        )
    );
    assert_eq!(end(b.clone()).await.status, RunStatus::Completed);
    assert_eq!(
        (
            reserved.load(Ordering::SeqCst),
            charged.load(Ordering::SeqCst)
        ),
        (3, 4),
        "the retry kept the reservation, the reset from #0 made it again"
    );
    server.shutdown().await;
    world.shutdown().await.unwrap();
}
