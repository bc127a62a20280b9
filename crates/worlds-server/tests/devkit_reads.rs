//! The reads of the Workflow DevKit's 5.x World over real loopback HTTP, on runs written the way
//! a DevKit runtime writes them (`POST /v1/devkit/events`): one event by its id, in its own run
//! only; the events of a step or hook by correlation id; hooks by run, and the hooks waiting in
//! every DevKit run; a run's attributes set, overwritten and removed (each an `attr_set` event);
//! runs by status, in pages both ways; events in pages both ways; `resolveData=none` leaving the
//! payloads out. Hostile ids and cursors get a clear 4xx, never a 500.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};
use worlds_engine::clock::VirtualClock;
use worlds_engine::prelude::*;
use worlds_engine::{EventKind, HookOptions, HookStatus, ResolveData};
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
    async fn new() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let clock = Arc::new(VirtualClock::new(T0));
        let world = Arc::new(World::with_clock(WorldConfig::memory(), clock.clone()).unwrap());
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

    /// Calls a DevKit route: (status, JSON body); a refusal must be the API's error shape.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        let what = format!("{method} {} → {status}", shorten(path));
        assert!(!status.is_server_error(), "{what}: {text}");
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!("{what}: not JSON ({e}): {}", shorten(&text));
        });
        if !status.is_success() {
            assert!(
                body["code"].as_str().is_some_and(|c| !c.is_empty()),
                "{what}: {body}"
            );
            assert!(body["message"].is_string(), "{what}: {body}");
        }
        (status, body)
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    /// One `events.create`.
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

    /// A run created (with `input` and `attributes`) as a DevKit 5.x runtime creates it; its id.
    async fn created_run(&self, name: &str, input: Value, attributes: Value) -> String {
        let (status, created) = self
            .event(
                None,
                json!({"eventType": "run_created", "specVersion": 5, "eventData": {"workflowName": name, "deploymentId": "dpl_1", "input": input, "attributes": attributes}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{created}");
        created["run"]["runId"].as_str().unwrap().to_owned()
    }

    /// A run created and started; its id.
    async fn started_run(&self, name: &str) -> String {
        let id = self.created_run(name, json!([name]), json!({})).await;
        self.took(&id, json!({"eventType": "run_started"})).await;
        id
    }

    /// Every item of a list, read page by page from `path` (with its query) as the DevKit
    /// runtime does; checks that each page holds at most `limit` and that an empty last page
    /// has no cursor.
    async fn pages(&self, path: &str, limit: usize) -> Vec<Value> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        let glue = if path.contains('?') { '&' } else { '?' };
        for _ in 0..1_000 {
            let page_path = match &cursor {
                Some(c) => format!("{path}{glue}limit={limit}&cursor={}", encode(c)),
                None => format!("{path}{glue}limit={limit}"),
            };
            let (status, page) = self.get(&page_path).await;
            assert_eq!(status, StatusCode::OK, "{page_path}: {page}");
            let data = page["data"].as_array().unwrap();
            assert!(data.len() <= limit, "{page_path}: {page}");
            all.extend(data.iter().cloned());
            if page["hasMore"] != json!(true) {
                if data.is_empty() {
                    assert!(page["cursor"].is_null(), "{page_path}: {page}");
                }
                return all;
            }
            cursor = Some(page["cursor"].as_str().unwrap().to_owned());
        }
        panic!("{path}: no end to the pages");
    }

    /// Every DevKit event of the run, in one page.
    async fn events(&self, run_id: &str) -> Vec<Value> {
        let (status, page) = self.get(&format!("/runs/{run_id}/events")).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        assert_eq!(page["hasMore"], false);
        page["data"].as_array().unwrap().clone()
    }
}

/// `text` as it goes in a query (a cursor is opaque: it may hold `#`, `&` or `+`).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn shorten(text: &str) -> String {
    text.chars().take(300).collect()
}

/// Each item's `field`.
fn ids<'v>(items: &'v [Value], field: &str) -> Vec<&'v str> {
    items
        .iter()
        .map(|item| item[field].as_str().unwrap_or_else(|| panic!("{item}")))
        .collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    ids(events, "eventType")
}

