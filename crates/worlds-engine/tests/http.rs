//! Real HTTP on loopback: the webhook endpoint answering a real client, and durable fetch
//! against a local server (retries on 5xx and 429, 4xx returned, replay does not call again),
//! and signed webhooks refusing forged, stale and unsigned requests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use parking_lot::Mutex;
use worlds_engine::fetch::{FetchRequest, FetchResponse};
use worlds_engine::prelude::*;

/// An HTTP client for the tests. TLS in reqwest needs a process-wide rustls crypto provider;
/// the engine installs `ring` when it builds its own client, and this does the same.
fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

fn world_config() -> WorldConfig {
    let mut config = WorldConfig::memory();
    config.failure_strategy = FailureStrategy::Ignore;
    config.webhook_base_url = "http://localhost:3000/webhooks".into();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_is_resumed_by_a_real_http_request() {
    let world = World::new(world_config()).unwrap();
    let urls = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = urls.clone();
    let publish = activity("publish-url", move |_ctx: ActivityContext, url: String| {
        let sink = sink.clone();
        async move {
            sink.lock().push(url);
            Ok::<_, StepError>(())
        }
    });
    let step = publish.clone();
    let flow = workflow("paid", move |ctx: WorkflowContext, _: ()| {
        let step = step.clone();
        async move {
            let hook = ctx.create_webhook();
            ctx.run(&step, hook.url().to_owned()).await?;
            let request = hook.wait().await?;
            let paid: serde_json::Value = request.json()?;
            Ok::<_, WorkflowError>((
                request.method,
                request.headers.get("x-signature").cloned(),
                paid,
            ))
        }
    });
    world.register(&publish).unwrap().register(&flow).unwrap();
    world.start().await.unwrap();
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();

    let url = loop {
        if let Some(url) = urls.lock().first().cloned() {
            break url;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let path = url
        .strip_prefix("http://localhost:3000")
        .unwrap()
        .to_owned();
    let endpoint = format!("http://{}{path}", server.local_addr());
    let client = http_client();

    let unknown = client
        .post(format!("http://{}/webhooks/nope", server.local_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status().as_u16(), 404);

    let accepted = client
        .post(&endpoint)
        .header("x-signature", "abc")
        .body(r#"{"amount":42}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status().as_u16(), 202);
    let body: serde_json::Value = serde_json::from_slice(&accepted.bytes().await.unwrap()).unwrap();
    assert_eq!(body["run_id"], run.id.as_str());

    let again = client.post(&endpoint).body("{}").send().await.unwrap();
    assert!(
        matches!(again.status().as_u16(), 404 | 409),
        "{}",
        again.status()
    );

    let result: (String, Option<String>, serde_json::Value) =
        tokio::time::timeout(Duration::from_secs(10), run.result())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(result.0, "POST");
    assert_eq!(result.1.as_deref(), Some("abc"));
    assert_eq!(result.2["amount"], 42);
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[derive(Default)]
struct Hits {
    ok: AtomicUsize,
    flaky: AtomicUsize,
    limited: AtomicUsize,
    missing: AtomicUsize,
}

async fn serve(hits: Arc<Hits>) -> std::net::SocketAddr {
    async fn ok(State(h): State<Arc<Hits>>) -> impl IntoResponse {
        h.ok.fetch_add(1, Ordering::SeqCst);
        ([("content-type", "application/json")], r#"{"price":7}"#)
    }
    async fn flaky(State(h): State<Arc<Hits>>) -> impl IntoResponse {
        if h.flaky.fetch_add(1, Ordering::SeqCst) < 2 {
            (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response()
        } else {
            "fine".into_response()
        }
    }
    async fn limited(State(h): State<Arc<Hits>>) -> impl IntoResponse {
        if h.limited.fetch_add(1, Ordering::SeqCst) == 0 {
            (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "0")],
                "slow down",
            )
                .into_response()
        } else {
            "ok now".into_response()
        }
    }
    async fn missing(State(h): State<Arc<Hits>>) -> impl IntoResponse {
        h.missing.fetch_add(1, Ordering::SeqCst);
        (StatusCode::NOT_FOUND, "no such thing")
    }
    let app = Router::new()
        .route("/ok", get(ok))
        .route("/flaky", get(flaky))
        .route("/limited", get(limited))
        .route("/missing", get(missing))
        .with_state(hits);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_is_a_durable_step_with_retries() {
    let hits = Arc::new(Hits::default());
    let addr = serve(hits.clone()).await;
    let mut config = world_config();
    // Every await replays: a recorded response must not call the server again.
    config.evict_after_every_task = true;
    let world = World::new(config).unwrap();
    let flow = workflow(
        "fetcher",
        move |ctx: WorkflowContext, base: String| async move {
            let quick = || {
                FetchRequest::get().retry(
                    RetryConfig::new()
                        .max_attempts(4)
                        .initial_interval(Duration::from_millis(5)),
                )
            };
            let ok: FetchResponse = ctx.fetch(&format!("{base}/ok"), quick()).await?;
            let price: serde_json::Value = ok.json()?;
            let flaky = ctx.fetch(&format!("{base}/flaky"), quick()).await?;
            let limited = ctx.fetch(&format!("{base}/limited"), quick()).await?;
            let missing = ctx.fetch(&format!("{base}/missing"), quick()).await?;
            ctx.sleep(Duration::from_millis(20)).await?;
            Ok::<_, WorkflowError>((
                price["price"].clone(),
                flaky.body,
                limited.body,
                missing.status,
            ))
        },
    );
    world.register(&flow).unwrap();
    world.start().await.unwrap();
    let run = world
        .execute(&flow, format!("http://{addr}"), WorkflowOptions::default())
        .await
        .unwrap();
    let (price, flaky, limited, missing): (serde_json::Value, String, String, u16) =
        tokio::time::timeout(Duration::from_secs(20), run.result())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(price, 7);
    assert_eq!(flaky, "fine");
    assert_eq!(limited, "ok now");
    assert_eq!(missing, 404, "4xx is returned, not retried");
    assert_eq!(
        hits.ok.load(Ordering::SeqCst),
        1,
        "replays do not fetch again"
    );
    assert_eq!(hits.flaky.load(Ordering::SeqCst), 3);
    assert_eq!(hits.limited.load(Ordering::SeqCst), 2);
    assert_eq!(hits.missing.load(Ordering::SeqCst), 1);

    let state = world.query(&run.id).await.unwrap();
    assert_eq!(
        state.activities[0].name,
        format!("fetch GET http://{addr}/ok")
    );
    assert_eq!(state.activities[1].attempt, 3);
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_gives_up_after_its_retries_and_speaks_tls() {
    let hits = Arc::new(Hits::default());
    let addr = serve(hits.clone()).await;
    let world = World::new(world_config()).unwrap();
    let flow = workflow(
        "giving-up",
        move |ctx: WorkflowContext, url: String| async move {
            let request = FetchRequest::get().retry(
                RetryConfig::new()
                    .max_attempts(2)
                    .initial_interval(Duration::from_millis(5)),
            );
            let response = ctx.fetch(&url, request).await?;
            Ok::<_, WorkflowError>(response.status)
        },
    );
    world.register(&flow).unwrap();
    world.start().await.unwrap();
    let run = world
        .execute(
            &flow,
            format!("http://{addr}/flaky"),
            WorkflowOptions::default(),
        )
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), run.result())
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("503"), "{err}");
    assert_eq!(hits.flaky.load(Ordering::SeqCst), 2);

    // HTTPS goes through rustls: against a server that speaks plain HTTP the handshake fails,
    // which is a network error, retried, then reported.
    let secure = world
        .execute(
            &flow,
            format!("https://{addr}/ok"),
            WorkflowOptions::default(),
        )
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), secure.result())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("fetch https://{addr}/ok failed")),
        "{err}"
    );
    assert_eq!(hits.ok.load(Ordering::SeqCst), 0);
    let state = world.query(&secure.id).await.unwrap();
    assert_eq!(
        state.activities[0].attempt, 2,
        "a failed handshake is retried"
    );
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_webhook_survives_a_restart_and_is_resumed_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = world_config();
    config.persistence = Persistence::File;
    config.persistence_path = dir.path().to_path_buf();
    let urls = Arc::new(Mutex::new(Vec::<String>::new()));
    let make = |urls: Arc<Mutex<Vec<String>>>| {
        let publish = activity("publish-url", move |_ctx: ActivityContext, url: String| {
            let urls = urls.clone();
            async move {
                urls.lock().push(url);
                Ok::<_, StepError>(())
            }
        });
        let step = publish.clone();
        let flow = workflow("restartable", move |ctx: WorkflowContext, _: ()| {
            let step = step.clone();
            async move {
                let hook = ctx.create_webhook_with(HookOptions::new().methods(["PUT"]));
                ctx.run(&step, hook.url().to_owned()).await?;
                Ok::<_, WorkflowError>(hook.wait().await?.body)
            }
        });
        (publish, flow)
    };

    let run_id = {
        let world = World::new(config.clone()).unwrap();
        let (publish, flow) = make(urls.clone());
        world.register(&publish).unwrap().register(&flow).unwrap();
        world.start().await.unwrap();
        let id = world
            .execute(&flow, (), WorkflowOptions::default())
            .await
            .unwrap()
            .id
            .clone();
        while urls.lock().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        world.shutdown().await.unwrap();
        id
    };
    let url = urls.lock()[0].clone();

    let world = World::new(config).unwrap();
    let (publish, flow) = make(urls.clone());
    world.register(&publish).unwrap().register(&flow).unwrap();
    world.start().await.unwrap();
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let path = url.strip_prefix("http://localhost:3000").unwrap();
    let response = http_client()
        .put(format!("http://{}{path}", server.local_addr()))
        .body("after the restart")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 202);
    let handle = world.handle::<String>(&run_id).await.unwrap();
    let body = tokio::time::timeout(Duration::from_secs(10), handle.result())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(body, "after the restart");
    assert_eq!(
        urls.lock().len(),
        1,
        "the publishing step did not run again"
    );
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

/// Milliseconds since the Unix epoch, as the world's system clock reads them.
fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since_epoch.as_millis()).unwrap()
}

