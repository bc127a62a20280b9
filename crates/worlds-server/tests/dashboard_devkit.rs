//! Without a browser: runs of the Workflow DevKit's event-sourced World (spec version 5),
//! written the way a DevKit app writes them (`POST /v1/devkit/events`, streams through
//! `/v1/runs/{id}/streams/{name}/chunks`), read back as the dashboard's HTML over real HTTP:
//! the runs list, the run's steps, history, timeline, hooks, waits and streams, its binary
//! payloads shown as bytes (a size and an escaped preview, never the `{"$bytes"}` form), its
//! runtime (spec version, execution context, attributes), and hostile content escaped and
//! bounded.

#![cfg(feature = "dashboard")]

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{json, Value};
use worlds_engine::prelude::*;
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions, ApiServer};

/// A served world, an admin key for the API, and a dashboard session signed in with it.
struct Served {
    world: Arc<World>,
    server: ApiServer,
    base: String,
    http: reqwest::Client,
    key: String,
    cookie: String,
}

/// `data` as a DevKit runtime sends bytes: `{"$bytes": "<standard base64>"}`.
fn bytes(data: &[u8]) -> Value {
    json!({ "$bytes": base64::engine::general_purpose::STANDARD.encode(data) })
}

impl Served {
    /// A memory world with `nap` (an engine workflow), served, and a session signed in with an
    /// admin key.
    async fn start() -> Served {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let world = Arc::new(World::new(WorldConfig::memory()).unwrap());
        // An engine workflow beside the DevKit runs: it sleeps an hour.
        let nap = workflow("nap", |ctx: WorkflowContext, _: Value| async move {
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(())
        });
        world.register(&nap).unwrap();
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

    /// One DevKit `events.create` as the runtime sends it (`{runId, event, params}`): the
    /// answer's status and JSON.
    async fn try_event(&self, run_id: Option<&str>, event: Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}/v1/devkit/events", self.base))
            .bearer_auth(&self.key)
            .json(&json!({ "runId": run_id, "event": event, "params": {} }))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    /// One DevKit `events.create` of spec version 5; panics unless it succeeds. The answer's
    /// JSON.
    async fn event(&self, run_id: Option<&str>, mut event: Value) -> Value {
        event["specVersion"] = json!(5);
        let (status, body) = self.try_event(run_id, event.clone()).await;
        assert!((200..300).contains(&status), "{event}: {status} {body}");
        body
    }

    /// A run created (under `run_id`, or one the server makes for `None`) and started as a
    /// DevKit 5.x runtime does; its id.
    async fn new_run(
        &self,
        run_id: Option<&str>,
        name: &str,
        input: Value,
        context: Value,
        attributes: Value,
    ) -> String {
        let created = self
            .event(
                run_id,
                json!({
                    "eventType": "run_created",
                    "eventData": {
                        "workflowName": name,
                        "deploymentId": "dpl_shop",
                        "input": input,
                        "executionContext": context,
                        "attributes": attributes,
                    },
                }),
            )
            .await;
        let id = created["run"]["runId"].as_str().unwrap().to_owned();
        if let Some(chosen) = run_id {
            assert_eq!(id, chosen, "the run keeps the id its runtime chose");
        }
        self.event(Some(&id), json!({"eventType": "run_started"}))
            .await;
        id
    }

    /// `experimentalSetAttributes`: the run's attributes after `changes`.
    async fn attributes(&self, run_id: &str, changes: Value) -> Value {
        let response = self
            .http
            .post(format!("{}/v1/devkit/runs/{run_id}/attributes", self.base))
            .bearer_auth(&self.key)
            .json(&json!({ "changes": changes }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        response.json::<Value>().await.unwrap()["attributes"].clone()
    }

    /// Writes `chunks` to the run's stream `name` in one request, as the DevKit World's
    /// `writeToStreamMulti` does (each chunk as bytes).
    async fn chunks(&self, run_id: &str, name: &str, chunks: &[&[u8]]) {
        let chunks: Vec<Value> = chunks.iter().map(|c| bytes(c)).collect();
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

    /// Stops the server, then the world.
    async fn stop(self) {
        self.server.shutdown().await;
        self.world.shutdown().await.unwrap();
    }
}

/// `at` (ms since the epoch) as the RFC 3339 time a DevKit runtime sends.
fn iso(at: i64) -> String {
    jiff::Timestamp::from_millisecond(at).unwrap().to_string()
}

/// `text` as the templates escape it into HTML.
fn escaped(text: &str) -> String {
    text.replace('&', "&#38;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

/// The element of `page` whose `id` is `id`, up to the end of its `</tag>`.
fn part<'p>(page: &'p str, id: &str, tag: &str) -> &'p str {
    let start = page
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("the page has #{id}: {page}"));
    let end = page[start..]
        .find(&format!("</{tag}>"))
        .unwrap_or_else(|| panic!("#{id} ends"));
    &page[start..start + end]
}

/// The `<li>` of `list` that holds `needle`.
fn item<'p>(list: &'p str, needle: &str) -> &'p str {
    let at = list
        .find(needle)
        .unwrap_or_else(|| panic!("{needle} is listed: {list}"));
    let start = list[..at].rfind("<li").unwrap();
    let end = at + list[at..].find("</li>").unwrap();
    &list[start..end]
}

/// A 5.x run written event by event (a caller-chosen id; steps completed with binary output,
/// retried, waiting for a retry, failed with error data; hooks received and waiting; waits;
/// attribute changes; a stream), and a second run whose id the server made (a hook conflict,
/// a failure with the runtime's error data): their pages and the runs list show all of it,
/// binary values as bytes and never in the `$bytes` form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_devkit_run_page_shows_its_steps_hooks_waits_streams_and_runtime() {
    let s = Served::start().await;
    let now = s.world.clock().now_ms();
    let id = s
        .new_run(
            Some("wrun_shop-order.1:a"),
            "workflow//app.ts//order",
            bytes(br#"[{"order":"A-1"}]"#),
            json!({"traceCarrier": {"traceparent": "00-abc-def-01"}, "region": "iad1"}),
            json!({"team": "shop", "customer": "c_42"}),
        )
        .await;
    let step = |kind: &str, step: &str, data: Value| json!({"eventType": kind, "correlationId": step, "eventData": data});
    for event in [
        // A step that completes with binary output.
        step(
            "step_created",
            "step_charge",
            json!({"stepName": "step//app.ts//charge", "input": bytes(&[0, 1, 2, 0xff, b'<'])}),
        ),
        step("step_started", "step_charge", json!({})),
        step(
            "step_completed",
            "step_charge",
            json!({"result": bytes(br#"{"charge":"ch_1"}"#)}),
        ),
        // One that is retried once, then completes.
        step(
            "step_created",
            "step_ship",
            json!({"stepName": "step//app.ts//ship", "input": ["A-1"]}),
        ),
        step("step_started", "step_ship", json!({})),
        step(
            "step_retrying",
            "step_ship",
            json!({"error": {"message": "carrier busy"}, "retryAfter": iso(now - 1_000)}),
        ),
        step("step_started", "step_ship", json!({})),
        step("step_completed", "step_ship", json!({"result": "shipped"})),
        // One waiting for its retry an hour from now.
        step(
            "step_created",
            "step_email",
            json!({"stepName": "step//app.ts//email", "input": []}),
        ),
        step("step_started", "step_email", json!({})),
        step(
            "step_retrying",
            "step_email",
            json!({"error": {"message": "smtp down"}, "retryAfter": iso(now + 3_600_000)}),
        ),
        // One that fails for good, its error serialized by the runtime.
        step(
            "step_created",
            "step_refund",
            json!({"stepName": "step//app.ts//refund", "input": []}),
        ),
        step("step_started", "step_refund", json!({})),
        step(
            "step_failed",
            "step_refund",
            json!({"error": bytes(b"RefundError: card <expired>\0")}),
        ),
        // A hook that receives two payloads (a DevKit hook takes payloads until it is
        // disposed), and one that has received none.
        step(
            "hook_created",
            "hook_approve",
            json!({"token": "approve-A-1", "metadata": bytes(b"meta")}),
        ),
        step(
            "hook_received",
            "hook_approve",
            json!({"payload": bytes(br#"{"approved":false}"#)}),
        ),
        step(
            "hook_received",
            "hook_approve",
            json!({"payload": bytes(br#"{"approved":true}"#)}),
        ),
        step("hook_created", "hook_ship", json!({"token": "ship-A-1"})),
        // A wait that completed, and one that waits.
        step("wait_created", "wait_1", json!({"resumeAt": iso(now)})),
        step("wait_completed", "wait_1", json!({})),
        step(
            "wait_created",
            "wait_2",
            json!({"resumeAt": iso(now + 3_600_000)}),
        ),
    ] {
        s.event(Some(&id), event).await;
    }
    let attributes = s
        .attributes(
            &id,
            json!([{"key": "stage", "value": "paid"}, {"key": "customer", "value": null}]),
        )
        .await;
    assert_eq!(attributes, json!({"stage": "paid", "team": "shop"}));
    s.chunks(&id, "strm_progress", &[b"charged", &[0, 0xfe, b'<']])
        .await;

    // A second run, its id made by the server: its hook asks for a token the first run's
    // waiting hook holds, and it fails with an error its runtime serialized.
    let other = s
        .new_run(
            None,
            "workflow//app.ts//refund",
            json!([1]),
            json!({}),
            json!({}),
        )
        .await;
    assert!(other.starts_with("wrun_"), "{other}");
    let conflict = s
        .event(
            Some(&other),
            step("hook_created", "hook_dup", json!({"token": "ship-A-1"})),
        )
        .await;
    assert_eq!(
        conflict["event"]["eventType"], "hook_conflict",
        "{conflict}"
    );
    s.event(
        Some(&other),
        json!({"eventType": "run_failed", "eventData": {
            "error": bytes(br#"{"name":"RefundError","message":"refund refused"}"#)}}),
    )
    .await;

    let (status, page) = s.page(&format!("/runs/{id}")).await;
    assert_eq!(status, 200, "{page}");
    assert!(!page.contains("$bytes"), "never the storage form: {page}");

    // The runtime: spec version, execution context, attributes.
    assert!(
        page.contains("id=\"spec-version\">5 (Workflow DevKit"),
        "{page}"
    );
    let context = part(&page, "execution-context", "details");
    assert!(
        context.contains("00-abc-def-01") && context.contains("iad1"),
        "{context}"
    );
    let table = part(&page, "attributes", "table");
    assert!(
        table.contains("<td><code>stage</code></td><td>paid</td>"),
        "{table}"
    );
    assert!(
        table.contains("<td><code>team</code></td><td>shop</td>"),
        "{table}"
    );
    assert!(
        !table.contains("customer"),
        "a removed attribute is gone: {table}"
    );

    // The steps, each with its status; binary values as bytes.
    let steps = part(&page, "steps", "section");
    assert!(steps.contains("Steps (4)"), "{steps}");
    let charge = item(steps, "step//app.ts//charge");
    assert!(charge.contains("class=\"status completed\""), "{charge}");
    assert!(
        charge.contains("binary, 5 bytes\nhex    00 01 02 ff 3c\nascii  ....&#60;"),
        "{charge}"
    );
    assert!(charge.contains("binary, 17 bytes"), "{charge}");
    assert!(
        charge.contains(&escaped(r#""charge": "ch_1""#)),
        "the output's text, pretty: {charge}"
    );
    let ship = item(steps, "step//app.ts//ship");
    assert!(
        ship.contains("class=\"status completed\"") && ship.contains("attempt 2"),
        "{ship}"
    );
    let email = item(steps, "step//app.ts//email");
    assert!(email.contains("class=\"status retrying\""), "{email}");
    assert!(email.contains("smtp down"), "{email}");
    let refund = item(steps, "step//app.ts//refund");
    assert!(refund.contains("class=\"status failed\""), "{refund}");
    assert!(
        refund.contains("The error as the runtime serialized it"),
        "{refund}"
    );
    assert!(refund.contains("binary, 28 bytes"), "{refund}");
    assert!(
        refund.contains(&escaped("RefundError: card <expired>\\u{0}")),
        "the error's text, escaped: {refund}"
    );

    // The hooks (each with its state and payload), and the form of the one that waits.
    let hooks = part(&page, "all-hooks", "section");
    assert!(hooks.contains("Hooks (2)"), "{hooks}");
    let approve = item(hooks, "hook_approve");
    assert!(
        approve.contains("waiting, created") && approve.contains("2 payloads received, the last"),
        "{approve}"
    );
    assert!(
        approve.contains("binary, 4 bytes") && approve.contains("meta"),
        "{approve}"
    );
    assert!(
        approve.contains("binary, 17 bytes") && approve.contains(&escaped(r#""approved": true"#)),
        "{approve}"
    );
    assert!(
        !approve.contains(&escaped(r#""approved": false"#)),
        "the last payload: {approve}"
    );
    let ship = item(hooks, "hook_ship");
    assert!(
        ship.contains("waiting") && !ship.contains("received"),
        "{ship}"
    );
    assert!(
        !hooks.contains("approve-A-1"),
        "tokens are not shown: {hooks}"
    );
    let resume = part(&page, "hooks", "section");
    for hook in ["hook_approve", "hook_ship"] {
        assert!(
            resume.contains(&format!("/hooks/{hook}/resume")),
            "{resume}"
        );
    }

    // The waits.
    let waits = part(&page, "waits", "section");
    assert!(waits.contains("Waits (2)"), "{waits}");
    assert!(item(waits, "wait_1").contains("completed"), "{waits}");
    assert!(item(waits, "wait_2").contains("waiting"), "{waits}");

    // The stream, with its first chunks.
    let streams = part(&page, "streams", "section");
    assert!(
        streams.contains("<code>strm_progress</code>: 2 chunks, open"),
        "{streams}"
    );
    assert!(streams.contains("(binary, 7 bytes) charged"), "{streams}");
    assert!(streams.contains("(binary, 3 bytes) 00 fe 3c"), "{streams}");

    // The history has the attribute change; the run's input is shown as bytes.
    assert!(
        page.contains("<b>attributes_set</b> stage = paid, customer removed"),
        "{page}"
    );
    assert!(page.contains("binary, 17 bytes\nhex    5b 7b"), "{page}");
    assert!(
        !page.contains("/recover/"),
        "no recovery of a run the engine cannot run"
    );

    // The other run: its conflicting hook, and why it failed with the runtime's error.
    let (status, failed) = s.page(&format!("/runs/{other}")).await;
    assert_eq!(status, 200, "{failed}");
    assert!(!failed.contains("$bytes"), "{failed}");
    let hooks = part(&failed, "all-hooks", "section");
    assert!(item(hooks, "hook_dup").contains("conflict"), "{hooks}");
    let why = part(&failed, "why", "section");
    assert!(why.contains("The workflow failed."), "{why}");
    let data = part(why, "error-data", "details");
    assert!(data.contains("binary, 49 bytes"), "{data}");
    assert!(
        data.contains(&escaped(r#""message": "refund refused""#)),
        "{data}"
    );

    // The runs list has both.
    let (status, list) = s.page("/").await;
    assert_eq!(status, 200);
    for (run, name) in [
        (&id, "workflow//app.ts//order"),
        (&other, "workflow//app.ts//refund"),
    ] {
        let at = list
            .find(&format!("data-run=\"{run}\""))
            .unwrap_or_else(|| panic!("{run} is listed: {list}"));
        let row = &list[at..at + list[at..].find("</tr>").unwrap()];
        assert!(row.contains(name), "{row}");
    }
    assert!(!list.contains("$bytes"), "{list}");
    s.stop().await;
}

/// Values a caller chose (`<script>`, NUL and other control characters, 1 MB strings in every
/// place a runtime can put one) are shown escaped and cut, and the pages stay small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_content_is_escaped_and_the_page_bounded() {
    let s = Served::start().await;
    let script = "<script>alert(\"pwned\")</script>";
    let big = format!("{script}\0\x1b[31m{}", "x".repeat(1_000_000));
    assert_eq!(big.len(), 1_000_037);
    let id = s
        .new_run(
            None,
            &format!("workflow//{script}\u{7}"),
            json!(big),
            json!({"note": big, script: script}),
            json!({"<b>key</b>": format!("{script}\u{1}{}", "v".repeat(4_000))}),
        )
        .await;
    let hostile_step = format!("step_{script}\u{1b}");
    let step = |kind: &str, step: &str, data: Value| json!({"eventType": kind, "correlationId": step, "eventData": data});
    for event in [
        step(
            "step_created",
            &hostile_step,
            json!({"stepName": format!("step//{script}\u{7}"), "input": bytes(big.as_bytes())}),
        ),
        step("step_started", &hostile_step, json!({})),
        step("step_completed", &hostile_step, json!({"result": big})),
        step(
            "step_created",
            "step_fails",
            json!({"stepName": "step//fails", "input": []}),
        ),
        step("step_started", "step_fails", json!({})),
        step(
            "step_failed",
            "step_fails",
            json!({"error": bytes(big.as_bytes())}),
        ),
        step(
            "step_created",
            "step_throws",
            json!({"stepName": "step//throws", "input": []}),
        ),
        step("step_started", "step_throws", json!({})),
        step(
            "step_failed",
            "step_throws",
            json!({"error": {"message": big, "stack": big}}),
        ),
        step(
            "hook_created",
            &format!("hook_{script}\u{1}"),
            json!({"token": "t-1", "metadata": big}),
        ),
        step(
            "hook_received",
            &format!("hook_{script}\u{1}"),
            json!({"payload": bytes(big.as_bytes())}),
        ),
        step(
            "wait_created",
            &format!("wait_{script}\u{1b}"),
            json!({"resumeAt": iso(0)}),
        ),
    ] {
        s.event(Some(&id), event).await;
    }
    s.chunks(&id, "strm_log", &[big.as_bytes(), b"\0\x01<script>"])
        .await;
    s.event(
        Some(&id),
        json!({"eventType": "run_failed", "eventData": {"error": bytes(big.as_bytes())}}),
    )
    .await;

    // A run that goes on, its hostile hook waiting (so offered in a resume form).
    let going = s
        .new_run(None, "workflow//going", json!(null), json!({}), json!({}))
        .await;
    s.event(
        Some(&going),
        step(
            "hook_created",
            &format!("hook_{script}\u{1b}"),
            json!({"token": "t-2"}),
        ),
    )
    .await;

    for path in [
        format!("/runs/{id}"),
        format!("/runs/{going}"),
        "/".to_owned(),
    ] {
        let (status, page) = s.page(&path).await;
        assert_eq!(status, 200, "{path}");
        assert!(
            !page.contains("<script>alert"),
            "{path}: a script got through"
        );
        assert!(!page.contains("$bytes"), "{path}");
        if let Some(at) = page.find(|c: char| c.is_control() && !c.is_whitespace()) {
            let from = page.floor_char_boundary(at.saturating_sub(200));
            panic!(
                "{path}: a control character unescaped: {:?}",
                &page[from..at + 1]
            );
        }
        assert!(
            page.len() < 1_000_000,
            "{path}: the page is bounded, not {} bytes",
            page.len()
        );
        assert!(page.contains(&escaped(script)), "{path}: shown escaped");
    }
    let (_, page) = s.page(&format!("/runs/{id}")).await;
    for (what, shown) in [
        (
            "the values are cut, saying so",
            "cut; 1 000 037 bytes in all".to_owned(),
        ),
        (
            "a binary value's size",
            "binary, 1 000 037 bytes".to_owned(),
        ),
        (
            "NUL written as an escape",
            escaped(&format!("{script}\\u{{0}}\\u{{1b}}[31m")),
        ),
        (
            "the step's id, escaped",
            escaped(&format!("step_{script}\\u{{1b}}")),
        ),
        (
            "the hook's id, escaped",
            escaped(&format!("hook_{script}\\u{{1}}")),
        ),
        (
            "the wait's id, escaped",
            escaped(&format!("wait_{script}\\u{{1b}}")),
        ),
        (
            "a stream chunk on one line",
            "(binary, 10 bytes) 00 01 3c".to_owned(),
        ),
    ] {
        assert!(page.contains(&shown), "{what}: {shown} in {page}");
    }
    let (_, going_page) = s.page(&format!("/runs/{going}")).await;
    let resume = part(&going_page, "hooks", "section");
    let shown_id = escaped(&format!("hook_{script}\\u{{1b}}"));
    assert!(
        resume.contains(&format!("<code>{shown_id}</code>")),
        "the waiting hook's id, escaped: {resume}"
    );
    let steps = part(&page, "steps", "section");
    assert!(
        item(steps, "step//fails").contains("class=\"status failed\""),
        "{steps}"
    );
    assert!(
        item(steps, "step//throws").contains("class=\"status failed\""),
        "{steps}"
    );
    s.stop().await;
}

/// A run of 300 steps lists the first 200 and says how many more there are; past the page's
/// room for values, the rest are named by their size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_300_steps_lists_the_first_200_and_says_how_many_more() {
    let s = Served::start().await;
    let id = s
        .new_run(
            Some("wrun_many_steps"),
            "workflow//app.ts//batch",
            json!([]),
            json!({}),
            json!({}),
        )
        .await;
    for n in 0..300 {
        let step = format!("step_{n:03}");
        // Created and started in one write, as the runtime does when it starts a step lazily.
        s.event(
            Some(&id),
            json!({"eventType": "step_started", "correlationId": step,
                "eventData": {"stepName": format!("step//batch//item_{n:03}"), "input": bytes(&[n as u8; 4])}}),
        )
        .await;
        s.event(
            Some(&id),
            json!({"eventType": "step_completed", "correlationId": step,
                "eventData": {"result": bytes(&vec![b'r'; 10_000])}}),
        )
        .await;
    }
    let (status, page) = s.page(&format!("/runs/{id}")).await;
    assert_eq!(status, 200);
    let steps = part(&page, "steps", "section");
    assert!(steps.contains("Steps (300)"), "{steps}");
    assert_eq!(steps.matches("<li class=\"step\">").count(), 200, "{steps}");
    assert!(steps.contains("step//batch//item_199"), "{steps}");
    assert!(!steps.contains("step//batch//item_200"), "{steps}");
    assert!(
        steps.contains("the first 200 are listed; 100 more are not"),
        "{steps}"
    );
    // 200 outputs of 10 000 bytes: past the page's room for values, the rest are named by size.
    assert!(
        steps.contains("more than this page has room for"),
        "{steps}"
    );
    assert!(
        page.len() < 1_600_000,
        "the page is bounded, not {}",
        page.len()
    );
    s.stop().await;
}

/// A run the engine drives has none of a DevKit run's parts (its timeline draws its steps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_run_page_has_no_devkit_parts() {
    let s = Served::start().await;
    let run = s
        .world
        .execute_by_name::<Value, Value>("nap", Value::Null, WorkflowOptions::default())
        .await
        .unwrap()
        .id;
    let (status, page) = s.page(&format!("/runs/{run}")).await;
    assert_eq!(status, 200, "{page}");
    for part in [
        "id=\"runtime\"",
        "id=\"steps\"",
        "id=\"all-hooks\"",
        "id=\"waits\"",
        "Runs in",
    ] {
        assert!(
            !page.contains(part),
            "{part} is only for DevKit runs: {page}"
        );
    }
    assert!(page.contains("<h1>nap "), "{page}");
    assert!(page.contains("id=\"timeline-title\""), "{page}");
    s.stop().await;
}
