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

struct Setup {
    world: Arc<World>,
    order: Workflow<u64, u64>,
    broken: Arc<AtomicBool>,
    reserved: Arc<AtomicUsize>,
    charged: Arc<AtomicUsize>,
    read: String,
    write: worlds_server::auth::NewApiKey,
    server: worlds_server::ApiServer,
    base: String,
    http: Client,
}

/// A served world whose `order` workflow (reserve; charge) fails at charge while `broken`.
async fn setup() -> Setup {
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
    Setup {
        world,
        order,
        broken,
        reserved,
        charged,
        read,
        write,
        server,
        base,
        http,
    }
}

impl Setup {
    async fn post(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
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

    async fn get(&self, key: &str, path: &str) -> (StatusCode, Value) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (
            status,
            response.json::<Value>().await.unwrap_or(Value::Null),
        )
    }

    async fn failed_run(&self, n: u64) -> String {
        let id = self
            .world
            .execute(&self.order, n, WorkflowOptions::default())
            .await
            .unwrap()
            .id;
        assert_eq!(self.end(&id).await.status, RunStatus::Failed);
        id
    }

    async fn end(&self, id: &str) -> WorkflowState {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let state: WorkflowState = self.world.query(id).await.unwrap();
                if state.status.is_terminal() {
                    return state;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap()
    }
}

#[tokio::test]
async fn a_failed_run_is_retried_reset_and_refused_over_http() {
    let s = setup().await;
    let (read, write) = (s.read.as_str(), s.write.key.as_str());
    let a = s.failed_run(1).await;
    let b = s.failed_run(10).await;

    // A read key may not; a bad position is a 400; resume is only for quarantined runs.
    let (status, _) = s
        .post(read, &format!("/v1/runs/{a}/retry"), json!({}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = s
        .post(
            write,
            &format!("/v1/runs/{a}/reset"),
            json!({"position": 7}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "INVALID_INPUT");
    let (status, body) = s
        .post(write, &format!("/v1/runs/{a}/resume"), json!({}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("not quarantined"));

    s.broken.store(false, Ordering::SeqCst);
    let (status, body) = s
        .post(
            write,
            &format!("/v1/runs/{a}/retry"),
            json!({"reason": "card replaced"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"run_id": a, "action": "retry", "attempt": 2, "kept_until": 1, "already": false})
    );
    let (status, body) = s
        .post(
            write,
            &format!("/v1/runs/{b}/reset"),
            json!({"position": 0}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let state = s.end(&a).await;
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
            Some(format!("key:{}", s.write.record.id)),
            Some("card replaced".to_owned())
        )
    );
    assert_eq!(s.end(&b).await.status, RunStatus::Completed);
    assert_eq!(
        (
            s.reserved.load(Ordering::SeqCst),
            s.charged.load(Ordering::SeqCst)
        ),
        (3, 4),
        "the retry kept the reservation, the reset from #0 made it again"
    );
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_bulk_retry_is_started_and_followed_over_http() {
    let s = setup().await;
    let write = s.write.key.as_str();
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(s.failed_run(n).await);
    }
    s.broken.store(false, Ordering::SeqCst);
    let (status, body) = s
        .post(
            write,
            "/v1/bulk",
            json!({"action": "explode", "filter": {"status": "failed"}}),
        )
        .await;
    assert!(status.is_client_error(), "{status} {body}");
    let (status, body) = s
        .post(
            write,
            "/v1/bulk",
            json!({
                "action": "retry",
                "filter": {"status": "failed", "workflow_name": "order"},
                "reason": "provider back",
                "name": "retry-orders"
            }),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let op = body["id"].as_str().unwrap().to_owned();
    let progress = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (status, progress) = s.get(&s.read, &format!("/v1/bulk/{op}")).await;
            assert_eq!(status, StatusCode::OK, "{progress}");
            if progress["done"] == true {
                return progress;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(
        (
            &progress["matched"],
            &progress["applied"],
            &progress["refused"]
        ),
        (&json!(3), &json!(3), &json!(0)),
        "{progress}"
    );
    for id in &ids {
        assert_eq!(s.end(id).await.status, RunStatus::Completed);
    }
    let (status, body) = s.get(&s.read, &format!("/v1/bulk/{}", ids[0])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}
