//! The dashboard against a hostile world, over real loopback HTTP: a session ends with its key
//! (revoked or expired: pages, actions and live streams refused at once); ids chosen by callers
//! are percent-encoded in every link and form, so none can steer a form to another action;
//! a sign-in from another site is refused.

#![cfg(feature = "dashboard")]

use std::sync::Arc;
use std::time::Duration;

use reqwest::redirect::Policy;
use reqwest::Client;
use serde_json::Value;
use worlds_engine::clock::VirtualClock;
use worlds_engine::prelude::*;
use worlds_engine::ResolveData;
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions, ApiServer};

/// The longest any wait may take.
const BOUND: Duration = Duration::from_secs(15);

struct Served {
    world: Arc<World>,
    server: ApiServer,
    base: String,
    keys: Arc<KeyRing>,
}

/// A world with `nap` (sleeps an hour) served with the keys of `keys`.
async fn served(clock: Option<VirtualClock>) -> Served {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = WorldConfig::memory();
    let world = Arc::new(match clock {
        Some(clock) => World::with_clock(config, Arc::new(clock)).unwrap(),
        None => World::new(config).unwrap(),
    });
    let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    });
    world.register(&nap).unwrap();
    world.start().await.unwrap();
    let keys = Arc::new(KeyRing::new());
    let server = serve(
        world.clone(),
        "127.0.0.1:0",
        ApiOptions::with_keys(keys.clone()),
    )
    .await
    .unwrap();
    let base = format!("http://{}", server.local_addr());
    Served {
        world,
        server,
        base,
        keys,
    }
}

async fn nap(world: &World) -> String {
    world
        .execute_by_name::<Value, Value>("nap", Value::Null, WorkflowOptions::default())
        .await
        .unwrap()
        .id
}

fn http() -> Client {
    Client::builder().redirect(Policy::none()).build().unwrap()
}

/// Signs in with `key` from the dashboard's own page: the `Cookie` header to send back.
async fn sign_in(http: &Client, base: &str, key: &str) -> String {
    let login = http
        .post(format!("{base}/login"))
        .header("origin", base)
        .header("sec-fetch-site", "same-origin")
        .form(&[("key", key)])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status().as_u16(), 303, "signed in");
    let set_cookie = login.headers()["set-cookie"].to_str().unwrap();
    set_cookie.split(';').next().unwrap().to_owned()
}

/// `POST path` from the dashboard's own page, with the session `cookie`.
async fn act(http: &Client, base: &str, cookie: &str, path: &str) -> reqwest::Response {
    http.post(format!("{base}{path}"))
        .header("cookie", cookie)
        .header("origin", base)
        .header("sec-fetch-site", "same-origin")
        .form(&[("reason", "from the page")])
        .send()
        .await
        .unwrap()
}

async fn status(world: &World, id: &str) -> RunStatus {
    world.get_run(id, ResolveData::None).await.unwrap().status
}

