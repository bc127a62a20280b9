//! DevKit queue messages queued with `delaySeconds`, over real loopback HTTP: each waits in the
//! server as a durable timer of its delivery run (on the world's virtual clock here) and is
//! delivered once the delay has passed, not before, even across a restart of the server; a
//! delay that is not a number of seconds from 0 to 7 days is refused.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use parking_lot::Mutex;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use worlds_engine::clock::{Clock, VirtualClock};
use worlds_engine::hooks::WebhookSignature;
use worlds_engine::model::ListQuery;
use worlds_engine::prelude::*;
use worlds_engine::{EventKind, Persistence, ResolveData};
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions, ApiServer};

const T0: i64 = 1_767_225_600_000;
const QUEUE: &str = "__wkf_workflow_workflow//w.ts//add";

/// The app: checks each delivery's signature and notes (message id, attempt, the world's time).
#[derive(Clone)]
struct App {
    seen: Arc<Mutex<Vec<(String, String, i64)>>>,
    signature: WebhookSignature,
    /// The clock of the world delivering now (replaced at a restart).
    clock: Arc<Mutex<Arc<VirtualClock>>>,
}

async fn handler(
    axum::extract::State(app): axum::extract::State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> (AxumStatus, &'static str) {
    let pairs: Vec<(&str, &str)> = headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
        .collect();
    let now = app.clock.lock().now_ms();
    if app.signature.verify(&pairs, &body, now).is_err() {
        return (AxumStatus::UNAUTHORIZED, "bad signature");
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    app.seen.lock().push((
        header("x-vqs-message-id"),
        header("x-vqs-message-attempt"),
        now,
    ));
    (AxumStatus::OK, r#"{"ok":true}"#)
}

async fn start_app(app: App) -> String {
    let router = axum::Router::new()
        .route(
            "/.well-known/workflow/v1/flow",
            axum::routing::post(handler),
        )
        .with_state(app);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

/// A served world delivering DevKit messages, on `clock`, in memory or in `dir`.
struct Served {
    world: Arc<World>,
    clock: Arc<VirtualClock>,
    server: ApiServer,
    http: Client,
    key: String,
}

impl Served {
    async fn new(signature: WebhookSignature, dir: Option<&Path>) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let clock = Arc::new(VirtualClock::new(T0));
        let config = match dir {
            None => WorldConfig::memory(),
            Some(dir) => {
                let mut config = WorldConfig::default();
                config.persistence = Persistence::Hybrid;
                config.persistence_path = dir.to_path_buf();
                config
            }
        };
        let world = Arc::new(World::with_clock(config, clock.clone()).unwrap());
        worlds_server::devkit::register_delivery(&world, signature).unwrap();
        world.start().await.unwrap();
        let keys = Arc::new(KeyRing::new());
        let key = keys.create("app", Scope::Write, T0, None).key;
        let mut options = ApiOptions::with_keys(keys);
        // The apps of these tests listen on this machine, on ports chosen by the system.
        options.devkit_callback_origins = vec![worlds_server::devkit::LOOPBACK.into()];
        let server = serve(world.clone(), "127.0.0.1:0", options).await.unwrap();
        Served {
            world,
            clock,
            server,
            http: Client::new(),
            key,
        }
    }

    async fn queue(&self, body: Value) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!(
                "http://{}/v1/devkit/queue",
                self.server.local_addr()
            ))
            .bearer_auth(&self.key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// When the message's delivery run sleeps until, once its timer is recorded.
    async fn timer(&self, id: &str) -> i64 {
        for _ in 0..1_000 {
            let history = self
                .world
                .events(id, ListQuery::new().limit(100))
                .await
                .unwrap();
            let fire_at = history.data.iter().find_map(|e| match e.kind {
                EventKind::TimerScheduled { fire_at, .. } => Some(fire_at),
                _ => None,
            });
            if let Some(fire_at) = fire_at {
                return fire_at;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the delivery of {id} recorded no timer");
    }

    /// Waits (in real time, the world's clock standing still) until `done` holds.
    async fn until(&self, mut done: impl FnMut() -> bool) {
        for _ in 0..2_000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("gave up waiting");
    }
}

fn app(signature: WebhookSignature, clock: Arc<VirtualClock>) -> App {
    App {
        seen: Arc::new(Mutex::new(Vec::new())),
        signature,
        clock: Arc::new(Mutex::new(clock)),
    }
}

#[tokio::test]
async fn a_delayed_message_is_delivered_once_its_delay_has_passed_and_not_before() {
    let secret = WebhookSignature::generate_standard_secret();
    let signature = WebhookSignature::standard(secret.as_str());
    let s = Served::new(signature.clone(), None).await;
    let app = app(signature, s.clock.clone());
    let callback = start_app(app.clone()).await;

    let (status, queued) = s
        .queue(json!({"queueName": QUEUE, "message": {"n": 1}, "callbackUrl": callback, "delaySeconds": 90.5}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    let id = queued["messageId"].as_str().unwrap().to_owned();
    assert_eq!(
        s.timer(&id).await,
        T0 + 90_500,
        "a durable timer for the delay"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(app.seen.lock().is_empty(), "not delivered before the delay");

    // Just before the delay ends: still waiting.
    s.clock.set(T0 + 90_499);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(app.seen.lock().is_empty(), "not delivered before the delay");

    s.clock.set(T0 + 90_500);
    s.until(|| !app.seen.lock().is_empty()).await;
    let seen = app.seen.lock().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!((seen[0].0.as_str(), seen[0].1.as_str()), (id.as_str(), "1"));
    assert!(
        seen[0].2 >= T0 + 90_500,
        "delivered after the delay: {seen:?}"
    );

    // Without a delay (or with 0), the message goes at once, with no timer.
    for delay in [None, Some(0)] {
        let mut body = json!({"queueName": QUEUE, "message": {}, "callbackUrl": callback});
        if let Some(delay) = delay {
            body["delaySeconds"] = json!(delay);
        }
        let before = s.clock.now_ms();
        let count = app.seen.lock().len();
        let (status, queued) = s.queue(body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
        for _ in 0..1_000 {
            if app.seen.lock().len() > count {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(app.seen.lock().len(), count + 1, "delivered at once");
        assert_eq!(s.clock.now_ms(), before, "without moving the clock");
    }
}

#[tokio::test]
async fn delays_that_are_not_seconds_from_0_to_7_days_are_refused() {
    let secret = WebhookSignature::generate_standard_secret();
    let signature = WebhookSignature::standard(secret.as_str());
    let s = Served::new(signature, None).await;
    for delay in [json!(-1), json!(-0.001), json!(604_800.5), json!(1e300)] {
        let (status, body) = s
            .queue(json!({"queueName": QUEUE, "message": {}, "callbackUrl": "http://localhost:1", "delaySeconds": delay}))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{delay}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("delaySeconds"), "{delay}: {body}");
        assert!(message.contains("7 days"), "{delay}: {body}");
    }
    for delay in [json!("10"), json!(true), json!({"s": 1})] {
        let (status, body) = s
            .queue(json!({"queueName": QUEUE, "message": {}, "callbackUrl": "http://localhost:1", "delaySeconds": delay}))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{delay}: {body}");
        assert!(body.to_string().contains("delaySeconds"), "{delay}: {body}");
    }
    let (status, body) = s
        .queue(json!({"queueName": QUEUE, "message": {}, "callbackUrl": "http://localhost:1", "delaySeconds": 604_800}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "7 days is allowed: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_message_survives_a_restart_of_the_server() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("world");
    let secret = WebhookSignature::generate_standard_secret();
    let signature = WebhookSignature::standard(secret.as_str());

    let first = Served::new(signature.clone(), Some(&dir)).await;
    let app = app(signature.clone(), first.clock.clone());
    let callback = start_app(app.clone()).await;
    let (status, queued) = first
        .queue(json!({"queueName": QUEUE, "message": {"n": 2}, "callbackUrl": callback, "delaySeconds": 3600}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    let id = queued["messageId"].as_str().unwrap().to_owned();
    assert_eq!(first.timer(&id).await, T0 + 3_600_000);
    let Served { world, server, .. } = first;
    server.shutdown().await;
    world.shutdown().await.unwrap();
    drop(world);
    assert!(
        app.seen.lock().is_empty(),
        "not delivered before the restart"
    );

    // The server comes back (its clock at T0 again): the message still waits its hour.
    let second = Served::new(signature, Some(&dir)).await;
    *app.clock.lock() = second.clock.clone();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(app.seen.lock().is_empty(), "not delivered before the delay");
    second.clock.set(T0 + 3_599_999);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(app.seen.lock().is_empty(), "not delivered before the delay");
    second.clock.set(T0 + 3_600_000);
    second.until(|| !app.seen.lock().is_empty()).await;
    let seen = app.seen.lock().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!((seen[0].0.as_str(), seen[0].1.as_str()), (id.as_str(), "1"));
    assert!(seen[0].2 >= T0 + 3_600_000, "after the delay: {seen:?}");
    for _ in 0..1_000 {
        if second
            .world
            .get_run(&id, ResolveData::None)
            .await
            .unwrap()
            .status
            .is_terminal()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let done = second.world.get_run(&id, ResolveData::None).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    second.server.shutdown().await;
    second.world.shutdown().await.unwrap();
}
