//! The API over real loopback HTTP: authentication on every guarded route, runs started,
//! read, listed, paged, waited for and cancelled, hooks resumed, and malformed or oversized
//! requests refused with nothing recorded.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use worlds_engine::prelude::*;
use worlds_engine::WorkflowQueryFilter;
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions, ApiServer};

/// A served world with a key of each kind.
struct Served {
    world: Arc<World>,
    server: ApiServer,
    http: Client,
    base: String,
    read: String,
    write: String,
    admin: String,
    expired: String,
    revoked: String,
    tokens: Arc<Mutex<Vec<String>>>,
}

impl Served {
    async fn new() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = WorldConfig::memory();
        config.max_payload_bytes = 64 * 1024;
        let world = Arc::new(World::new(config).unwrap());
        let greet = activity("greet", |_ctx: ActivityContext, name: String| async move {
            Ok::<_, StepError>(format!("hello {name}"))
        });
        let hello = {
            let greet = greet.clone();
            workflow("hello", move |ctx: WorkflowContext, name: String| {
                let greet = greet.clone();
                async move { Ok::<_, WorkflowError>(ctx.run(&greet, name).await?) }
            })
        };
        let tokens = Arc::new(Mutex::new(Vec::new()));
        let note = {
            let tokens = tokens.clone();
            activity("note", move |_ctx: ActivityContext, token: String| {
                let tokens = tokens.clone();
                async move {
                    tokens.lock().push(token);
                    Ok::<_, StepError>(())
                }
            })
        };
        let approval = {
            let note = note.clone();
            workflow("approval", move |ctx: WorkflowContext, _: ()| {
                let note = note.clone();
                async move {
                    let hook = ctx.create_hook::<bool>();
                    ctx.run(&note, hook.token().to_owned()).await?;
                    Ok::<_, WorkflowError>(hook.wait().await?)
                }
            })
        };
        let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(())
        });
        // Holds a hook that expires at once, without waiting on it.
        let late = workflow("late-hook", |ctx: WorkflowContext, _: ()| async move {
            let hook =
                ctx.create_hook_with::<bool>(HookOptions::new().token("late").expires_in("1ms"));
            ctx.sleep("1h").await?;
            drop(hook);
            Ok::<_, WorkflowError>(())
        });
        world
            .register(&greet)
            .unwrap()
            .register(&hello)
            .unwrap()
            .register(&note)
            .unwrap()
            .register(&approval)
            .unwrap()
            .register(&nap)
            .unwrap()
            .register(&late)
            .unwrap();
        world.start().await.unwrap();

        let now = world.clock().now_ms();
        let keys = Arc::new(KeyRing::new());
        let read = keys.create("dashboard", Scope::Read, now, None).key;
        let write = keys.create("service", Scope::Write, now, None).key;
        let admin = keys.create("operator", Scope::Admin, now, None).key;
        let expired = keys
            .create("old", Scope::Admin, now - 10, Some(now - 1))
            .key;
        let gone = keys.create("leaked", Scope::Admin, now, None);
        keys.revoke(&gone.record.id, now);
        let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
            .await
            .unwrap();
        let base = format!("http://{}", server.local_addr());
        Served {
            world,
            server,
            http: Client::new(),
            base,
            read,
            write,
            admin,
            expired,
            revoked: gone.key,
            tokens,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn get(&self, key: &str, path: &str) -> (StatusCode, Value) {
        let response = self
            .http
            .get(self.url(path))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .http
            .post(self.url(path))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn start(&self, workflow: &str, input: Value) -> String {
        let (status, body) = self
            .post(
                &self.write,
                "/v1/runs",
                json!({ "workflow": workflow, "input": input }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["run_id"].as_str().unwrap().to_owned()
    }

    async fn run_count(&self) -> usize {
        self.world
            .query_workflows(WorkflowQueryFilter::new())
            .await
            .unwrap()
            .len()
    }

    async fn stop(self) {
        self.server.shutdown().await;
        self.world.shutdown().await.unwrap();
    }
}

fn code(body: &Value) -> &str {
    body["code"].as_str().unwrap_or_default()
}

/// Every guarded route, as the OpenAPI document names it, with the scope it needs.
const ROUTES: [(&str, &str, Scope); 57] = [
    ("GET", "/v1/runs", Scope::Read),
    ("GET", "/v1/runs/{id}", Scope::Read),
    ("GET", "/v1/runs/{id}/result", Scope::Read),
    ("GET", "/v1/runs/{id}/events", Scope::Read),
    ("GET", "/v1/runs/{id}/steps", Scope::Read),
    ("GET", "/v1/runs/{id}/waits", Scope::Read),
    ("POST", "/v1/runs", Scope::Write),
    ("POST", "/v1/runs/{id}/cancel", Scope::Write),
    ("POST", "/v1/runs/{id}/retry", Scope::Write),
    ("POST", "/v1/runs/{id}/reset", Scope::Write),
    ("POST", "/v1/runs/{id}/resume", Scope::Write),
    ("POST", "/v1/bulk", Scope::Write),
    ("GET", "/v1/bulk/{id}", Scope::Read),
    ("POST", "/v1/prune", Scope::Admin),
    ("GET", "/v1/prune/{id}", Scope::Read),
    ("GET", "/v1/retention", Scope::Read),
    ("POST", "/v1/hooks/resume", Scope::Write),
    ("GET", "/v1/hooks", Scope::Read),
    ("GET", "/v1/hooks/{id}", Scope::Read),
    ("GET", "/v1/runs/{id}/hooks", Scope::Read),
    ("GET", "/v1/schedules", Scope::Read),
    ("GET", "/v1/schedules/{id}", Scope::Read),
    ("GET", "/v1/metrics", Scope::Read),
    ("GET", "/metrics", Scope::Read),
    ("GET", "/v1/workers", Scope::Read),
    ("GET", "/v1/openapi.json", Scope::Read),
    ("POST", "/v1/schedules", Scope::Admin),
    ("POST", "/v1/schedules/{id}/pause", Scope::Admin),
    ("GET", "/v1/pauses", Scope::Read),
    ("PUT", "/v1/pauses/{kind}/{name}", Scope::Admin),
    ("DELETE", "/v1/pauses/{kind}/{name}", Scope::Admin),
    ("POST", "/v1/schedules/{id}/resume", Scope::Admin),
    ("DELETE", "/v1/schedules/{id}", Scope::Admin),
    ("GET", "/v1/runs/{id}/streams", Scope::Read),
    ("GET", "/v1/runs/{id}/streams/{name}", Scope::Read),
    ("GET", "/v1/runs/{id}/streams/{name}/live", Scope::Read),
    ("GET", "/v1/runs/{id}/streams/{name}/chunks", Scope::Read),
    ("GET", "/v1/runs/{id}/streams/{name}/info", Scope::Read),
    ("GET", "/v1/keys", Scope::Admin),
    ("POST", "/v1/keys", Scope::Admin),
    ("POST", "/v1/keys/{id}/revoke", Scope::Admin),
    ("POST", "/v1/runs/{id}/streams/{name}", Scope::Write),
    ("POST", "/v1/runs/{id}/streams/{name}/close", Scope::Write),
    ("POST", "/v1/runs/{id}/streams/{name}/chunks", Scope::Write),
    ("GET", "/v1/devkit/runs", Scope::Read),
    ("GET", "/v1/devkit/runs/{id}", Scope::Read),
    ("GET", "/v1/devkit/runs/{id}/steps", Scope::Read),
    ("GET", "/v1/devkit/runs/{id}/steps/{step}", Scope::Read),
    ("GET", "/v1/devkit/runs/{id}/events", Scope::Read),
    ("GET", "/v1/devkit/runs/{id}/events/{event}", Scope::Read),
    ("GET", "/v1/devkit/events", Scope::Read),
    ("GET", "/v1/devkit/hooks/{hook}", Scope::Read),
    ("GET", "/v1/devkit/hooks", Scope::Read),
    ("POST", "/v1/devkit/events", Scope::Write),
    ("POST", "/v1/devkit/runs/{id}/attributes", Scope::Write),
    ("POST", "/v1/devkit/hooks/by-token", Scope::Write),
    ("POST", "/v1/devkit/queue", Scope::Write),
];

/// A route's path with its parameters filled in.
fn concrete(path: &str) -> String {
    let id = if path.starts_with("/v1/schedules") {
        "nightly"
    } else if path.starts_with("/v1/keys") {
        "AAAAAAAA"
    } else if path.starts_with("/v1/hooks") {
        "hook_x"
    } else {
        "wrun_x"
    };
    path.replace("{id}", id)
        .replace("{name}", "log")
        .replace("{step}", "step_x")
        .replace("{hook}", "hook_x")
}

#[tokio::test]
async fn every_guarded_route_refuses_callers_without_a_valid_key_of_the_right_scope() {
    let s = Served::new().await;
    // Health checks are open.
    let health = s.http.get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let ready = s.http.get(s.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);

    let malformed = "wek_short";
    let unknown = KeyRing::new().create("x", Scope::Admin, 0, None).key;
    for (name, template, scope) in ROUTES {
        let path = concrete(template);
        let path = path.as_str();
        let admin = scope == Scope::Admin;
        let method = reqwest::Method::from_bytes(name.as_bytes()).unwrap();
        let bare = s
            .http
            .request(method.clone(), s.url(path))
            .json(&json!({ "workflow": "hello", "input": "x" }))
            .send()
            .await
            .unwrap();
        assert_eq!(
            bare.status(),
            StatusCode::UNAUTHORIZED,
            "{path} without a key"
        );
        assert!(bare.headers().contains_key("www-authenticate"));
        assert_eq!(code(&bare.json().await.unwrap()), "UNAUTHENTICATED");
        for (key, why) in [
            (malformed, "malformed"),
            (unknown.as_str(), "not known"),
            (s.expired.as_str(), "expired"),
            (s.revoked.as_str(), "revoked"),
        ] {
            let refused = s
                .http
                .request(method.clone(), s.url(path))
                .bearer_auth(key)
                .json(&json!({ "workflow": "hello", "input": "x" }))
                .send()
                .await
                .unwrap();
            assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "{path}: {why}");
            let body: Value = refused.json().await.unwrap();
            assert!(
                body["message"].as_str().unwrap().contains(why),
                "{path}: {body}"
            );
        }
        assert_eq!(
            scope != Scope::Read,
            method != reqwest::Method::GET || admin,
            "{name} {template}: reads need the read scope, the rest more"
        );
        if scope != Scope::Read {
            let mut too_weak = vec![s.read.as_str()];
            if admin {
                too_weak.push(&s.write);
            }
            for key in too_weak {
                let refused = s
                    .http
                    .request(method.clone(), s.url(path))
                    .bearer_auth(key)
                    .json(&json!({ "workflow": "hello", "input": "x" }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{path}");
                assert_eq!(code(&refused.json().await.unwrap()), "FORBIDDEN");
            }
        }
    }
    assert_eq!(s.run_count().await, 0, "nothing was started");
    s.stop().await;
}

#[tokio::test]
async fn the_openapi_document_lists_exactly_the_routes_served() {
    let s = Served::new().await;
    let bare = s.http.get(s.url("/v1/openapi.json")).send().await.unwrap();
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    let (status, doc) = s.get(&s.read, "/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert!(doc["openapi"].as_str().unwrap().starts_with('3'), "{doc}");
    assert!(doc["components"]["securitySchemes"]["api_key"].is_object());
    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let method = method.to_ascii_uppercase();
            let guarded = operation["security"]
                .as_array()
                .is_some_and(|s| !s.is_empty());
            let open = path == "/healthz" || path == "/readyz";
            assert_eq!(guarded, !open, "{method} {path} names its security");
            assert!(
                operation["responses"]
                    .as_object()
                    .is_some_and(|r| !r.is_empty()),
                "{method} {path} has responses"
            );
            documented.push((method, path.clone()));
        }
    }
    // The document itself is served but not described in itself.
    let mut served: Vec<(String, String)> = ROUTES
        .iter()
        .filter(|(_, path, _)| *path != "/v1/openapi.json")
        .map(|(method, path, _)| ((*method).to_owned(), (*path).to_owned()))
        .chain([
            ("GET".to_owned(), "/healthz".to_owned()),
            ("GET".to_owned(), "/readyz".to_owned()),
        ])
        .collect();
    documented.sort();
    served.sort();
    assert_eq!(documented, served);
    // Every route of the document exists: an admin key gets anything but the fallback's
    // "route not found" or a wrong method.
    for (method, path) in &documented {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = s
            .http
            .request(
                method.clone(),
                s.url(&format!("{}?wait_ms=1", concrete(path))),
            )
            .bearer_auth(&s.admin)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert!(
            body["details"]["what"] != "route",
            "{method} {path} is documented but not served: {body}"
        );
    }
    assert_eq!(
        serde_json::to_value(worlds_server::openapi()).unwrap()["paths"],
        doc["paths"],
        "the document served is the one the crate builds"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_repeated_start_gets_the_existing_run_with_200_or_a_conflict() {
    let s = Served::new().await;
    let start = |options: Value| {
        let s = &s;
        async move {
            s.post(
                &s.write,
                "/v1/runs",
                json!({ "workflow": "nap", "input": null, "options": options }),
            )
            .await
        }
    };
    let (status, first) = start(json!({ "workflow_id": "order-1" })).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, body) = start(json!({ "workflow_id": "order-1" })).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "CONFLICT"),
        "{body}"
    );
    let (status, body) =
        start(json!({ "workflow_id": "order-1", "on_conflict": "use_existing" })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["run_id"], first["run_id"]);

    let (status, keyed) = start(json!({ "idempotency_key": "charge-7" })).await;
    assert_eq!(status, StatusCode::CREATED, "{keyed}");
    let (status, again) = start(json!({ "idempotency_key": "charge-7" })).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["run_id"], keyed["run_id"]);
    assert_eq!(s.run_count().await, 2);

    // Listed one a page by cursor, in both orders.
    let started = [first["run_id"].clone(), keyed["run_id"].clone()];
    for (order, expected) in [
        ("ascending", vec![&started[0], &started[1]]),
        ("descending", vec![&started[1], &started[0]]),
    ] {
        let mut seen = Vec::new();
        let mut path = format!("/v1/runs?limit=1&order={order}");
        loop {
            let (status, page) = s.get(&s.read, &path).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            seen.push(page["data"][0]["id"].clone());
            match page["cursor"].as_str() {
                Some(cursor) => path = format!("/v1/runs?limit=1&order={order}&cursor={cursor}"),
                None => break,
            }
        }
        assert_eq!(seen.iter().collect::<Vec<_>>(), expected, "{order}");
    }
    s.stop().await;
}

#[tokio::test]
async fn an_expired_hook_is_gone_and_a_stopped_world_unavailable() {
    let s = Served::new().await;
    let id = s.start("late-hook", Value::Null).await;
    let expired = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let run = s
                .world
                .get_run(&id, worlds_engine::ResolveData::None)
                .await
                .unwrap();
            if run
                .hooks
                .first()
                .is_some_and(|h| h.status == worlds_engine::HookStatus::Expired)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(expired.is_ok(), "the hook expired");
    let (status, body) = s
        .post(
            &s.write,
            "/v1/hooks/resume",
            json!({ "token": "late", "payload": true }),
        )
        .await;
    assert_eq!((status, code(&body)), (StatusCode::GONE, "GONE"), "{body}");

    s.world.shutdown().await.unwrap();
    let (status, body) = s
        .post(
            &s.write,
            "/v1/runs",
            json!({ "workflow": "hello", "input": "x" }),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE"),
        "{body}"
    );
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_run_is_started_read_listed_paged_and_waited_for() {
    let s = Served::new().await;
    let id = s.start("hello", json!("ada")).await;

    let (status, outcome) = s
        .get(&s.read, &format!("/v1/runs/{id}/result?wait_ms=10000"))
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["done"], true);
    assert_eq!(outcome["status"], "completed");
    assert_eq!(outcome["output"], "hello ada");

    let (status, run) = s.get(&s.read, &format!("/v1/runs/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["status"], "completed");
    assert_eq!(run["input"], "ada");
    let (_, light) = s.get(&s.read, &format!("/v1/runs/{id}?resolve=none")).await;
    assert!(light.get("input").is_none_or(Value::is_null), "{light}");

    let (status, page) = s.get(&s.read, "/v1/runs?status=completed,failed").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["data"][0]["id"], id.as_str());
    let (_, none) = s.get(&s.read, "/v1/runs?status=failed").await;
    assert_eq!(none["data"], json!([]));
    // By code version (this world has none) and workflow id prefix.
    let (status, none) = s.get(&s.read, "/v1/runs?code_version=v2").await;
    assert_eq!((status, &none["data"]), (StatusCode::OK, &json!([])));
    let prefix = &id[..8];
    let (_, found) = s
        .get(&s.read, &format!("/v1/runs?workflow_id_prefix={prefix}"))
        .await;
    assert_eq!(found["data"][0]["id"], id.as_str(), "{found}");

    // The history, two events a page, oldest first, then back from the newest.
    let mut seqs = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/runs/{id}/events?limit=2&cursor={c}"),
            None => format!("/v1/runs/{id}/events?limit=2"),
        };
        let (status, page) = s.get(&s.read, &path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        for event in page["data"].as_array().unwrap() {
            seqs.push(event["seq"].as_u64().unwrap());
        }
        if page["has_more"] != true {
            break;
        }
        cursor = Some(page["cursor"].as_str().unwrap().to_owned());
    }
    let expected: Vec<u64> = (0..seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "every event once, in order");
    assert!(seqs.len() >= 5, "{seqs:?}");
    let (_, newest) = s
        .get(
            &s.read,
            &format!("/v1/runs/{id}/events?limit=1&order=descending"),
        )
        .await;
    assert_eq!(newest["data"][0]["type"], "workflow_completed");

    let (status, steps) = s.get(&s.read, &format!("/v1/runs/{id}/steps")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(steps["data"][0]["name"], "greet");
    assert_eq!(steps["data"][0]["output"], "hello ada");
    s.stop().await;
}

#[tokio::test]
async fn a_waiting_hook_is_resumed_and_a_sleeping_run_cancelled() {
    let s = Served::new().await;
    let id = s.start("approval", Value::Null).await;
    let (status, waiting) = s
        .get(&s.read, &format!("/v1/runs/{id}/result?wait_ms=200"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "still waiting: {waiting}");
    assert_eq!(waiting["done"], false);
    let token = loop {
        if let Some(token) = s.tokens.lock().last().cloned() {
            break token;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // The waiting hook is listed, by itself and with its run; its token is not shown.
    let (status, waiting_hooks) = s.get(&s.read, "/v1/hooks").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(waiting_hooks["data"][0]["run_id"], id.as_str());
    let hook_id = waiting_hooks["data"][0]["hook"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, hook) = s.get(&s.read, &format!("/v1/hooks/{hook_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(hook["hook"]["status"], "waiting");
    assert!(!hook.to_string().contains(&token), "{hook}");
    let (_, of_run) = s.get(&s.read, &format!("/v1/runs/{id}/hooks")).await;
    assert_eq!(of_run["data"][0]["hook"]["id"], hook_id.as_str());
    // What the run waits on: that hook, since it was made, nothing wrong with it.
    let (status, waits) = s.get(&s.read, &format!("/v1/runs/{id}/waits")).await;
    assert_eq!(status, StatusCode::OK, "{waits}");
    assert_eq!(waits.as_array().map(Vec::len), Some(1), "{waits}");
    assert_eq!(waits[0]["on"], "hook");
    assert_eq!(waits[0]["hook_id"], hook_id.as_str());
    assert!(waits[0]["since"].as_i64().unwrap() > 0);
    assert!(waits[0].get("concern").is_none(), "{waits}");
    let (status, _) = s.get(&s.read, "/v1/runs/wrun_nope/waits").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A payload of the wrong type is refused, and the hook still waits.
    let (status, body) = s
        .post(
            &s.write,
            "/v1/hooks/resume",
            json!({ "token": token, "payload": "yes" }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = s
        .post(
            &s.write,
            "/v1/hooks/resume",
            json!({ "token": token, "payload": true }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["run_id"], id.as_str());
    let (status, outcome) = s
        .get(&s.read, &format!("/v1/runs/{id}/result?wait_ms=10000"))
        .await;
    assert_eq!((status, &outcome["output"]), (StatusCode::OK, &json!(true)));
    let (_, waits) = s.get(&s.read, &format!("/v1/runs/{id}/waits")).await;
    assert_eq!(waits, json!([]), "a finished run waits on nothing");
    let (status, again) = s
        .post(
            &s.write,
            "/v1/hooks/resume",
            json!({ "token": token, "payload": true }),
        )
        .await;
    assert!(
        status == StatusCode::CONFLICT || status == StatusCode::NOT_FOUND,
        "{status} {again}"
    );

    let nap = s.start("nap", Value::Null).await;
    let (status, cancelled) = s
        .post(
            &s.write,
            &format!("/v1/runs/{nap}/cancel"),
            json!({ "reason": "not needed" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    let (status, outcome) = s.get(&s.read, &format!("/v1/runs/{nap}/result")).await;
    assert_eq!(
        (status, &outcome["status"]),
        (StatusCode::OK, &json!("cancelled"))
    );
    let (status, body) = s
        .post(&s.write, &format!("/v1/runs/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "a finished run: {body}");
    s.stop().await;
}

#[tokio::test]
async fn bad_requests_are_refused_with_a_code_and_nothing_recorded() {
    let s = Served::new().await;
    let cases: Vec<(reqwest::RequestBuilder, StatusCode, &str)> = vec![
        (
            s.http
                .post(s.url("/v1/runs"))
                .bearer_auth(&s.write)
                .header("content-type", "application/json")
                .body("{\"workflow\": \"hello\", "),
            StatusCode::BAD_REQUEST,
            "INVALID_INPUT",
        ),
        (
            s.http
                .post(s.url("/v1/runs"))
                .bearer_auth(&s.write)
                .json(&json!({ "workflow": "hello", "input": "x", "surprise": 1 })),
            StatusCode::BAD_REQUEST,
            "INVALID_INPUT",
        ),
        (
            s.http
                .post(s.url("/v1/runs"))
                .bearer_auth(&s.write)
                .json(&json!({ "workflow": "hello", "input": "x".repeat(200 * 1024) })),
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
        ),
        (
            s.http
                .post(s.url("/v1/runs"))
                .bearer_auth(&s.write)
                .json(&json!({ "workflow": "nobody", "input": 1 })),
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
        ),
        (
            s.http
                .get(s.url("/v1/runs?status=sleepy"))
                .bearer_auth(&s.read),
            StatusCode::BAD_REQUEST,
            "INVALID_INPUT",
        ),
        (
            s.http.get(s.url("/v1/runs?limit=0")).bearer_auth(&s.read),
            StatusCode::BAD_REQUEST,
            "INVALID_INPUT",
        ),
        (
            s.http.get(s.url("/v1/runs/wrun_none")).bearer_auth(&s.read),
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
        ),
        (
            s.http
                .get(s.url("/v1/runs/wrun_none/events"))
                .bearer_auth(&s.read),
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
        ),
        (
            s.http
                .post(s.url("/v1/hooks/resume"))
                .bearer_auth(&s.write)
                .json(&json!({ "token": "f00d", "payload": 1 })),
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
        ),
        (
            s.http.get(s.url("/v2/nothing")).bearer_auth(&s.read),
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
        ),
    ];
    for (request, status, expected) in cases {
        let response = request.send().await.unwrap();
        let got = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(got, status, "{body}");
        assert_eq!(code(&body), expected, "{body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{body}"
        );
    }
    assert_eq!(s.run_count().await, 0, "nothing was started");
    s.stop().await;
}

#[tokio::test]
async fn schedules_are_managed_with_an_admin_key_and_metrics_and_workers_are_served() {
    let s = Served::new().await;
    let (status, made) = s
        .post(
            &s.admin,
            "/v1/schedules",
            json!({ "id": "nightly", "workflow": "hello", "cron": "0 2 * * *", "input": "night" }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["paused"], false);
    let (status, listed) = s.get(&s.read, "/v1/schedules").await;
    assert_eq!(
        (status, listed[0]["id"].as_str()),
        (StatusCode::OK, Some("nightly"))
    );
    let (status, paused) = s
        .post(&s.admin, "/v1/schedules/nightly/pause", json!({}))
        .await;
    assert_eq!((status, &paused["paused"]), (StatusCode::OK, &json!(true)));
    let (_, got) = s.get(&s.read, "/v1/schedules/nightly").await;
    assert_eq!(got["paused"], true);
    let (status, _) = s
        .post(&s.admin, "/v1/schedules/nightly/resume", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = s
        .post(
            &s.admin,
            "/v1/schedules",
            json!({ "id": "bad", "workflow": "hello", "cron": "99 * * * *" }),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "INVALID_INPUT")
    );
    let deleted = s
        .http
        .delete(s.url("/v1/schedules/nightly"))
        .bearer_auth(&s.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let (status, _) = s.get(&s.read, "/v1/schedules/nightly").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let id = s.start("hello", json!("m")).await;
    let (status, _) = s
        .get(&s.read, &format!("/v1/runs/{id}/result?wait_ms=10000"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, metrics) = s.get(&s.read, "/v1/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(metrics.get("throughput").is_some(), "{metrics}");
    let (status, workers) = s.get(&s.read, "/v1/workers").await;
    assert_eq!(status, StatusCode::OK);
    let live = workers["live"].as_array().unwrap();
    assert!(!live.is_empty(), "{workers}");
    assert!(
        live[0]["id"].is_string() && live[0]["status"].is_string(),
        "{workers}"
    );
    assert!(workers["dead"].is_array());
    let text = s
        .http
        .get(s.url("/metrics"))
        .bearer_auth(&s.read)
        .send()
        .await
        .unwrap();
    assert!(text.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    assert!(text.text().await.unwrap().contains("worlds_"));
    s.stop().await;
}

/// Reads Server-Sent Events from `response` until `end` (or `error`), as `(event, id, data)`.
async fn read_events(
    mut response: reqwest::Response,
    mut on_event: impl FnMut(&(String, String, String)),
) -> Vec<(String, String, String)> {
    let mut buffer = String::new();
    let mut events = Vec::new();
    while let Some(bytes) = response.chunk().await.unwrap() {
        buffer.push_str(std::str::from_utf8(&bytes).unwrap());
        while let Some(at) = buffer.find("\n\n") {
            let block: String = buffer.drain(..at + 2).collect();
            let (mut event, mut id, mut data) = (String::new(), String::new(), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = v.trim().to_owned();
                }
            }
            if event.is_empty() {
                continue; // a keep-alive comment
            }
            let done = event == "end" || event == "error";
            let item = (event, id, data);
            on_event(&item);
            events.push(item);
            if done {
                return events;
            }
        }
    }
    events
}

#[tokio::test]
async fn a_stream_is_read_live_and_resumed_after_the_last_event_id() {
    let s = Served::new().await;
    let id = s.start("nap", Value::Null).await;
    let streams = s.world.streams();
    streams.write(&id, "log", "one").await.unwrap();
    streams
        .write(&id, "log", vec![0xff_u8, 0x00])
        .await
        .unwrap();

    let (status, names) = s.get(&s.read, &format!("/v1/runs/{id}/streams")).await;
    assert_eq!((status, names), (StatusCode::OK, json!(["log"])));
    let (status, page) = s
        .get(&s.read, &format!("/v1/runs/{id}/streams/log?limit=1"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["data"][0]["text"], "one");
    let cursor = page["cursor"].as_str().unwrap().to_owned();
    let (_, next) = s
        .get(
            &s.read,
            &format!("/v1/runs/{id}/streams/log?cursor={cursor}"),
        )
        .await;
    assert_eq!(next["data"][0]["base64"], "/wA=");

    // Live: the stored chunks, then one written while connected, then the end.
    let response = s
        .http
        .get(s.url(&format!("/v1/runs/{id}/streams/log/live")))
        .bearer_auth(&s.read)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let world = s.world.clone();
    let run = id.clone();
    let events = read_events(response, move |(_, index, _)| {
        if index == "1" {
            let world = world.clone();
            let run = run.clone();
            tokio::spawn(async move {
                world.streams().write(&run, "log", "three").await.unwrap();
                world.streams().close(&run, "log").await.unwrap();
            });
        }
    })
    .await;
    let ids: Vec<&str> = events.iter().map(|(_, id, _)| id.as_str()).collect();
    assert_eq!(ids, ["0", "1", "2", ""], "{events:?}");
    assert_eq!(events[3].0, "end");
    assert!(events[2].2.contains("three"), "{events:?}");

    // A client that got index 0 reconnects: it continues at 1, nothing twice.
    let response = s
        .http
        .get(s.url(&format!("/v1/runs/{id}/streams/log/live")))
        .bearer_auth(&s.read)
        .header("last-event-id", "0")
        .send()
        .await
        .unwrap();
    let events = read_events(response, |_| {}).await;
    let ids: Vec<&str> = events.iter().map(|(_, id, _)| id.as_str()).collect();
    assert_eq!(ids, ["1", "2", ""], "{events:?}");

    let bad = s
        .http
        .get(s.url(&format!("/v1/runs/{id}/streams/log/live")))
        .bearer_auth(&s.read)
        .header("last-event-id", "yesterday")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let missing = s
        .http
        .get(s.url("/v1/runs/wrun_none/streams/log/live"))
        .bearer_auth(&s.read)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    s.stop().await;
}

#[tokio::test]
async fn a_key_over_its_rate_gets_429_with_retry_after_and_others_go_on() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let world = Arc::new(World::new(WorldConfig::memory()).unwrap());
    world.start().await.unwrap();
    let keys = Arc::new(KeyRing::new());
    let now = world.clock().now_ms();
    let busy = keys.create("busy", Scope::Read, now, None).key;
    let calm = keys.create("calm", Scope::Read, now, None).key;
    let mut options = ApiOptions::with_keys(keys);
    options.rate_limit = Some(worlds_server::RateLimit {
        per_second: std::num::NonZeroU32::new(1).unwrap(),
        burst: std::num::NonZeroU32::new(2).unwrap(),
    });
    let server = serve(world.clone(), "127.0.0.1:0", options).await.unwrap();
    let url = format!("http://{}/v1/runs", server.local_addr());
    let http = Client::new();
    let get = |key: &str| http.get(&url).bearer_auth(key.to_owned()).send();
    assert_eq!(get(&busy).await.unwrap().status(), StatusCode::OK);
    assert_eq!(get(&busy).await.unwrap().status(), StatusCode::OK);
    let limited = get(&busy).await.unwrap();
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    assert_eq!(code(&limited.json().await.unwrap()), "RATE_LIMITED");
    assert_eq!(
        get(&calm).await.unwrap().status(),
        StatusCode::OK,
        "per key"
    );
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn only_configured_origins_get_cors_headers() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let world = Arc::new(World::new(WorldConfig::memory()).unwrap());
    world.start().await.unwrap();
    let keys = Arc::new(KeyRing::new());
    let key = keys
        .create("web", Scope::Read, world.clock().now_ms(), None)
        .key;
    let http = Client::new();
    let preflight = |url: String, origin: &'static str| {
        http.request(reqwest::Method::OPTIONS, url)
            .header("origin", origin)
            .header("access-control-request-method", "GET")
            .header("access-control-request-headers", "authorization")
            .send()
    };

    // By default: no CORS headers at all.
    let plain = serve(
        world.clone(),
        "127.0.0.1:0",
        ApiOptions::with_keys(keys.clone()),
    )
    .await
    .unwrap();
    let url = format!("http://{}/v1/runs", plain.local_addr());
    let answer = preflight(url.clone(), "https://app.example.com")
        .await
        .unwrap();
    assert!(!answer.headers().contains_key("access-control-allow-origin"));
    plain.shutdown().await;

    let mut options = ApiOptions::with_keys(keys);
    options.cors_origins = vec!["https://app.example.com".into()];
    let server = serve(world.clone(), "127.0.0.1:0", options).await.unwrap();
    let url = format!("http://{}/v1/runs", server.local_addr());
    let allowed = preflight(url.clone(), "https://app.example.com")
        .await
        .unwrap();
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );
    let other = preflight(url.clone(), "https://evil.example")
        .await
        .unwrap();
    assert!(!other.headers().contains_key("access-control-allow-origin"));
    // The key is still needed on the request itself.
    let call = http
        .get(&url)
        .header("origin", "https://app.example.com")
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(call.status(), StatusCode::OK);
    assert_eq!(
        call.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );
    let bare = http
        .get(&url)
        .header("origin", "https://app.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_client_stalled_in_its_headers_or_body_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut config = WorldConfig::memory();
    config.webhook_server.header_read_timeout = worlds_engine::duration::Dur::from_millis(300);
    config.webhook_server.body_read_timeout = worlds_engine::duration::Dur::from_millis(300);
    let world = Arc::new(World::new(config).unwrap());
    world.start().await.unwrap();
    let keys = Arc::new(KeyRing::new());
    let key = keys
        .create("k", Scope::Write, world.clock().now_ms(), None)
        .key;
    let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
        .await
        .unwrap();
    let addr = server.local_addr();
    let read_all = |mut stream: tokio::net::TcpStream| async move {
        tokio::time::timeout(Duration::from_secs(5), async move {
            let mut raw = Vec::new();
            let _ = stream.read_to_end(&mut raw).await;
            raw
        })
        .await
        .expect("the server kept a stalled connection open")
    };

    // Half a request line, then nothing: closed after the header timeout.
    let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(b"GET /v1/runs HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    read_all(stalled).await;

    // Headers, then a body that stops halfway: refused, and nothing started.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = br#"{"workflow": "nothing", "input": null}"#;
    let head = format!(
        "POST /v1/runs HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&body[..10]).await.unwrap();
    let answer = String::from_utf8_lossy(&read_all(slow).await).into_owned();
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 4"),
        "{answer}"
    );
    assert!(world
        .query_workflows(WorkflowQueryFilter::new())
        .await
        .unwrap()
        .is_empty());
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_bearer_scheme_is_read_in_any_case() {
    let s = Served::new().await;
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let answer = s
            .http
            .get(s.url("/v1/runs"))
            .header("authorization", format!("{scheme} {}", s.read))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "{scheme}");
    }
    for header in [
        format!("Basic {}", s.read),
        format!("Bearer{}", s.read),
        s.read.clone(),
    ] {
        let answer = s
            .http
            .get(s.url("/v1/runs"))
            .header("authorization", &header)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{header}");
    }
    s.stop().await;
}
