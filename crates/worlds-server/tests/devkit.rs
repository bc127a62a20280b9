//! The Workflow DevKit's World over real loopback HTTP: DevKit runs, steps, events and hooks
//! recorded as engine runs (checked by the engine's rules, answered in the DevKit's shapes),
//! and queue messages delivered to an app's handler signed, retried, redelivered when the app
//! asks for it, and dead-lettered when it refuses.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use parking_lot::Mutex;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use worlds_engine::clock::{Clock, VirtualClock};
use worlds_engine::hooks::WebhookSignature;
use worlds_engine::prelude::*;
use worlds_engine::{ActivityStatus, ResolveData};
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions, ApiServer};

const T0: i64 = 1_767_225_600_000;

struct Served {
    world: Arc<World>,
    clock: Arc<VirtualClock>,
    _server: ApiServer,
    http: Client,
    base: String,
    key: String,
}

impl Served {
    async fn new(delivery: Option<WebhookSignature>) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let clock = Arc::new(VirtualClock::new(T0));
        let world = Arc::new(World::with_clock(WorldConfig::memory(), clock.clone()).unwrap());
        if let Some(signature) = delivery {
            worlds_server::devkit::register_delivery(&world, signature).unwrap();
        }
        world.start().await.unwrap();
        let keys = Arc::new(KeyRing::new());
        let key = keys.create("app", Scope::Write, T0, None).key;
        let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
            .await
            .unwrap();
        Served {
            base: format!("http://{}/v1/devkit", server.local_addr()),
            world,
            clock,
            _server: server,
            http: Client::new(),
            key,
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::PATCH, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// Every DevKit event of the run, read page by page as the DevKit runtime does.
    async fn events(&self, run_id: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/runs/{run_id}/events?limit=2&cursor={c}"),
                None => format!("/runs/{run_id}/events?limit=2"),
            };
            let (status, page) = self.get(&path).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            all.extend(page["data"].as_array().unwrap().iter().cloned());
            if page["hasMore"] != json!(true) {
                return all;
            }
            cursor = Some(page["cursor"].as_str().unwrap().to_owned());
        }
    }
}

