//! Without a browser: runs of the Workflow DevKit's event-sourced World (spec version 5),
//! written the way a DevKit app writes them (`POST /v1/devkit/events`, streams through
//! `/v1/runs/{id}/streams/{name}/chunks`), read back as the dashboard's HTML over real HTTP:
//! the runs list, the run's steps, history, timeline, hooks, waits and streams, its binary
//! payloads shown as bytes (a size and an escaped preview, never the `{"$bytes"}` form), its
//! runtime (spec version, execution context, attributes), and hostile content escaped and
//! bounded.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{json, Value};
use worlds_engine::prelude::*;
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions, ApiServer};

struct Served {
    world: Arc<World>,
    server: ApiServer,
    base: String,
    http: reqwest::Client,
    key: String,
    cookie: String,
}

fn bytes(data: &[u8]) -> Value {
    json!({ "$bytes": base64::engine::general_purpose::STANDARD.encode(data) })
}

impl Served {
    /// A memory world, served, and a session signed in with an admin key.
    async fn start() -> Served {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let world = Arc::new(World::new(WorldConfig::memory()).unwrap());
        world.start().await.unwrap();
        let keys = Arc::new(KeyRing::new());
        let key = keys
            .create("operator", Scope::Admin, world.clock().now_ms(), None)
            .key;
        let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
            .await
            .unwrap();
        let base = format!("http://{}", server.local_addr());
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let login = http
            .post(format!("{base}/login"))
            .header("origin", &base)
            .form(&[("key", key.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(login.status().as_u16(), 303);
        let cookie = login.headers()["set-cookie"].to_str().unwrap();
        let cookie = cookie.split(';').next().unwrap().to_owned();
        Served {
            world,
            server,
            base,
            http,
            key,
            cookie,
        }
    }

    /// One DevKit `events.create`; panics unless it succeeds. The answer's JSON.
    async fn event(&self, run_id: Option<&str>, event: Value) -> Value {
        let response = self
            .http
            .post(format!("{}/v1/devkit/events", self.base))
            .bearer_auth(&self.key)
            .json(&json!({ "runId": run_id, "event": event, "params": {} }))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert!(status.is_success(), "{event}: {status} {body}");
        body
    }

    /// A run created and started as a DevKit 5.x runtime does; its id.
    async fn new_run(&self, name: &str, input: Value, attributes: Value) -> String {
        let created = self
            .event(
                None,
                json!({
                    "eventType": "run_created",
                    "specVersion": 5,
                    "eventData": {
                        "workflowName": name,
                        "deploymentId": "dpl_shop",
                        "input": input,
                        "executionContext": {"traceCarrier": {"traceparent": "00-abc-def-01"}, "<b>": "</pre><script>alert(1)</script>"},
                        "attributes": attributes,
                    },
                }),
            )
            .await;
        let id = created["run"]["runId"].as_str().unwrap().to_owned();
        self.event(
            Some(&id),
            json!({"eventType": "run_started", "specVersion": 5}),
        )
        .await;
        id
    }

    /// Writes `chunks` to the run's stream `name` in one request.
    async fn chunks(&self, run_id: &str, name: &str, chunks: Value) {
        let response = self
            .http
            .post(format!(
                "{}/v1/runs/{run_id}/streams/{name}/chunks",
                self.base
            ))
            .bearer_auth(&self.key)
            .json(&json!({ "chunks": chunks }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 201);
    }

    /// `path` as a browser asks for it, signed in: (status, body).
    async fn page(&self, path: &str) -> (u16, String) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .header("accept", "text/html")
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    async fn stop(self) {
        self.server.shutdown().await;
        self.world.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dump() {
    let s = Served::start().await;
    let id = s
        .new_run(
            "workflow//app.ts//order",
            bytes(br#"[{"order":"A-1"}]"#),
            json!({"team": "shop"}),
        )
        .await;
    for event in [
        json!({"eventType": "step_created", "correlationId": "step_charge", "eventData": {"stepName": "step//app.ts//charge", "input": bytes(&[0, 1, 2, 0xff, b'<'])}}),
        json!({"eventType": "step_started", "correlationId": "step_charge"}),
        json!({"eventType": "step_completed", "correlationId": "step_charge", "eventData": {"result": bytes(br#"{"charge":"ch_1"}"#)}}),
        json!({"eventType": "hook_created", "correlationId": "hook_approve", "eventData": {"token": "approve-A-1", "metadata": bytes(b"meta")}}),
        json!({"eventType": "hook_received", "correlationId": "hook_approve", "eventData": {"payload": bytes(br#"{"approved":true}"#)}}),
        json!({"eventType": "wait_created", "correlationId": "wait_1", "eventData": {"resumeAt": "2020-01-01T00:00:00Z"}}),
        json!({"eventType": "wait_completed", "correlationId": "wait_1"}),
        json!({"eventType": "attr_set", "eventData": {"changes": [{"key": "stage", "value": "paid"}]}}),
    ] {
        s.event(Some(&id), event).await;
    }
    s.chunks(&id, "strm_progress", json!(["charged", bytes(&[0, 0xfe])]))
        .await;
    s.event(
        Some(&id),
        json!({"eventType": "run_completed", "eventData": {"output": bytes(br#""done""#)}}),
    )
    .await;
    let (_, page) = s.page(&format!("/runs/{id}")).await;
    println!("{page}");
    let (_, page) = s.page("/").await;
    println!("{page}");
    s.stop().await;
}
