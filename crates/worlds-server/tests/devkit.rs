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
        let mut options = ApiOptions::with_keys(keys);
        // The apps of these tests listen on this machine, on ports chosen by the system.
        options.devkit_callback_origins = vec![worlds_server::devkit::LOOPBACK.into()];
        let server = serve(world.clone(), "127.0.0.1:0", options).await.unwrap();
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

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// One `events.create`, as a DevKit 5.x runtime sends it.
    async fn event(&self, run_id: Option<&str>, event: Value) -> (StatusCode, Value) {
        self.post(
            "/events",
            json!({"runId": run_id, "event": event, "params": {}}),
        )
        .await
    }

    /// One `events.create` that must be taken; its answer.
    async fn took(&self, run_id: &str, event: Value) -> Value {
        let (status, answer) = self.event(Some(run_id), event.clone()).await;
        assert_eq!(status, StatusCode::OK, "{event}: {answer}");
        answer
    }

    /// A run created and started as a DevKit 5.x runtime does; its id.
    async fn started_run(&self, name: &str) -> String {
        let (status, created) = self
            .event(
                None,
                json!({"eventType": "run_created", "specVersion": 5, "eventData": {"workflowName": name, "deploymentId": "dpl_1", "input": []}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{created}");
        let id = created["run"]["runId"].as_str().unwrap().to_owned();
        self.took(&id, json!({"eventType": "run_started"})).await;
        id
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

/// A time as the DevKit World writes it (RFC 3339).
fn at(ms: i64) -> Value {
    json!(jiff::Timestamp::from_millisecond(ms).unwrap().to_string())
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
    let (status, created) = s
        .event(
            None,
            json!({"eventType": "run_created", "specVersion": 5, "eventData": {"deploymentId": "dpl_7", "workflowName": "workflow//w.ts//add", "input": [1, 2, "nul \u{0}"]}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let run = &created["run"];
    assert_eq!(run["status"], "pending");
    assert_eq!(run["deploymentId"], "dpl_7");
    assert_eq!(run["input"], json!([1, 2, "nul \u{0}"]));
    assert!(
        run.get("startedAt").is_none() && run.get("output").is_none(),
        "{run}"
    );
    let id = run["runId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("wrun_"));
    assert_eq!(created["event"]["eventType"], "run_created");
    assert_eq!(created["event"]["runId"], json!(id));

    let started = s.took(&id, json!({"eventType": "run_started"})).await;
    assert_eq!(started["run"]["status"], "running");
    let started_at = started["run"]["startedAt"].clone();
    assert_eq!(started_at, at(T0));
    // The run's events so far come with the start (the runtime replays from them)...
    assert_eq!(
        types(started["events"].as_array().unwrap()),
        [("run_created", ""), ("run_started", "")].map(|(t, c)| (t.to_owned(), c.to_owned()))
    );
    // ...and a second delivery's start records nothing.
    let again = s.took(&id, json!({"eventType": "run_started"})).await;
    assert_eq!(again["run"]["startedAt"], started_at);
    assert!(again.get("event").is_none(), "{again}");

    // A step: created once (a replay creating it again gets 409 and changes nothing), attempt
    // 1 fails and waits 2 s (a start before then is too early), attempt 2 completes; the first
    // start time is kept.
    let step = json!({"eventType": "step_created", "correlationId": "step_a", "eventData": {"stepName": "add", "input": [1, 2]}});
    let made = s.took(&id, step.clone()).await;
    assert_eq!(
        (
            made["step"]["status"].as_str(),
            made["step"]["attempt"].as_u64()
        ),
        (Some("pending"), Some(0))
    );
    let (status, body) = s.event(Some(&id), step).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("CONFLICT")),
        "{body}"
    );
    let (status, body) = s
        .event(
            Some(&id),
            json!({"eventType": "step_started", "correlationId": "step_a", "eventData": {"stepName": "add", "input": [9]}}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (_, step) = s.get(&format!("/runs/{id}/steps/step_a")).await;
    assert_eq!(
        (
            step["status"].as_str(),
            step["attempt"].as_u64(),
            &step["input"]
        ),
        (Some("pending"), Some(0), &json!([1, 2]))
    );
    let start = json!({"eventType": "step_started", "correlationId": "step_a"});
    let step = s.took(&id, start.clone()).await["step"].clone();
    assert_eq!(
        (step["status"].as_str(), step["attempt"].as_u64()),
        (Some("running"), Some(1))
    );
    s.clock.advance(Duration::from_millis(10));
    let retrying = s
        .took(
            &id,
            json!({"eventType": "step_retrying", "correlationId": "step_a", "eventData": {"error": {"message": "busy", "stack": "at add"}, "retryAfter": at(T0 + 2_010)}}),
        )
        .await;
    assert_eq!(retrying["event"]["eventData"]["retryAfter"], at(T0 + 2_010));
    let step = &retrying["step"];
    assert_eq!(step["status"], "pending");
    assert_eq!(step["retryAfter"], at(T0 + 2_010));
    assert_eq!(step["error"]["message"], "busy");
    let (status, body) = s.event(Some(&id), start.clone()).await;
    assert_eq!(
        (status.as_u16(), body["code"].as_str()),
        (425, Some("TOO_EARLY")),
        "{body}"
    );
    s.clock.advance(Duration::from_secs(2));
    let step = s.took(&id, start).await["step"].clone();
    assert_eq!(step["attempt"], 2);
    assert_eq!(
        step["startedAt"],
        at(T0),
        "the first attempt's start is kept"
    );
    let done = s
        .took(
            &id,
            json!({"eventType": "step_completed", "correlationId": "step_a", "eventData": {"result": [3]}}),
        )
        .await;
    assert_eq!(
        (done["step"]["status"].as_str(), &done["step"]["output"]),
        (Some("completed"), &json!([3]))
    );
    assert_eq!(done["event"]["eventData"]["result"], json!([3]));
    // A second completion is refused (a concurrent attempt must not log its own), and the
    // first one's output stays.
    let (status, _) = s
        .event(
            Some(&id),
            json!({"eventType": "step_completed", "correlationId": "step_a", "eventData": {"result": [4]}}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (_, step) = s.get(&format!("/runs/{id}/steps/step_a")).await;
    assert_eq!(step["output"], json!([3]));

    // A wait, completed once.
    let wait = s
        .took(
            &id,
            json!({"eventType": "wait_created", "correlationId": "wait_x", "eventData": {"resumeAt": at(T0 + 60_000)}}),
        )
        .await;
    assert_eq!(wait["event"]["eventData"]["resumeAt"], at(T0 + 60_000));
    assert_eq!(wait["wait"]["status"], "waiting");
    let completed = json!({"eventType": "wait_completed", "correlationId": "wait_x"});
    let fired = s.took(&id, completed.clone()).await;
    assert_eq!(fired["wait"]["status"], "completed");
    assert_eq!(s.event(Some(&id), completed).await.0, StatusCode::CONFLICT);

    // A hook with metadata, found by its token, resumed twice.
    let hook = s
        .took(
            &id,
            json!({"eventType": "hook_created", "correlationId": "hook_h", "eventData": {"token": "order-7", "metadata": {"customData": "x"}}}),
        )
        .await;
    assert_eq!(hook["event"]["eventType"], "hook_created", "{hook}");
    assert_eq!(hook["hook"]["token"], "order-7");
    let (_, found) = s.post("/hooks/by-token", json!({"token": "order-7"})).await;
    assert_eq!(found["runId"], json!(id));
    assert_eq!(found["hookId"], "hook_h");
    assert_eq!(found["metadata"], json!({"customData": "x"}));
    assert_eq!(found["token"], "order-7");
    for payload in ["first", "second"] {
        s.took(
            &id,
            json!({"eventType": "hook_received", "correlationId": "hook_h", "eventData": {"payload": {"data": payload}}}),
        )
        .await;
    }
    // Another run cannot take the token while the hook lives: it is answered with a
    // hook_conflict naming the run that holds it, and gets no hook.
    let other = s.started_run("workflow//w.ts//other").await;
    let conflict = s
        .took(
            &other,
            json!({"eventType": "hook_created", "correlationId": "hook_o", "eventData": {"token": "order-7"}}),
        )
        .await;
    assert_eq!(
        conflict["event"]["eventType"], "hook_conflict",
        "{conflict}"
    );
    assert_eq!(conflict["event"]["eventData"]["token"], "order-7");
    assert_eq!(
        conflict["event"]["eventData"]["conflictingRunId"],
        json!(id)
    );
    assert!(conflict.get("hook").is_none(), "{conflict}");
    let (_, found) = s.post("/hooks/by-token", json!({"token": "order-7"})).await;
    assert_eq!(found["runId"], json!(id));

    let ended = s
        .took(
            &id,
            json!({"eventType": "run_completed", "eventData": {"output": [3, "nul \u{0}"]}}),
        )
        .await;
    let run = &ended["run"];
    assert_eq!(
        (run["status"].as_str(), &run["output"]),
        (Some("completed"), &json!([3, "nul \u{0}"]))
    );
    assert_eq!(run["startedAt"], started_at);
    assert!(
        run.get("error").is_none() && run["completedAt"].is_string(),
        "{run}"
    );
    // Repeating the ending, or ending it otherwise, is refused, and so is anything a finished
    // run cannot take; its hook's token is free again.
    for (event, expected) in [
        (json!({"eventType": "run_completed"}), StatusCode::CONFLICT),
        (
            json!({"eventType": "run_failed", "eventData": {"error": "late"}}),
            StatusCode::CONFLICT,
        ),
        (
            json!({"eventType": "step_created", "correlationId": "step_late", "eventData": {"stepName": "x", "input": []}}),
            StatusCode::CONFLICT,
        ),
        (json!({"eventType": "run_started"}), StatusCode::GONE),
    ] {
        let (status, body) = s.event(Some(&id), event.clone()).await;
        assert_eq!(status, expected, "{event}: {body}");
    }
    let (_, run) = s.get(&format!("/runs/{id}")).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(
        s.post("/hooks/by-token", json!({"token": "order-7"}))
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let taken = s
        .took(
            &other,
            json!({"eventType": "hook_created", "correlationId": "hook_o2", "eventData": {"token": "order-7"}}),
        )
        .await;
    assert_eq!(taken["event"]["eventType"], "hook_created", "{taken}");

    let events = s.events(&id).await;
    assert_eq!(
        types(&events),
        [
            ("run_created", ""),
            ("run_started", ""),
            ("step_created", "step_a"),
            ("step_started", "step_a"),
            ("step_retrying", "step_a"),
            ("step_started", "step_a"),
            ("step_completed", "step_a"),
            ("wait_created", "wait_x"),
            ("wait_completed", "wait_x"),
            ("hook_created", "hook_h"),
            ("hook_received", "hook_h"),
            ("hook_received", "hook_h"),
            ("run_completed", ""),
            ("hook_disposed", "hook_h"),
        ]
        .map(|(t, c)| (t.to_owned(), c.to_owned()))
    );
    assert_eq!(events[12]["eventData"]["output"], json!([3, "nul \u{0}"]));
    let (_, by_step) = s.get("/events?correlationId=step_a").await;
    assert_eq!(by_step["data"].as_array().unwrap().len(), 5);
    let (_, step) = s.get(&format!("/runs/{id}/steps/step_a")).await;
    assert_eq!(step["runId"], json!(id));

    // The engine's own view: an ordinary run, never executed by the engine.
    let state = s.world.get_run(&id, ResolveData::All).await.unwrap();
    assert!(state.external);
    assert_eq!(state.name, "workflow//w.ts//add");
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(state.activities[0].status, ActivityStatus::Completed);
    assert_eq!(state.activities[0].attempt, 2);
    let (_, listed) = s.get("/runs?workflowName=workflow//w.ts//add").await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn unknown_records_and_runs_the_engine_drives_are_refused() {
    let s = Served::new(None).await;
    assert_eq!(s.get("/runs/wrun_nothing").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        s.get("/runs/wrun_nothing/steps/step_nothing").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        s.get("/runs/wrun_nothing/events").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(s.get("/hooks/hook_nothing").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        s.post("/hooks/by-token", json!({"token": "none"})).await.0,
        StatusCode::NOT_FOUND
    );
    // An event of a run that does not exist (and does not carry what creates it).
    let (status, body) = s
        .event(
            Some("wrun_nothing"),
            json!({"eventType": "step_created", "correlationId": "step_a", "eventData": {"stepName": "s", "input": []}}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // A run needs its name, and every event but run_created names its run.
    let (status, body) = s
        .event(
            None,
            json!({"eventType": "run_created", "eventData": {"input": []}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = s
        .event(
            None,
            json!({"eventType": "run_created", "eventData": {"workflowName": "", "input": []}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = s.event(None, json!({"eventType": "run_started"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let id = s.started_run("w").await;
    for (event, expected) in [
        (
            json!({"eventType": "step_started", "correlationId": "step_none"}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"eventType": "step_completed", "correlationId": "step_none"}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"eventType": "hook_received", "correlationId": "hook_none", "eventData": {"payload": 1}}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"eventType": "wait_completed", "correlationId": "wait_none"}),
            StatusCode::NOT_FOUND,
        ),
        (json!({"eventType": "launched"}), StatusCode::BAD_REQUEST),
        (
            json!({"eventType": "step_created", "eventData": {"stepName": "s", "input": []}}),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (status, body) = s.event(Some(&id), event.clone()).await;
        assert_eq!(status, expected, "{event}: {body}");
    }
    assert_eq!(
        s.get(&format!("/runs/{id}/steps/step_none")).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        s.get(&format!("/runs/{id}/events/evnt_none")).await.0,
        StatusCode::NOT_FOUND
    );
    // A run id that exists already is not made again.
    let (status, body) = s
        .event(
            Some(&id),
            json!({"eventType": "run_created", "eventData": {"workflowName": "w", "input": []}}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    // Nothing refused was recorded.
    assert_eq!(
        types(&s.events(&id).await),
        [("run_created", ""), ("run_started", "")].map(|(t, c)| (t.to_owned(), c.to_owned()))
    );

    // A run of a workflow the engine runs takes no DevKit records, and is not a DevKit run.
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
        .event(Some(&engine_run.id), json!({"eventType": "run_completed"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, body) = s
        .post(
            &format!("/runs/{}/attributes", engine_run.id),
            json!({"changes": [{"key": "k", "value": "v"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (_, listed) = s.get("/runs").await;
    let listed: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [id.as_str()]);
    let state = s
        .world
        .get_run(&engine_run.id, ResolveData::All)
        .await
        .unwrap();
    assert_eq!(state.status, RunStatus::Running);
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

/// Moves virtual time to the world's next deadline if it is at most a minute away: far enough
/// for every retry and `timeoutSeconds` of these tests, short of a delivery's answer timeout
/// (15 minutes), which a jump must not fire while the app is still answering in real time.
fn step_time(s: &Served) {
    if let Some(at) = s.clock.next_deadline() {
        if at <= s.clock.now_ms() + 60_000 {
            s.clock.set(at);
        }
    }
}

/// The run once it has finished, moving virtual time as [`until`] does.
async fn finished(s: &Served, id: &str) -> worlds_engine::WorkflowState {
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < give_up {
        let state = s.world.get_run(id, ResolveData::All).await.unwrap();
        if state.status.is_terminal() {
            return state;
        }
        step_time(s);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("run {id} did not finish");
}

/// Lets virtual time run (to each next deadline) until `done`; gives up after a minute of
/// real time, which only a loaded machine comes near (it takes well under a second alone).
async fn until(s: &Served, mut done: impl FnMut() -> bool) {
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < give_up {
        if done() {
            return;
        }
        step_time(s);
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
async fn the_queue_delivers_only_to_the_origins_allowed() {
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

    // A server allowed nothing (the default) delivers nowhere, this machine included; one
    // allowed the app's origins delivers there and nowhere else, a loopback origin's port under
    // every loopback name.
    let allowed = [
        "https://app.example.com".to_owned(),
        "http://localhost:3000".to_owned(),
    ];
    for (origins, cases) in [
        (
            &[][..],
            &[
                ("http://localhost:3000", StatusCode::BAD_REQUEST),
                ("http://127.0.0.1:1", StatusCode::BAD_REQUEST),
                ("https://app.example.com", StatusCode::BAD_REQUEST),
            ][..],
        ),
        (
            &allowed[..],
            &[
                ("https://app.example.com", StatusCode::ACCEPTED),
                ("https://APP.example.com:443/base", StatusCode::ACCEPTED),
                ("http://localhost:3000/app", StatusCode::ACCEPTED),
                ("http://127.0.0.1:3000", StatusCode::ACCEPTED),
                ("http://[::1]:3000", StatusCode::ACCEPTED),
                ("http://localhost:5432", StatusCode::BAD_REQUEST),
                ("http://127.0.0.1:8080", StatusCode::BAD_REQUEST),
                ("https://localhost:3000", StatusCode::BAD_REQUEST),
                ("http://app.example.com", StatusCode::BAD_REQUEST),
                ("https://app.example.com:8443", StatusCode::BAD_REQUEST),
                ("http://169.254.169.254", StatusCode::BAD_REQUEST),
            ][..],
        ),
    ] {
        let world = Arc::new(World::with_clock(WorldConfig::memory(), s.clock.clone()).unwrap());
        worlds_server::devkit::register_delivery(
            &world,
            WebhookSignature::standard(secret.clone()),
        )
        .unwrap();
        world.start().await.unwrap();
        let keys = Arc::new(KeyRing::new());
        let key = keys.create("app", Scope::Write, T0, None).key;
        let mut options = ApiOptions::with_keys(keys);
        options.devkit_callback_origins = origins.to_vec();
        let server = serve(world.clone(), "127.0.0.1:0", options).await.unwrap();
        for (url, expected) in cases {
            let answer = s
                .http
                .post(format!("http://{}/v1/devkit/queue", server.local_addr()))
                .bearer_auth(&key)
                .json(&queue(url))
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), *expected, "{url} allowed {origins:?}");
        }
        server.shutdown().await;
        world.shutdown().await.unwrap();
    }
}