fn types(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["eventType"].as_str().unwrap().to_owned(),
                e["correlationId"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_devkit_run_is_an_engine_run_its_app_drives() {
    let s = Served::new(None).await;
    let (status, run) = s
        .post(
            "/runs",
            json!({"deploymentId": "dpl_7", "workflowName": "workflow//w.ts//add", "input": [1, 2, "nul \u{0}"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!(run["status"], "pending");
    assert_eq!(run["deploymentId"], "dpl_7");
    assert!(
        run.get("startedAt").is_none() && run.get("output").is_none(),
        "{run}"
    );
    let id = run["runId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("wrun_"));

    let (_, run) = s
        .patch(&format!("/runs/{id}"), json!({"status": "running"}))
        .await;
    assert_eq!(run["status"], "running");
    let started_at = run["startedAt"].clone();
    assert_eq!(started_at, json!(T0));

    // A step: created once (a replay creating it again gets 409), attempt 1 fails and waits
    // 2 s, attempt 2 completes; the first start time is kept.
    let step = json!({"stepId": "step_a", "stepName": "add", "input": [1, 2]});
    assert_eq!(
        s.post(&format!("/runs/{id}/steps"), step.clone()).await.0,
        StatusCode::CREATED
    );
    let (status, body) = s.post(&format!("/runs/{id}/steps"), step).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("CONFLICT"))
    );
    // What the app needs to queue the step's message again, should it have been lost.
    assert_eq!(body["details"]["step"]["stepName"], "add");
    assert_eq!(body["details"]["step"]["attempt"], 0);
    assert_eq!(body["details"]["workflowName"], "workflow//w.ts//add");
    assert_eq!(body["details"]["startedAt"], json!(T0));
    let started = json!({"eventType": "step_started", "correlationId": "step_a"});
    s.post(&format!("/runs/{id}/events"), started.clone()).await;
    let (_, step) = s
        .patch(
            &format!("/runs/{id}/steps/step_a"),
            json!({"status": "running", "attempt": 1}),
        )
        .await;
    assert_eq!(
        (step["status"].as_str(), step["attempt"].as_u64()),
        (Some("running"), Some(1))
    );
    s.clock.advance(Duration::from_millis(10));
    s.post(
        &format!("/runs/{id}/events"),
        json!({"eventType": "step_failed", "correlationId": "step_a", "eventData": {"error": "Error: busy", "stack": "at add"}}),
    )
    .await;
    let (_, step) = s
        .patch(
            &format!("/runs/{id}/steps/step_a"),
            json!({"status": "pending", "retryAfter": T0 + 2_010}),
        )
        .await;
    assert_eq!(step["status"], "pending");
    assert_eq!(step["retryAfter"], json!(T0 + 2_010));
    s.clock.advance(Duration::from_secs(2));
    s.post(&format!("/runs/{id}/events"), started).await;
    let (_, step) = s
        .patch(
            &format!("/runs/{id}/steps/step_a"),
            json!({"status": "running", "attempt": 2}),
        )
        .await;
    assert_eq!(step["attempt"], 2);
    assert_eq!(
        step["startedAt"],
        json!(T0),
        "the first attempt's start is kept"
    );
    let (_, step) = s
        .patch(
            &format!("/runs/{id}/steps/step_a"),
            json!({"status": "completed", "output": [3]}),
        )
        .await;
    assert_eq!(
        (step["status"].as_str(), &step["output"]),
        (Some("completed"), &json!([3]))
    );
    // The event after the update adds nothing and answers with the recorded completion; a
    // second completion by update is refused (a concurrent attempt must not log its own).
    let (status, done) = s
        .post(
            &format!("/runs/{id}/events"),
            json!({"eventType": "step_completed", "correlationId": "step_a", "eventData": {"result": [3]}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(done["eventData"], json!({"result": [3]}));
    let (status, _) = s
        .patch(
            &format!("/runs/{id}/steps/step_a"),
            json!({"status": "completed", "output": [4]}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    // A wait, completed once.
    let (_, wait) = s
        .post(
            &format!("/runs/{id}/events"),
            json!({"eventType": "wait_created", "correlationId": "wait_x", "eventData": {"resumeAt": T0 + 60_000}}),
        )
        .await;
    assert_eq!(wait["eventData"]["resumeAt"], json!(T0 + 60_000));
    let completed = json!({"eventType": "wait_completed", "correlationId": "wait_x"});
    assert_eq!(
        s.post(&format!("/runs/{id}/events"), completed.clone())
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(
        s.post(&format!("/runs/{id}/events"), completed).await.0,
        StatusCode::CONFLICT
    );

    // A hook with metadata, found by its token, resumed twice.
    let (status, hook) = s
        .post(
            &format!("/runs/{id}/hooks"),
            json!({"hookId": "hook_h", "token": "order-7", "metadata": {"customData": "x"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{hook}");
    s.post(
        &format!("/runs/{id}/events"),
        json!({"eventType": "hook_created", "correlationId": "hook_h"}),
    )
    .await;
    let (_, found) = s.post("/hooks/by-token", json!({"token": "order-7"})).await;
    assert_eq!(found["runId"], json!(id));
    assert_eq!(found["metadata"], json!({"customData": "x"}));
    assert_eq!(found["token"], "order-7");
    for payload in ["first", "second"] {
        let (status, body) = s
            .post(
                &format!("/runs/{id}/events"),
                json!({"eventType": "hook_received", "correlationId": "hook_h", "eventData": {"payload": {"data": payload}}}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    // Another run cannot take the token while the hook lives.
    let (_, other) = s
        .post(
            "/runs",
            json!({"workflowName": "workflow//w.ts//other", "input": []}),
        )
        .await;
    let other = other["runId"].as_str().unwrap();
    s.patch(&format!("/runs/{other}"), json!({"status": "running"}))
        .await;
    let (status, _) = s
        .post(
            &format!("/runs/{other}/hooks"),
            json!({"hookId": "hook_o", "token": "order-7"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    let (_, run) = s
        .patch(
            &format!("/runs/{id}"),
            json!({"status": "completed", "output": [3, "nul \u{0}"]}),
        )
        .await;
    assert_eq!(
        (run["status"].as_str(), &run["output"]),
        (Some("completed"), &json!([3, "nul \u{0}"]))
    );
    assert_eq!(run["startedAt"], started_at);
    assert!(
        run.get("error").is_none() && run["completedAt"].is_i64(),
        "{run}"
    );
    // Repeating the ending is answered with the run; a different ending is refused, and so is
    // anything a finished run cannot take.
    assert_eq!(
        s.patch(&format!("/runs/{id}"), json!({"status": "completed"}))
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        s.patch(&format!("/runs/{id}"), json!({"status": "failed"}))
            .await
            .0,
        StatusCode::CONFLICT
    );
    let (status, body) = s
        .post(
            &format!("/runs/{id}/steps"),
            json!({"stepId": "step_late", "stepName": "x", "input": []}),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::GONE, Some("GONE"))
    );

    assert_eq!(
        types(&s.events(&id).await),
        [
            ("step_started", "step_a"),
            ("step_failed", "step_a"),
            ("step_started", "step_a"),
            ("step_completed", "step_a"),
            ("wait_created", "wait_x"),
            ("wait_completed", "wait_x"),
            ("hook_created", "hook_h"),
            ("hook_received", "hook_h"),
            ("hook_received", "hook_h"),
            ("hook_disposed", "hook_h"),
        ]
        .map(|(t, c)| (t.to_owned(), c.to_owned()))
    );
    let (_, by_step) = s.get("/events?correlationId=step_a").await;
    assert_eq!(by_step["data"].as_array().unwrap().len(), 4);
    let (_, step) = s.get("/steps/step_a").await;
    assert_eq!(step["runId"], json!(id));

    // The engine's own view: an ordinary run, never executed by the engine.
    let state = s.world.get_run(&id, ResolveData::All).await.unwrap();
    assert!(state.external);
    assert_eq!(state.name, "workflow//w.ts//add");
    assert_eq!(state.activities[0].status, ActivityStatus::Completed);
    assert_eq!(state.activities[0].attempt, 2);
    let (_, listed) = s.get("/runs?workflowName=workflow//w.ts//add").await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn unknown_records_and_runs_the_engine_drives_are_refused() {
    let s = Served::new(None).await;
    assert_eq!(s.get("/runs/wrun_nothing").await.0, StatusCode::NOT_FOUND);
    assert_eq!(s.get("/steps/step_nothing").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        s.post("/hooks/by-token", json!({"token": "none"})).await.0,
        StatusCode::NOT_FOUND
    );
    let (status, body) = s
        .post("/runs", json!({"workflowName": "", "input": []}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (_, run) = s
        .post("/runs", json!({"workflowName": "w", "input": []}))
        .await;
    let id = run["runId"].as_str().unwrap();
    let (status, body) = s
        .post(
            &format!("/runs/{id}/events"),
            json!({"eventType": "step_started", "correlationId": "step_none"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _) = s
        .post(
            &format!("/runs/{id}/events"),
            json!({"eventType": "launched"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // A run of a workflow the engine runs takes no DevKit records.
    let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    });
    s.world.register(nap).unwrap();
    let engine_run = s
        .world
        .execute_by_name::<(), ()>("nap", (), WorkflowOptions::default())
        .await
        .unwrap();
    let (status, body) = s
        .patch(
            &format!("/runs/{}", engine_run.id),
            json!({"status": "completed"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
}

/// What the app's handler answers to each delivery, in turn.
#[derive(Clone)]
struct App {
    answers: Arc<Mutex<Vec<(u16, &'static str)>>>,
    seen: Arc<Mutex<Vec<(String, String, Value)>>>,
    signature: WebhookSignature,
    clock: Arc<VirtualClock>,
}

async fn handler(
    axum::extract::State(app): axum::extract::State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> (AxumStatus, String) {
    let pairs: Vec<(&str, &str)> = headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
        .collect();
    if app
        .signature
        .verify(&pairs, &body, app.clock.now_ms())
        .is_err()
    {
        return (AxumStatus::UNAUTHORIZED, "bad signature".into());
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let signed_as = format!(
        "{}:{}:{}",
        header("x-vqs-message-id"),
        header("x-vqs-message-attempt"),
        header("x-vqs-queue-name")
    );
    if header("webhook-id") != signed_as {
        return (AxumStatus::UNAUTHORIZED, "headers not signed".into());
    }
    app.seen.lock().push((
        header("x-vqs-message-id"),
        header("x-vqs-message-attempt"),
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    ));
    let (status, text) = {
        let mut answers = app.answers.lock();
        if answers.is_empty() {
            (200, r#"{"ok":true}"#)
        } else {
            answers.remove(0)
        }
    };
    (AxumStatus::from_u16(status).unwrap(), text.to_owned())
}

async fn start_app(app: App) -> String {
    let router = axum::Router::new()
        .route(
            "/.well-known/workflow/v1/flow",
            axum::routing::post(handler),
        )
        .route(
            "/.well-known/workflow/v1/step",
            axum::routing::post(handler),
        )
        .with_state(app);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

/// The run once it has finished, moving virtual time as [`until`] does.
async fn finished(s: &Served, id: &str) -> worlds_engine::WorkflowState {
    for _ in 0..2_000 {
        let state = s.world.get_run(id, ResolveData::All).await.unwrap();
        if state.status.is_terminal() {
            return state;
        }
        if let Some(at) = s.clock.next_deadline() {
            s.clock.set(at);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("run {id} did not finish");
}

/// Waits until `done` holds, moving virtual time to each deadline the world sleeps until.
async fn until(s: &Served, mut done: impl FnMut() -> bool) {
    for _ in 0..2_000 {
        if done() {
            return;
        }
        if let Some(at) = s.clock.next_deadline() {
            s.clock.set(at);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("gave up waiting");
}

#[tokio::test]
async fn messages_are_signed_retried_redelivered_and_dead_lettered() {
    let secret = WebhookSignature::generate_standard_secret();
    let signature = WebhookSignature::standard(secret.as_str());
    let s = Served::new(Some(signature.clone())).await;
    let app = App {
        answers: Arc::new(Mutex::new(vec![
            (500, "handler threw"),
            (200, r#"{"timeoutSeconds": 30}"#),
        ])),
        seen: Arc::new(Mutex::new(Vec::new())),
        signature,
        clock: s.clock.clone(),
    };
    let callback = start_app(app.clone()).await;

    let message = json!({"runId": "wrun_x", "text": "nul \u{0}"});
    let queue = |key: Option<&str>| {
        let mut body = json!({"queueName": "__wkf_workflow_workflow//w.ts//add", "message": message, "callbackUrl": callback});
        if let Some(key) = key {
            body["idempotencyKey"] = json!(key);
        }
        body
    };
    let (status, queued) = s.post("/queue", queue(Some("step_1"))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    let id = queued["messageId"].as_str().unwrap().to_owned();
    let (_, again) = s.post("/queue", queue(Some("step_1"))).await;
    assert_eq!(
        again["messageId"],
        json!(id),
        "one message per idempotency key"
    );

    until(&s, || app.seen.lock().len() >= 3).await;
    let run = finished(&s, &id).await;
    assert_eq!(
        run.output.unwrap().to_value(),
        json!(2),
        "delivered at the second attempt"
    );
    let seen = app.seen.lock().clone();
    assert_eq!(seen.len(), 3, "a 500, a later, a delivery: {seen:?}");
    for (i, attempt) in ["1", "1", "2"].iter().enumerate() {
        assert_eq!(
            (seen[i].0.as_str(), seen[i].1.as_str()),
            (id.as_str(), *attempt)
        );
        assert_eq!(seen[i].2, message, "the message arrives as it was queued");
    }
    assert!(
        s.clock.now_ms() >= T0 + 30_000,
        "redelivered after the time the app asked for"
    );

    // Refused: a dead letter, kept as a failed run with the app's answer.
    app.answers.lock().push((400, "no such queue here"));
    let (_, refused) = s.post("/queue", queue(None)).await;
    let refused = refused["messageId"].as_str().unwrap().to_owned();
    until(&s, || app.seen.lock().len() >= 4).await;
    let run = finished(&s, &refused).await;
    assert_eq!(
        run.status,
        RunStatus::Failed,
        "{:?} {:?}",
        run.output,
        app.seen.lock()
    );
    let error = run.error.unwrap().message;
    assert!(error.contains("HTTP 400"), "{error}");
}

#[tokio::test]
async fn a_server_without_a_delivery_secret_takes_no_messages() {
    let s = Served::new(None).await;
    let (status, body) = s
        .post(
            "/queue",
            json!({"queueName": "__wkf_step_x", "message": {}, "callbackUrl": "http://localhost:1"}),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("WORLDS_DELIVERY_SECRET"));
    let (status, _) = s
        .post(
            "/queue",
            json!({"queueName": "orders", "message": {}, "callbackUrl": "http://localhost:1"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_queue_delivers_only_to_this_machine_and_the_origins_allowed() {
    let secret = WebhookSignature::generate_standard_secret();
    let s = Served::new(Some(WebhookSignature::standard(secret.clone()))).await;
    let queue = |url: &str| json!({"queueName": "__wkf_step_x", "message": {}, "callbackUrl": url});
    let deliveries = |world: Arc<World>| async move {
        world
            .query_workflows(
                worlds_engine::WorkflowQueryFilter::new()
                    .workflow_name(worlds_server::devkit::DELIVERY_WORKFLOW),
            )
            .await
            .unwrap()
            .len()
    };
    for url in [
        "http://169.254.169.254/latest/meta-data",
        "http://metadata.google.internal",
        "https://example.com",
        "http://10.0.0.5:3000",
        "http://localhost@169.254.169.254/",
        "http://2852039166/",
        "http://127.0.0.1.nip.io/",
        "ftp://localhost/",
        "localhost:3000",
    ] {
        let (status, body) = s.post("/queue", queue(url)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains("callbackUrl")
                || body["details"]["field"] == "callbackUrl",
            "{url}: {body}"
        );
    }
    assert_eq!(deliveries(s.world.clone()).await, 0, "nothing was queued");
    for url in [
        "http://localhost:3000",
        "http://LOCALHOST:3000/app",
        "http://127.0.0.1:1",
        "http://127.8.9.10:8080",
        "http://[::1]:8080",
    ] {
        let (status, body) = s.post("/queue", queue(url)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{url}: {body}");
    }

    // A server that allows the app's origin delivers there too, and nowhere else.
    let world = Arc::new(World::with_clock(WorldConfig::memory(), s.clock.clone()).unwrap());
    worlds_server::devkit::register_delivery(&world, WebhookSignature::standard(secret)).unwrap();
    world.start().await.unwrap();
    let keys = Arc::new(KeyRing::new());
    let key = keys.create("app", Scope::Write, T0, None).key;
    let mut options = ApiOptions::with_keys(keys);
    options.devkit_callback_origins = vec!["https://app.example.com".into()];
    let server = serve(world.clone(), "127.0.0.1:0", options).await.unwrap();
    for (url, expected) in [
        ("https://app.example.com", StatusCode::ACCEPTED),
        ("https://APP.example.com:443/base", StatusCode::ACCEPTED),
        ("http://app.example.com", StatusCode::BAD_REQUEST),
        ("https://app.example.com:8443", StatusCode::BAD_REQUEST),
        ("http://169.254.169.254", StatusCode::BAD_REQUEST),
    ] {
        let answer = s
            .http
            .post(format!("http://{}/v1/devkit/queue", server.local_addr()))
            .bearer_auth(&key)
            .json(&queue(url))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), expected, "{url}");
    }
    server.shutdown().await;
    world.shutdown().await.unwrap();
}
