//! The dashboard's pauses page over real loopback HTTP, without a browser: an admin session
//! pauses a workflow from the page's form (recorded as paused by its key) and resumes it with
//! the row's button; names and reasons made of markup reach the page as text; a read session
//! sees no form and its POST is refused; a POST that does not come from the dashboard's own
//! page is refused; a name no store can hold is refused with nothing stored. A run held by the
//! pause says so on its page.

#![cfg(feature = "dashboard")]

use std::sync::Arc;

use reqwest::redirect::Policy;
use reqwest::Client;
use worlds_engine::model::PauseTarget;
use worlds_engine::prelude::*;
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions};

const HOSTILE: &str = "<script>alert(\"x\")</script>";

async fn sign_in(http: &Client, base: &str, keys: &KeyRing, scope: Scope, now: i64) -> String {
    let key = keys.create("operator", scope, now, None).key;
    let login = http
        .post(format!("{base}/login"))
        .header("origin", base)
        .header("sec-fetch-site", "same-origin")
        .form(&[("key", key.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status().as_u16(), 303, "signed in");
    let cookie = login.headers()["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

async fn page(http: &Client, base: &str, cookie: &str, path: &str) -> (u16, String) {
    let response = http
        .get(format!("{base}{path}"))
        .header("cookie", cookie)
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

async fn post(
    http: &Client,
    base: &str,
    cookie: &str,
    path: &str,
    form: &[(&str, &str)],
    same_origin: bool,
) -> reqwest::Response {
    let mut request = http
        .post(format!("{base}{path}"))
        .header("cookie", cookie)
        .form(form);
    if same_origin {
        request = request
            .header("origin", base)
            .header("sec-fetch-site", "same-origin");
    } else {
        request = request
            .header("origin", "https://evil.example")
            .header("sec-fetch-site", "cross-site");
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn an_admin_pauses_and_resumes_from_the_page_and_others_cannot() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let world = Arc::new(World::new(WorldConfig::memory()).unwrap());
    let done = workflow("done", |_ctx: WorkflowContext, n: u64| async move {
        Ok::<_, WorkflowError>(n)
    });
    world.register(&done).unwrap();
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
    let http = Client::builder().redirect(Policy::none()).build().unwrap();
    let now = world.clock().now_ms();
    let admin = sign_in(&http, &base, &keys, Scope::Admin, now).await;
    let reader = sign_in(&http, &base, &keys, Scope::Read, now).await;

    let (status, body) = page(&http, &base, &admin, "/pauses").await;
    assert_eq!(status, 200);
    assert!(
        body.contains("Nothing is paused") && body.contains("action=\"/pauses\""),
        "{body}"
    );

    let paused = post(
        &http,
        &base,
        &admin,
        "/pauses",
        &[("kind", "workflow"), ("name", "done"), ("reason", HOSTILE)],
        true,
    )
    .await;
    assert_eq!(paused.status().as_u16(), 303);
    let pauses = world.pauses().await.unwrap();
    assert_eq!(pauses.len(), 1);
    assert_eq!(pauses[0].target, PauseTarget::Workflow("done".into()));
    assert!(pauses[0].by.starts_with("key:"), "{:?}", pauses[0].by);
    let (_, body) = page(&http, &base, &admin, "/pauses").await;
    assert!(!body.contains(HOSTILE), "markup reaches the page as text");
    assert!(body.contains("&#60;script&#62;"), "{body}");
    assert!(body.contains("/pauses/workflow/done/resume"), "{body}");

    // A run the pause holds says so on its page.
    let held = world
        .execute(&done, 1, WorkflowOptions::default())
        .await
        .unwrap();
    let (_, body) = page(&http, &base, &admin, &format!("/runs/{}", held.id)).await;
    assert!(
        body.contains("its start: workflow `done` paused by key:"),
        "{body}"
    );

    // A read session: no form, no buttons, and its POSTs are refused.
    let (_, body) = page(&http, &base, &reader, "/pauses").await;
    assert!(
        !body.contains("action=\"/pauses\"") && !body.contains("/resume\""),
        "{body}"
    );
    let refused = post(
        &http,
        &base,
        &reader,
        "/pauses/workflow/done/resume",
        &[],
        true,
    )
    .await;
    assert_eq!(refused.status().as_u16(), 403);
    // Not from the dashboard's own page.
    let refused = post(
        &http,
        &base,
        &admin,
        "/pauses/workflow/done/resume",
        &[],
        false,
    )
    .await;
    assert!(refused.status().is_client_error(), "{}", refused.status());
    assert_eq!(world.pauses().await.unwrap().len(), 1);
    // A name no store can hold.
    let refused = post(
        &http,
        &base,
        &admin,
        "/pauses",
        &[("kind", "task_queue"), ("name", "a\u{0}b")],
        true,
    )
    .await;
    assert_eq!(refused.status().as_u16(), 400);
    let refused = post(
        &http,
        &base,
        &admin,
        "/pauses",
        &[("kind", "run"), ("name", "x")],
        true,
    )
    .await;
    assert_eq!(refused.status().as_u16(), 400);
    assert_eq!(world.pauses().await.unwrap().len(), 1);

    let resumed = post(
        &http,
        &base,
        &admin,
        "/pauses/workflow/done/resume",
        &[],
        true,
    )
    .await;
    assert_eq!(resumed.status().as_u16(), 303);
    assert_eq!(held.result().await.unwrap(), 1);
    assert!(world.pauses().await.unwrap().is_empty());
    server.shutdown().await;
    world.shutdown().await.unwrap();
}