#[tokio::test]
async fn a_revoked_keys_session_is_refused_at_once_and_its_live_stream_ends() {
    let s = served(None).await;
    let now = s.world.clock().now_ms();
    let write = s.keys.create("operator", Scope::Write, now, None);
    let run = nap(&s.world).await;
    let http = http();
    let cookie = sign_in(&http, &s.base, &write.key).await;

    let page = http
        .get(format!("{}/runs/{run}", s.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200, "signed in, the page opens");
    // A live page's event stream, open before the key is revoked.
    let mut live = http
        .get(format!("{}/live?run={run}", s.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(live.status().as_u16(), 200);

    assert!(s.keys.revoke(&write.record.id, s.world.clock().now_ms()));

    let page = http
        .get(format!("{}/runs/{run}", s.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(
        page.status().as_u16(),
        303,
        "a revoked key's session opens no page"
    );
    assert_eq!(page.headers()["location"], "/login");
    let cancel = act(&http, &s.base, &cookie, &format!("/runs/{run}/cancel")).await;
    assert_eq!(cancel.status().as_u16(), 401, "nor acts");
    assert_eq!(status(&s.world, &run).await, RunStatus::Running);

    // The stream opened before ends too (it looks again every second).
    tokio::time::timeout(BOUND, async {
        while live.chunk().await.unwrap_or(None).is_some() {}
    })
    .await
    .expect("the live stream of a revoked key's session ends");

    // A new key's session works; the old cookie stays dead.
    let other = s.keys.create("again", Scope::Write, now, None);
    let fresh = sign_in(&http, &s.base, &other.key).await;
    let cancel = act(&http, &s.base, &fresh, &format!("/runs/{run}/cancel")).await;
    assert_eq!(
        cancel.status().as_u16(),
        303,
        "{}",
        cancel.text().await.unwrap()
    );
    assert_eq!(status(&s.world, &run).await, RunStatus::Cancelled);
    let page = http
        .get(format!("{}/", s.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 303);
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_expired_keys_session_ends_when_the_key_expires() {
    let clock = VirtualClock::new(1_700_000_000_000);
    let s = served(Some(clock.clone())).await;
    let now = s.world.clock().now_ms();
    let write = s
        .keys
        .create("short-lived", Scope::Write, now, Some(now + 60_000));
    let run = nap(&s.world).await;
    let http = http();
    let cookie = sign_in(&http, &s.base, &write.key).await;
    let page = http
        .get(format!("{}/runs/{run}", s.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);

    clock.advance(Duration::from_secs(61));
    let page = http
        .get(format!("{}/runs/{run}", s.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(
        page.status().as_u16(),
        303,
        "the key expired, so did its session"
    );
    let cancel = act(&http, &s.base, &cookie, &format!("/runs/{run}/cancel")).await;
    assert_eq!(cancel.status().as_u16(), 401);
    assert_eq!(status(&s.world, &run).await, RunStatus::Running);
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

/// The URLs a page's links and forms lead to (`href`, `action`, `formaction`, `data-check`),
/// unescaped from HTML and resolved against `base` as a browser does (dot segments and all).
fn targets(base: &str, page: &str) -> Vec<(String, reqwest::Url)> {
    let base = reqwest::Url::parse(base).unwrap();
    let mut found = Vec::new();
    for attribute in [" href=\"", " action=\"", " formaction=\"", " data-check=\""] {
        for (at, _) in page.match_indices(attribute) {
            let rest = &page[at + attribute.len()..];
            let raw = &rest[..rest.find('"').unwrap()];
            let value = raw
                .replace("&#34;", "\"")
                .replace("&#39;", "'")
                .replace("&#60;", "<")
                .replace("&#62;", ">")
                .replace("&#38;", "&")
                .replace("&amp;", "&");
            if value.starts_with('#') {
                continue;
            }
            let name = attribute.trim().trim_end_matches("=\"");
            found.push((name.to_owned(), base.join(&value).unwrap()));
        }
    }
    found
}

/// A DevKit run (driven from outside, so its hook ids are the caller's) waiting on a hook whose
/// id is `hook_id`, written as a 5.x runtime writes it (`POST /v1/devkit/events`).
async fn devkit_run_with_hook(http: &Client, base: &str, key: &str, hook_id: &str) -> String {
    let event = |run_id: Option<&str>, event: Value| {
        http.post(format!("{base}/v1/devkit/events"))
            .bearer_auth(key)
            .json(&serde_json::json!({"runId": run_id, "event": event, "params": {}}))
            .send()
    };
    let run: Value = event(
        None,
        serde_json::json!({"eventType": "run_created", "specVersion": 5, "eventData": {
            "workflowName": "workflow//app.ts//approve", "deploymentId": "dpl_1", "input": []}}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let id = run["run"]["runId"].as_str().unwrap().to_owned();
    for body in [
        serde_json::json!({"eventType": "run_started", "specVersion": 5}),
        serde_json::json!({"eventType": "hook_created", "specVersion": 5, "correlationId": hook_id,
            "eventData": {"token": format!("token-{id}")}}),
    ] {
        let answer = event(Some(&id), body.clone()).await.unwrap();
        assert!(answer.status().is_success(), "{body}: {}", answer.status());
    }
    id
}

#[tokio::test]
async fn hostile_ids_cannot_steer_a_pages_links_and_forms() {
    let s = served(None).await;
    let now = s.world.clock().now_ms();
    let admin = s.keys.create("admin", Scope::Admin, now, None).key;
    let victim = nap(&s.world).await;
    let http = http();
    let mut pages = Vec::new();
    for hostile in [
        format!("../../{victim}/cancel?"),
        format!("../../../runs/{victim}/cancel#"),
        format!("x/../../{victim}/cancel"),
        format!("%2e%2e/%2e%2e/{victim}/cancel?"),
        "a b\"'<>&?=;,+#%/\\".to_owned(),
    ] {
        let id = devkit_run_with_hook(&http, &s.base, &admin, &hostile).await;
        pages.push((id, hostile));
    }
    // A caller-chosen run id that is a dot segment would lead `/runs/{id}/cancel` elsewhere.
    for hostile in [".", ".."] {
        let refused = http
            .post(format!("{}/v1/devkit/events", s.base))
            .bearer_auth(&admin)
            .json(&serde_json::json!({"runId": hostile, "params": {}, "event": {
                "eventType": "run_created", "specVersion": 5, "eventData": {
                "workflowName": "workflow//app.ts//approve", "deploymentId": "dpl_1", "input": []}}}))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status().as_u16(), 400, "run id {hostile:?}");
        let error: Value = refused.json().await.unwrap();
        assert!(error.to_string().contains("runId"), "{error}");
    }
    let cookie = sign_in(&http, &s.base, &admin).await;
    for (id, hostile) in &pages {
        let page = http
            .get(format!("{}/runs/{id}", s.base))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let targets = targets(&s.base, page.as_str());
        let resume = targets
            .iter()
            .find(|(what, url)| what == "action" && url.path().ends_with("/resume"))
            .unwrap_or_else(|| panic!("the resume form of {hostile:?}: {page}"));
        let check = targets
            .iter()
            .find(|(what, _)| what == "data-check")
            .unwrap_or_else(|| panic!("the check URL of {hostile:?}"));
        for (what, url) in &targets {
            assert!(
                url.path_segments()
                    .unwrap()
                    .all(|segment| segment != victim),
                "{what}={url} of the page of hook {hostile:?} leads to the victim"
            );
            if what != "href" {
                assert_eq!(url.query(), None, "{what}={url}: no query smuggled in");
                assert_eq!(url.fragment(), None, "{what}={url}");
            }
        }
        for (url, last) in [(&resume.1, "resume"), (&check.1, "check")] {
            let segments: Vec<&str> = url.path_segments().unwrap().collect();
            assert_eq!(segments.len(), 5, "{url}");
            assert_eq!(segments[..3], ["runs", id.as_str(), "hooks"], "{url}");
            assert_eq!(segments[4], last, "{url}");
        }

        // What the page's script and form send: the check, then the resume, reach the hook.
        let checked: Value = http
            .post(check.1.clone())
            .header("cookie", &cookie)
            .header("origin", &s.base)
            .form(&[("payload", "true")])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(checked["ok"], true, "{hostile:?}: {checked}");
        let resumed = http
            .post(resume.1.clone())
            .header("cookie", &cookie)
            .header("origin", &s.base)
            .form(&[("payload", "true")])
            .send()
            .await
            .unwrap();
        assert_eq!(resumed.status().as_u16(), 303, "{hostile:?}");
        let location = resumed.headers()["location"].to_str().unwrap();
        assert!(location.starts_with(&format!("/runs/{id}?")), "{location}");
        let run = s.world.get_run(id, ResolveData::All).await.unwrap();
        let hook = run.hooks.iter().find(|h| &h.id == hostile).unwrap();
        assert!(
            hook.received_at.is_some(),
            "the hook {hostile:?} got the payload: {hook:?}"
        );
    }
    assert_eq!(status(&s.world, &victim).await, RunStatus::Running);

    // The runs list and the other pages lead nowhere but the dashboard's own paths.
    for path in ["/", "/schedules", "/workers", &format!("/runs/{victim}")] {
        let page = http
            .get(format!("{}{path}", s.base))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for (what, url) in targets(&s.base, &page) {
            assert_eq!(url.origin(), reqwest::Url::parse(&s.base).unwrap().origin());
            assert!(
                !what.contains("action")
                    || url.path().starts_with("/runs/")
                    || url.path() == "/"
                    || url.path().starts_with("/schedules/")
                    || url.path() == "/logout",
                "{what}={url} on {path}"
            );
        }
    }
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_sign_in_from_another_site_is_refused() {
    let s = served(None).await;
    let now = s.world.clock().now_ms();
    // The attacker's own key: a browser signed in with it would act as the attacker.
    let attacker = s.keys.create("attacker", Scope::Read, now, None).key;
    let http = http();
    for (site, origin) in [
        (Some("cross-site"), Some("http://evil.test")),
        (Some("same-site"), None),
        (None, Some("http://evil.test")),
        (None, Some("null")),
        (None, None),
    ] {
        let mut forged = http
            .post(format!("{}/login", s.base))
            .form(&[("key", attacker.as_str())]);
        if let Some(site) = site {
            forged = forged.header("sec-fetch-site", site);
        }
        if let Some(origin) = origin {
            forged = forged.header("origin", origin);
        }
        let refused = forged.send().await.unwrap();
        assert_eq!(refused.status().as_u16(), 403, "{site:?} {origin:?}");
        assert!(
            refused.headers().get("set-cookie").is_none(),
            "no session for {site:?} {origin:?}"
        );
        let page = refused.text().await.unwrap();
        assert!(page.contains("own page"), "{page}");
    }
    // From the sign-in page itself: signed in.
    sign_in(&http, &s.base, &attacker).await;
    let own = http
        .post(format!("{}/login", s.base))
        .header("origin", &s.base)
        .form(&[("key", attacker.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(own.status().as_u16(), 303);
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}