/// Posts `body` with `headers` to a webhook path; returns the status and the JSON answer.
async fn post_signed(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, serde_json::Value) {
    let mut request = http_client()
        .post(format!("http://{addr}{path}"))
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_webhooks_refuse_forged_stale_and_unsigned_requests_and_answer_retries() {
    use worlds_engine::hooks::WebhookSignature;

    let standard = WebhookSignature::standard(WebhookSignature::generate_standard_secret());
    let github = WebhookSignature::github("the secret given to GitHub");
    let mut config = world_config();
    config.webhook_server.signature = Some(standard.clone());
    config
        .webhook_server
        .named_signatures
        .insert("github".into(), github.clone());
    let flow = workflow("signed", |ctx: WorkflowContext, _: ()| async move {
        let default = ctx.create_webhook_with(HookOptions::new().token("signed-default"));
        let pushed = ctx.create_webhook_with(
            HookOptions::new()
                .token("signed-github")
                .signature("github"),
        );
        let unknown =
            ctx.create_webhook_with(HookOptions::new().token("signed-unknown").signature("nope"));
        let first = default.wait().await?;
        let second = pushed.wait().await?;
        drop(unknown);
        Ok::<_, WorkflowError>((first.body, second.body.into_bytes()))
    });
    let world = World::new(config).unwrap();
    world.register(&flow).unwrap();
    world.start().await.unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    while world.query(&run.id).await.unwrap().hooks.len() < 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr();
    let path = "/webhooks/signed-default";
    let body = br#"{"paid":true}"#;

    let forger = WebhookSignature::standard(WebhookSignature::generate_standard_secret());
    let stale = standard.sign("msg_1", body, now_ms() - 600_000).unwrap();
    let mut altered = standard.sign("msg_1", body, now_ms()).unwrap();
    altered.push(("content-type".into(), "application/json".into()));
    for (headers, sent, reason) in [
        (Vec::new(), &body[..], "missing_header"),
        (
            forger.sign("msg_1", body, now_ms()).unwrap(),
            &body[..],
            "signature_mismatch",
        ),
        (stale, &body[..], "timestamp_out_of_tolerance"),
        (altered, &br#"{"paid":false}"#[..], "signature_mismatch"),
    ] {
        let (status, answer) = post_signed(addr, path, &headers, sent).await;
        assert_eq!(
            (status, answer["reason"].as_str()),
            (401, Some(reason)),
            "{answer}"
        );
        assert!(
            !answer["error"].as_str().unwrap().contains("v1,"),
            "a refusal never shows a signature: {answer}"
        );
    }
    let state = world.query(&run.id).await.unwrap();
    assert!(state.hooks.iter().all(|h| h.is_live()), "{:?}", state.hooks);

    // Signed: accepted; the same delivery again (a sender's retry) gets the same answer; a
    // different delivery is a conflict.
    let signed = standard.sign("msg_2", body, now_ms()).unwrap();
    let (status, first) = post_signed(addr, path, &signed, body).await;
    assert_eq!(status, 202, "{first}");
    let (status, again) = post_signed(addr, path, &signed, body).await;
    assert_eq!((status, &again), (202, &first));
    let other = standard.sign("msg_3", body, now_ms()).unwrap();
    let (status, answer) = post_signed(addr, path, &other, body).await;
    assert_eq!(status, 409, "{answer}");

    // A webhook naming a signature the world lacks refuses everything.
    let (status, answer) = post_signed(
        addr,
        "/webhooks/signed-unknown",
        &standard.sign("msg_4", body, now_ms()).unwrap(),
        body,
    )
    .await;
    assert_eq!(
        (status, answer["reason"].as_str()),
        (401, Some("not_configured"))
    );

    // A named signature, over the bytes as sent (not valid UTF-8, so checking the decoded
    // text would fail).
    let raw = b"\xff\xfebinary body";
    let (status, answer) = post_signed(
        addr,
        "/webhooks/signed-github",
        &WebhookSignature::standard(WebhookSignature::generate_standard_secret())
            .sign("d", raw, now_ms())
            .unwrap(),
        raw,
    )
    .await;
    assert_eq!(
        (status, answer["reason"].as_str()),
        (401, Some("missing_header"))
    );
    let (status, answer) = post_signed(
        addr,
        "/webhooks/signed-github",
        &github.sign("delivery-1", raw, now_ms()).unwrap(),
        raw,
    )
    .await;
    assert_eq!(status, 202, "{answer}");

    let handle = world.handle::<(String, Vec<u8>)>(&run.id).await.unwrap();
    let (first, second) = tokio::time::timeout(Duration::from_secs(10), handle.result())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, r#"{"paid":true}"#);
    assert_eq!(second, String::from_utf8_lossy(raw).as_bytes());
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_signature_option_on_a_plain_hook_is_refused() {
    let flow = workflow("plain-signed", |ctx: WorkflowContext, _: ()| async move {
        let hook = ctx.create_hook_with::<String>(HookOptions::new().signature("github"));
        Ok::<_, WorkflowError>(hook.wait().await?)
    });
    let world = World::new(world_config()).unwrap();
    world.register(&flow).unwrap();
    world.start().await.unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), run.result())
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("webhooks only"), "{err}");
    world.shutdown().await.unwrap();
}