/// A step created, started, failed once (to be retried at once), started and completed.
async fn step_with_a_retry(s: &Served, run: &str, step: &str) {
    for event in [
        json!({"eventType": "step_created", "correlationId": step, "eventData": {"stepName": "charge", "input": {"card": "4242"}}}),
        json!({"eventType": "step_started", "correlationId": step}),
        json!({"eventType": "step_retrying", "correlationId": step, "eventData": {"error": {"message": "busy"}}}),
        json!({"eventType": "step_started", "correlationId": step}),
        json!({"eventType": "step_completed", "correlationId": step, "eventData": {"result": {"charge": "ch_1"}}}),
    ] {
        s.took(run, event).await;
    }
}

#[tokio::test]
async fn an_event_is_got_by_its_id_in_its_own_run_only() {
    let s = Served::new().await;
    let a = s.started_run("workflow//w.ts//a").await;
    let b = s.started_run("workflow//w.ts//b").await;
    step_with_a_retry(&s, &a, "step_a").await;
    s.took(
        &a,
        json!({"eventType": "hook_created", "correlationId": "hook_a", "eventData": {"token": "tok-a", "metadata": {"m": 1}}}),
    )
    .await;
    s.took(
        &a,
        json!({"eventType": "hook_received", "correlationId": "hook_a", "eventData": {"payload": {"approved": true}}}),
    )
    .await;

    // Every event of the list is got by its id, the same.
    let events = s.events(&a).await;
    assert_eq!(events.len(), 9, "{events:?}");
    for event in &events {
        let id = event["eventId"].as_str().unwrap();
        assert!(id.starts_with("evnt_"), "{event}");
        let (status, got) = s.get(&format!("/runs/{a}/events/{id}")).await;
        assert_eq!(status, StatusCode::OK, "{got}");
        assert_eq!(&got, event);
        let (_, got) = s
            .get(&format!("/runs/{a}/events/{id}?resolveData=all"))
            .await;
        assert_eq!(&got, event);
        // Not through another run, nor a run that does not exist.
        let (status, body) = s.get(&format!("/runs/{b}/events/{id}")).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("NOT_FOUND")),
            "{body}"
        );
        let (status, _) = s.get(&format!("/runs/wrun_none/events/{id}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let (status, _) = s
        .get(&format!("/runs/{a}/events/evnt_01KAAAAAAAAAAAAAAAAAAAAAAA"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // An engine event that is no DevKit event (the retry marker written with step_retrying)
    // is not one to get.
    let history = s
        .world
        .external()
        .get_with_history(&a)
        .await
        .unwrap()
        .history;
    let marker = history
        .iter()
        .find(|e| matches!(e.kind, EventKind::ActivityRetry { .. }))
        .expect("a retry marker");
    let (status, body) = s.get(&format!("/runs/{a}/events/{}", marker.id)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // resolveData=none leaves the payloads out: an event holding only a payload has no
    // eventData at all; one holding a name keeps the name.
    let find = |kind: &str| {
        events
            .iter()
            .find(|e| e["eventType"] == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
            .clone()
    };
    let received = find("hook_received");
    assert_eq!(received["eventData"]["payload"], json!({"approved": true}));
    let (_, bare) = s
        .get(&format!(
            "/runs/{a}/events/{}?resolveData=none",
            received["eventId"].as_str().unwrap()
        ))
        .await;
    assert!(bare.get("eventData").is_none(), "{bare}");
    assert_eq!(
        (&bare["eventId"], &bare["eventType"], &bare["correlationId"]),
        (
            &received["eventId"],
            &received["eventType"],
            &received["correlationId"]
        )
    );
    for (kind, payload) in [
        ("step_created", "input"),
        ("step_completed", "result"),
        ("step_retrying", "error"),
        ("hook_created", "metadata"),
        ("run_created", "input"),
    ] {
        let full = find(kind);
        assert!(full["eventData"].get(payload).is_some(), "{full}");
        let (_, bare) = s
            .get(&format!(
                "/runs/{a}/events/{}?resolveData=none",
                full["eventId"].as_str().unwrap()
            ))
            .await;
        assert!(
            bare.get("eventData")
                .is_none_or(|data| data.get(payload).is_none()),
            "{kind}: {bare}"
        );
    }
    let (status, body) = s
        .get(&format!(
            "/runs/{a}/events/{}?resolveData=some",
            received["eventId"].as_str().unwrap()
        ))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn the_events_of_a_step_or_hook_are_listed_by_correlation_id_in_pages() {
    let s = Served::new().await;
    let a = s.started_run("workflow//w.ts//a").await;
    let b = s.started_run("workflow//w.ts//b").await;
    step_with_a_retry(&s, &a, "step_a").await;
    step_with_a_retry(&s, &b, "step_b").await;
    s.took(
        &a,
        json!({"eventType": "hook_created", "correlationId": "hook_a", "eventData": {"token": "tok-a"}}),
    )
    .await;
    for n in 0..2 {
        s.took(
            &a,
            json!({"eventType": "hook_received", "correlationId": "hook_a", "eventData": {"payload": n}}),
        )
        .await;
    }
    s.took(
        &a,
        json!({"eventType": "hook_disposed", "correlationId": "hook_a"}),
    )
    .await;

    // What the run's list holds of the step, in pages of 2, both ways.
    let of_step: Vec<Value> = s
        .events(&a)
        .await
        .into_iter()
        .filter(|e| e["correlationId"] == "step_a")
        .collect();
    assert_eq!(
        types(&of_step),
        [
            "step_created",
            "step_started",
            "step_retrying",
            "step_started",
            "step_completed"
        ]
    );
    assert_eq!(s.pages("/events?correlationId=step_a", 2).await, of_step);
    let mut backwards = of_step.clone();
    backwards.reverse();
    assert_eq!(
        s.pages("/events?correlationId=step_a&sortOrder=desc", 2)
            .await,
        backwards
    );
    let (_, first) = s.get("/events?correlationId=step_a&limit=2").await;
    assert_eq!(first["data"].as_array().unwrap().len(), 2);
    assert_eq!(first["hasMore"], true);
    // Another run's step of the same shape is its own.
    let of_b = s.pages("/events?correlationId=step_b", 2).await;
    assert_eq!(of_b.len(), 5);
    assert!(of_b.iter().all(|e| e["runId"] == json!(b)), "{of_b:?}");

    // resolveData=none: the same events, without their payloads.
    let bare = s
        .pages("/events?correlationId=step_a&resolveData=none", 2)
        .await;
    assert_eq!(ids(&bare, "eventId"), ids(&of_step, "eventId"));
    assert_eq!(of_step[0]["eventData"]["input"], json!({"card": "4242"}));
    assert_eq!(of_step[4]["eventData"]["result"], json!({"charge": "ch_1"}));
    for event in &bare {
        for payload in ["input", "result", "error"] {
            assert!(event["eventData"].get(payload).is_none(), "{event}");
        }
    }

    // A hook's events, by its id.
    let of_hook = s.pages("/events?correlationId=hook_a", 3).await;
    assert_eq!(
        types(&of_hook),
        [
            "hook_created",
            "hook_received",
            "hook_received",
            "hook_disposed"
        ]
    );
    assert_eq!(of_hook[2]["eventData"]["payload"], 1);
    let bare = s
        .pages("/events?correlationId=hook_a&resolveData=none", 3)
        .await;
    assert!(
        bare.iter().all(|e| e["eventData"].get("payload").is_none()),
        "{bare:?}"
    );

    // Nothing by an id nothing holds; a correlation id is needed, and a cursor must be one.
    let (status, page) = s.get("/events?correlationId=step_none").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["data"], json!([]));
    assert_eq!(page["hasMore"], false);
    assert_eq!(
        s.get("/events").await.0,
        StatusCode::BAD_REQUEST,
        "no correlationId"
    );
    assert_eq!(
        s.get("/events?correlationId=step_a&cursor=later").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        s.get("/events?correlationId=step_a&sortOrder=up").await.0,
        StatusCode::BAD_REQUEST
    );
}

/// Waits on a hook with a known token: a run the engine drives.
fn engine_waiter() -> Workflow<(), String> {
    workflow("engine-waiter", |ctx: WorkflowContext, _: ()| async move {
        let answer = ctx
            .create_hook_with::<String>(HookOptions::new().token("engine-token"))
            .wait()
            .await?;
        Ok::<_, WorkflowError>(answer)
    })
}

#[tokio::test]
async fn hooks_are_listed_by_run_and_waiting_across_the_runs_driven_from_outside() {
    let s = Served::new().await;
    s.world.register(engine_waiter()).unwrap();
    let engine_run = s
        .world
        .execute(&engine_waiter(), (), WorkflowOptions::default())
        .await
        .unwrap()
        .id;
    for _ in 0..1_000 {
        let state = s
            .world
            .get_run(&engine_run, ResolveData::None)
            .await
            .unwrap();
        if state.hooks.iter().any(|h| h.status == HookStatus::Waiting) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let hook = |id: &str, token: &str| json!({"eventType": "hook_created", "correlationId": id, "eventData": {"token": token, "metadata": {"for": id}}});
    // A: one hook waiting, one resumed (and still waiting for more), one disposed.
    let a = s.started_run("workflow//w.ts//a").await;
    s.took(&a, hook("hook_a1", "tok-a1")).await;
    s.took(&a, hook("hook_a2", "tok-a2")).await;
    s.took(
        &a,
        json!({"eventType": "hook_received", "correlationId": "hook_a2", "eventData": {"payload": 1}}),
    )
    .await;
    s.took(&a, hook("hook_a3", "tok-a3")).await;
    s.took(
        &a,
        json!({"eventType": "hook_disposed", "correlationId": "hook_a3"}),
    )
    .await;
    // B: a hook of a run that has ended.
    let b = s.started_run("workflow//w.ts//b").await;
    s.took(&b, hook("hook_b1", "tok-b1")).await;
    s.took(
        &b,
        json!({"eventType": "run_completed", "eventData": {"output": 1}}),
    )
    .await;
    // C: a hook waiting, and one that lost its token to A's.
    let c = s.started_run("workflow//w.ts//c").await;
    s.took(&c, hook("hook_c1", "tok-c1")).await;
    let lost = s.took(&c, hook("hook_c2", "tok-a1")).await;
    assert_eq!(lost["event"]["eventType"], "hook_conflict", "{lost}");

    // By run: its hooks in the order they were created, none that lost its token and none
    // disposed (the DevKit's own Worlds delete a hook when they dispose of it).
    let of_a = s.pages(&format!("/hooks?runId={a}"), 1).await;
    assert_eq!(ids(&of_a, "hookId"), ["hook_a1", "hook_a2"], "{of_a:?}");
    assert_eq!(s.get("/hooks/hook_a3").await.0, StatusCode::NOT_FOUND);
    assert_eq!(s.get("/hooks/hook_c2").await.0, StatusCode::NOT_FOUND);
    assert_eq!(s.get("/hooks/hook_a1").await.0, StatusCode::OK);
    assert!(of_a.iter().all(|h| h["runId"] == json!(a)), "{of_a:?}");
    assert_eq!(of_a[0]["metadata"], json!({"for": "hook_a1"}));
    assert_eq!(of_a[0]["token"], "", "only the token's digest is kept");
    let of_c = s.pages(&format!("/hooks?runId={c}"), 10).await;
    assert_eq!(ids(&of_c, "hookId"), ["hook_c1"]);
    let mut backwards = s
        .pages(&format!("/hooks?runId={a}&sortOrder=desc"), 1)
        .await;
    backwards.reverse();
    assert_eq!(backwards, of_a);
    let bare = s
        .pages(&format!("/hooks?runId={a}&resolveData=none"), 10)
        .await;
    assert_eq!(ids(&bare, "hookId"), ids(&of_a, "hookId"));
    assert!(bare.iter().all(|h| h.get("metadata").is_none()), "{bare:?}");
    assert_eq!(
        s.get("/hooks?runId=wrun_none").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        s.get(&format!("/hooks?runId={engine_run}")).await.0,
        StatusCode::CONFLICT,
        "a run the engine drives is no DevKit run"
    );

    // Without a run: the hooks waiting now in the runs driven from outside, whatever the page
    // size; not a disposed one, one of an ended run, one that lost its token, or the engine's.
    let waiting = |hooks: Vec<Value>| -> BTreeSet<String> {
        hooks
            .iter()
            .map(|h| h["hookId"].as_str().unwrap().to_owned())
            .collect()
    };
    let expected: BTreeSet<String> = ["hook_a1", "hook_a2", "hook_c1"].map(String::from).into();
    for limit in [1, 2, 100] {
        let all = s.pages("/hooks", limit).await;
        assert_eq!(all.len(), 3, "{all:?}");
        assert_eq!(waiting(all), expected, "limit {limit}");
        let all = s.pages("/hooks?sortOrder=desc", limit).await;
        assert_eq!(waiting(all), expected, "limit {limit}, descending");
    }
    let all = s.pages("/hooks?resolveData=none", 100).await;
    assert!(all.iter().all(|h| h.get("metadata").is_none()), "{all:?}");
    let (_, page) = s.get("/hooks").await;
    let a1 = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["hookId"] == "hook_a1")
        .unwrap();
    assert_eq!(a1["runId"], json!(a));
    assert_eq!(a1["metadata"], json!({"for": "hook_a1"}));

    // Once A ends, its hooks wait no more.
    s.took(&a, json!({"eventType": "run_cancelled"})).await;
    let all = s.pages("/hooks", 1).await;
    assert_eq!(ids(&all, "hookId"), ["hook_c1"]);
}

#[tokio::test]
async fn a_runs_attributes_are_set_overwritten_and_removed_as_events() {
    let s = Served::new().await;
    let id = s
        .created_run("workflow//w.ts//a", json!([]), json!({"team": "shop"}))
        .await;
    s.took(&id, json!({"eventType": "run_started"})).await;
    let path = format!("/runs/{id}/attributes");
    let set = |key: &str, value: Value| json!({"changes": [{"key": key, "value": value}]});

    let (status, body) = s.post(&path, set("stage", json!("paid"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"attributes": {"team": "shop", "stage": "paid"}})
    );
    let (_, body) = s.post(&path, set("stage", json!("shipped"))).await;
    assert_eq!(
        body,
        json!({"attributes": {"team": "shop", "stage": "shipped"}})
    );
    let (_, body) = s.post(&path, set("team", Value::Null)).await;
    assert_eq!(body, json!({"attributes": {"stage": "shipped"}}));
    // Several changes at once, applied in order.
    let (_, body) = s
        .post(
            &path,
            json!({"changes": [{"key": "a", "value": "1"}, {"key": "b", "value": "2"}, {"key": "a", "value": null}]}),
        )
        .await;
    assert_eq!(body, json!({"attributes": {"stage": "shipped", "b": "2"}}));

    // A key starting with `$` is the runtime's: refused unless allowed; so is a malformed
    // change. Neither changes anything.
    let (status, body) = s.post(&path, set("$tier", json!("gold"))).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("INVALID_INPUT")),
        "{body}"
    );
    let (status, body) = s
        .post(
            &path,
            json!({"changes": [{"key": "$tier", "value": "gold"}], "allowReservedAttributes": false}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    for bad in [
        json!({"changes": {"stage": "x"}}),
        json!({"changes": [{"key": "stage", "value": 5}]}),
        json!({"changes": [{"key": "", "value": "x"}]}),
        json!({}),
    ] {
        let (status, body) = s.post(&path, bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (_, run) = s.get(&format!("/runs/{id}")).await;
    assert_eq!(run["attributes"], json!({"stage": "shipped", "b": "2"}));
    let (status, body) = s
        .post(
            &path,
            json!({"changes": [{"key": "$tier", "value": "gold"}], "allowReservedAttributes": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"attributes": {"stage": "shipped", "b": "2", "$tier": "gold"}})
    );
    let (_, run) = s.get(&format!("/runs/{id}")).await;
    assert_eq!(run["attributes"], body["attributes"]);

    // Each change taken is an attr_set event of the run, with the changes as sent.
    let changes: Vec<Value> = s
        .events(&id)
        .await
        .into_iter()
        .filter(|e| e["eventType"] == "attr_set")
        .map(|e| e["eventData"]["changes"].clone())
        .collect();
    assert_eq!(
        changes,
        [
            json!([{"key": "stage", "value": "paid"}]),
            json!([{"key": "stage", "value": "shipped"}]),
            json!([{"key": "team", "value": null}]),
            json!([{"key": "a", "value": "1"}, {"key": "b", "value": "2"}, {"key": "a", "value": null}]),
            json!([{"key": "$tier", "value": "gold"}]),
        ]
    );

    // Unknown runs and ended runs take no changes.
    let (status, body) = s
        .post("/runs/wrun_none/attributes", set("k", json!("v")))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    s.took(&id, json!({"eventType": "run_completed"})).await;
    let (status, body) = s.post(&path, set("late", json!("v"))).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("CONFLICT")),
        "{body}"
    );
    let (_, run) = s.get(&format!("/runs/{id}")).await;
    assert_eq!(
        run["attributes"],
        json!({"stage": "shipped", "b": "2", "$tier": "gold"})
    );
}

#[tokio::test]
async fn runs_are_listed_by_status_in_pages_both_ways() {
    let s = Served::new().await;
    let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    });
    s.world.register(nap).unwrap();
    // Six DevKit runs, a second apart, one in each status (two running), with runs the engine
    // drives among them.
    let mut made = Vec::new();
    for (n, status) in [
        "completed",
        "failed",
        "running",
        "pending",
        "cancelled",
        "running",
    ]
    .iter()
    .enumerate()
    {
        s.clock.advance(Duration::from_secs(1));
        let id = s
            .created_run("workflow//w.ts//listed", json!({"n": n}), json!({}))
            .await;
        if *status != "pending" {
            s.took(&id, json!({"eventType": "run_started"})).await;
        }
        match *status {
            "completed" => {
                s.took(
                    &id,
                    json!({"eventType": "run_completed", "eventData": {"output": {"done": n}}}),
                )
                .await;
            }
            "failed" => {
                s.took(
                    &id,
                    json!({"eventType": "run_failed", "eventData": {"error": {"message": "broke"}, "errorCode": "USER_ERROR"}}),
                )
                .await;
            }
            "cancelled" => {
                s.took(&id, json!({"eventType": "run_cancelled"})).await;
            }
            _ => {}
        }
        s.world
            .execute_by_name::<(), ()>("nap", (), WorkflowOptions::default())
            .await
            .unwrap();
        made.push((id, *status));
    }
    let newest_first: Vec<&str> = made.iter().rev().map(|(id, _)| id.as_str()).collect();
    let oldest_first: Vec<&str> = made.iter().map(|(id, _)| id.as_str()).collect();

    // Newest first unless asked otherwise, whatever the page size; the engine's runs are not
    // DevKit runs.
    for limit in [1, 2, 4, 100] {
        let all = s.pages("/runs", limit).await;
        assert_eq!(ids(&all, "runId"), newest_first, "limit {limit}");
        let all = s.pages("/runs?sortOrder=desc", limit).await;
        assert_eq!(ids(&all, "runId"), newest_first, "limit {limit}");
        let all = s.pages("/runs?sortOrder=asc", limit).await;
        assert_eq!(ids(&all, "runId"), oldest_first, "limit {limit}");
    }
    // By status.
    for status in ["pending", "running", "completed", "failed", "cancelled"] {
        let expected: Vec<&str> = made
            .iter()
            .rev()
            .filter(|(_, s)| *s == status)
            .map(|(id, _)| id.as_str())
            .collect();
        let all = s.pages(&format!("/runs?status={status}"), 1).await;
        assert_eq!(ids(&all, "runId"), expected, "{status}");
        assert!(all.iter().all(|r| r["status"] == status), "{all:?}");
    }
    let all = s
        .pages(
            "/runs?status=running&workflowName=workflow//w.ts//listed",
            10,
        )
        .await;
    assert_eq!(all.len(), 2);
    assert_eq!(
        s.pages("/runs?workflowName=workflow//w.ts//other", 10)
            .await
            .len(),
        0
    );

    // resolveData=none leaves out inputs, outputs and errors, and keeps the rest.
    let full = s.pages("/runs", 100).await;
    let bare = s.pages("/runs?resolveData=none", 100).await;
    assert_eq!(ids(&bare, "runId"), newest_first);
    let completed = &full[5];
    assert_eq!(completed["output"], json!({"done": 0}));
    assert_eq!(completed["input"], json!({"n": 0}));
    assert_eq!(full[4]["error"]["message"], "broke");
    for (full, bare) in full.iter().zip(&bare) {
        for payload in ["input", "output", "error"] {
            assert!(bare.get(payload).is_none(), "{bare}");
        }
        assert_eq!(bare["status"], full["status"]);
        assert_eq!(bare["createdAt"], full["createdAt"]);
    }
    assert_eq!(bare[4]["errorCode"], "USER_ERROR");

    for bad in [
        "/runs?status=done",
        "/runs?sortOrder=newest",
        "/runs?resolveData=some",
        "/runs?limit=many",
    ] {
        assert_eq!(s.get(bad).await.0, StatusCode::BAD_REQUEST, "{bad}");
    }
}

#[tokio::test]
async fn a_runs_events_are_listed_in_pages_both_ways() {
    let s = Served::new().await;
    let id = s.started_run("workflow//w.ts//a").await;
    step_with_a_retry(&s, &id, "step_a").await;
    s.took(
        &id,
        json!({"eventType": "wait_created", "correlationId": "wait_1", "eventData": {"resumeAt": "2026-01-01T01:00:00Z"}}),
    )
    .await;
    s.took(
        &id,
        json!({"eventType": "wait_completed", "correlationId": "wait_1"}),
    )
    .await;
    s.took(
        &id,
        json!({"eventType": "run_completed", "eventData": {"output": "done"}}),
    )
    .await;
    let all = s.events(&id).await;
    assert_eq!(
        types(&all),
        [
            "run_created",
            "run_started",
            "step_created",
            "step_started",
            "step_retrying",
            "step_started",
            "step_completed",
            "wait_created",
            "wait_completed",
            "run_completed",
        ]
    );
    let mut backwards = all.clone();
    backwards.reverse();
    for limit in [1, 3, 10, 11] {
        assert_eq!(
            s.pages(&format!("/runs/{id}/events"), limit).await,
            all,
            "{limit}"
        );
        assert_eq!(
            s.pages(&format!("/runs/{id}/events?sortOrder=desc"), limit)
                .await,
            backwards,
            "{limit}"
        );
    }
    // The last page carries its last event's cursor, from which the runtime reads only what
    // comes next: nothing now, and the new event once one is written.
    let open = s.started_run("workflow//w.ts//b").await;
    let (_, whole) = s.get(&format!("/runs/{open}/events")).await;
    assert_eq!(whole["hasMore"], json!(false), "{whole}");
    let last = whole["cursor"].as_str().expect("a cursor on the last page");
    let (_, after) = s.get(&format!("/runs/{open}/events?cursor={last}")).await;
    assert_eq!(after["data"], json!([]), "{after}");
    assert_eq!(after["hasMore"], json!(false), "{after}");
    assert!(after["cursor"].is_null(), "{after}");
    s.took(
        &open,
        json!({"eventType": "wait_created", "correlationId": "wait_2", "eventData": {"resumeAt": "2026-01-01T01:00:00Z"}}),
    )
    .await;
    let (_, after) = s.get(&format!("/runs/{open}/events?cursor={last}")).await;
    assert_eq!(
        types(after["data"].as_array().unwrap()),
        ["wait_created"],
        "{after}"
    );
    // A cursor of one direction read the other way: the events on the other side of it.
    let (_, page) = s.get(&format!("/runs/{id}/events?limit=4")).await;
    let cursor = page["cursor"].as_str().unwrap();
    let (_, rest) = s
        .get(&format!("/runs/{id}/events?sortOrder=desc&cursor={cursor}"))
        .await;
    assert_eq!(
        rest["data"].as_array().unwrap(),
        &backwards[backwards.len() - 3..]
    );
    // Without payloads.
    let bare = s
        .pages(&format!("/runs/{id}/events?resolveData=none"), 3)
        .await;
    assert_eq!(ids(&bare, "eventId"), ids(&all, "eventId"));
    for event in &bare {
        for payload in ["input", "output", "result", "error"] {
            assert!(event["eventData"].get(payload).is_none(), "{event}");
        }
    }
    for bad in [
        "cursor=evnt_x",
        "cursor=-1",
        "sortOrder=sideways",
        "limit=-1",
    ] {
        assert_eq!(
            s.get(&format!("/runs/{id}/events?{bad}")).await.0,
            StatusCode::BAD_REQUEST,
            "{bad}"
        );
    }
}

#[tokio::test]
async fn hostile_ids_and_cursors_in_the_read_routes_get_a_clear_refusal() {
    let s = Served::new().await;
    let id = s.started_run("workflow//w.ts//a").await;
    step_with_a_retry(&s, &id, "step_a").await;
    let event_id = s.events(&id).await[2]["eventId"]
        .as_str()
        .unwrap()
        .to_owned();
    let long = "x".repeat(10_000);
    // As they go in a URL.
    let hostile = [
        "a%00b".to_owned(),
        "..%2F..%2Fetc%2Fpasswd".to_owned(),
        "%2E%2E".to_owned(),
        "..".to_owned(),
        long.clone(),
        "%C3%B8%E6%97%A5%F0%9F%8E%89".to_owned(),
        "%FF%FE".to_owned(),
        "%20".to_owned(),
    ];
    for h in &hostile {
        // A record looked up by a hostile id: not found, or refused.
        for path in [
            format!("/runs/{h}"),
            format!("/runs/{h}/events"),
            format!("/runs/{h}/events/{event_id}"),
            format!("/runs/{id}/events/{h}"),
            format!("/runs/{h}/steps"),
            format!("/runs/{id}/steps/{h}"),
            format!("/hooks/{h}"),
            format!("/hooks?runId={h}"),
        ] {
            let (status, body) = s.get(&path).await;
            assert!(
                status.is_client_error(),
                "{}: {status} {body}",
                shorten(&path)
            );
        }
        let (status, body) = s
            .post(
                &format!("/runs/{h}/attributes"),
                json!({"changes": [{"key": "k", "value": "v"}]}),
            )
            .await;
        assert!(status.is_client_error(), "{}: {status} {body}", shorten(h));
        // The engine's cursors (a position among the runs, or among the waiting hooks): a
        // page, or a refusal, never a 500 (checked by `call`).
        for path in [format!("/runs?cursor={h}"), format!("/hooks?cursor={h}")] {
            let (status, page) = s.get(&path).await;
            assert!(
                status.is_client_error() || page["data"].is_array(),
                "{}: {status} {page}",
                shorten(&path)
            );
        }
        // A filter by a hostile value finds nothing; a hostile cursor or choice is refused.
        let (status, page) = s.get(&format!("/events?correlationId={h}")).await;
        assert!(
            status.is_client_error() || page["data"] == json!([]),
            "{}: {status} {page}",
            shorten(h)
        );
        for path in [
            format!("/events?correlationId=step_a&cursor={h}"),
            format!("/runs/{id}/events?cursor={h}"),
            format!("/runs/{id}/events?sortOrder={h}"),
            format!("/runs/{id}/events/{event_id}?resolveData={h}"),
            format!("/runs?status={h}"),
            format!("/runs?sortOrder={h}"),
            format!("/runs?resolveData={h}"),
        ] {
            let (status, body) = s.get(&path).await;
            assert!(
                status.is_client_error(),
                "{}: {status} {body}",
                shorten(&path)
            );
        }
    }
    // Hostile values in a body: a clear answer, never a 500 (checked by `call`).
    for value in ["a\u{0}b", "../../etc/passwd", long.as_str(), "ø日本🎉"] {
        let (status, body) = s
            .post(
                &format!("/runs/{id}/attributes"),
                json!({"changes": [{"key": value, "value": "v"}]}),
            )
            .await;
        if value.contains('\0') || value.len() > 1_000 {
            assert_eq!(status, StatusCode::BAD_REQUEST, "{}", shorten(value));
        } else {
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(body["attributes"][value], "v");
        }
        let (status, _) = s
            .event(
                Some(value),
                json!({"eventType": "step_started", "correlationId": "step_a"}),
            )
            .await;
        assert!(status.is_client_error(), "{}: {status}", shorten(value));
        s.event(
            Some(&id),
            json!({"eventType": "step_created", "correlationId": value, "eventData": {"stepName": value, "input": []}}),
        )
        .await;
        s.event(
            Some(&id),
            json!({"eventType": "hook_received", "correlationId": value, "eventData": {"payload": 1}}),
        )
        .await;
        let (status, body) = s.post("/hooks/by-token", json!({"token": value})).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    }
    // The run still reads whole.
    let (status, run) = s.get(&format!("/runs/{id}")).await;
    assert_eq!(
        (status, run["status"].as_str()),
        (StatusCode::OK, Some("running"))
    );
}
