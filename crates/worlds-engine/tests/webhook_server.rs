//! The webhook endpoint against hostile or careless clients, over real loopback HTTP: stalled
//! headers and bodies, a connection cap, shutdown with half-sent requests, the payload limit,
//! refusals after shutdown, one JSON error shape, the methods a webhook takes, and handles that
//! outlive their world. Every wait is bounded, so a hang fails a test instead of stalling it.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use worlds_engine::duration::Dur;
use worlds_engine::prelude::*;
use worlds_engine::{ErrorKind, HookStatus, WebhookRequest};

/// The longest any single wait in these tests may take before the test fails.
const BOUND: Duration = Duration::from_secs(5);

fn config() -> WorldConfig {
    let mut config = WorldConfig::memory();
    config.failure_strategy = FailureStrategy::Ignore;
    config.webhook_base_url = "http://localhost:3000/webhooks".into();
    config
}

/// Server timeouts short enough for a test to watch them fire.
fn short_timeouts(config: &mut WorldConfig) {
    let server = &mut config.webhook_server;
    server.header_read_timeout = Dur::from_millis(300);
    server.body_read_timeout = Dur::from_millis(300);
    server.body_deadline = Dur::from_millis(600);
    config.shutdown_grace = Dur::from_millis(300);
}

/// A workflow that creates a webhook with the token it is given and returns the request.
fn hooked() -> Workflow<String, WebhookRequest> {
    workflow("hooked", |ctx: WorkflowContext, token: String| async move {
        let hook = ctx.create_webhook_with(HookOptions::new().token(token));
        Ok::<_, WorkflowError>(hook.wait().await?)
    })
}

/// A started world with `hooked` registered.
async fn world_with(config: WorldConfig) -> World {
    let world = World::new(config).unwrap();
    world.register(hooked()).unwrap();
    world.start().await.unwrap();
    world
}

/// Starts a run of `hooked` and waits until its webhook is recorded as waiting.
async fn waiting_webhook(world: &World, token: &str) -> WorkflowHandle<WebhookRequest> {
    let run = world
        .execute(&hooked(), token.to_owned(), WorkflowOptions::default())
        .await
        .unwrap();
    wait_for_hook(world, &run.id, HookStatus::Waiting).await;
    run
}

async fn wait_for_hook(world: &World, run_id: &str, status: HookStatus) {
    timeout(BOUND, async {
        loop {
            let state = world.query(run_id).await.unwrap();
            if state.hooks.first().is_some_and(|h| h.status == status) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the webhook of {run_id} never became {status:?}"));
}

/// A response read off a raw connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn parse(raw: &[u8]) -> Answer {
        let text = String::from_utf8_lossy(raw);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
        Answer {
            status,
            head: head.to_ascii_lowercase(),
            body: body.to_owned(),
        }
    }

    /// The `error` of a JSON error body; fails the test for any other body.
    fn error(&self) -> String {
        let value: serde_json::Value = serde_json::from_str(&self.body).unwrap_or_else(|e| {
            panic!("a {} answered {:?}, not JSON: {e}", self.status, self.body)
        });
        value["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no \"error\" in {value}"))
            .to_owned()
    }
}

/// Sends one request (`Connection: close`) and reads the whole answer, within `BOUND`.
async fn send(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Answer {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    send_raw(addr, &request).await
}

async fn send_raw(addr: SocketAddr, request: &[u8]) -> Answer {
    timeout(BOUND, async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut raw = Vec::new();
        // The server may close before reading everything it was sent (a 413): what it
        // answered is still readable.
        let _ = stream.read_to_end(&mut raw).await;
        Answer::parse(&raw)
    })
    .await
    .expect("no answer in time")
}

/// Reads until the server closes the connection, within `BOUND`; returns what it sent.
async fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
    timeout(BOUND, async {
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw).await;
        raw
    })
    .await
    .expect("the server kept the connection open")
}

/// A connection with a request in progress: a POST's headers sent, asking to continue, and the
/// server's `100 Continue` read (its handler is reading the body, which is not sent).
async fn in_progress(addr: SocketAddr, path: &str, declared: usize) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: test\r\nexpect: 100-continue\r\ncontent-length: {declared}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    timeout(BOUND, async {
        while !seen.ends_with(b"\r\n\r\n") {
            let mut byte = [0; 1];
            assert_eq!(stream.read(&mut byte).await.unwrap(), 1, "closed: {seen:?}");
            seen.push(byte[0]);
        }
    })
    .await
    .expect("the server asks for the body");
    assert!(
        seen.starts_with(b"HTTP/1.1 100"),
        "{:?}",
        String::from_utf8_lossy(&seen)
    );
    stream
}

/// Headers for a POST whose declared body is `declared` bytes long.
fn post_head(path: &str, declared: usize) -> Vec<u8> {
    format!("POST {path} HTTP/1.1\r\nhost: test\r\ncontent-length: {declared}\r\n\r\n").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stalls_in_its_headers_is_disconnected() {
    let mut config = config();
    short_timeouts(&mut config);
    let world = world_with(config).await;
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let mut stream = TcpStream::connect(server.local_addr()).await.unwrap();
    stream
        .write_all(b"POST /webhooks/abc HTTP/1.1\r\nhost: test\r\n")
        .await
        .unwrap();
    until_closed(&mut stream).await;
    // So is one that sends nothing, and a keep-alive connection left idle after a request.
    let mut silent = TcpStream::connect(server.local_addr()).await.unwrap();
    until_closed(&mut silent).await;
    let mut idle = TcpStream::connect(server.local_addr()).await.unwrap();
    idle.write_all(b"GET /elsewhere HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    let answer = Answer::parse(&until_closed(&mut idle).await);
    assert_eq!(answer.status, 404, "{answer:?}");
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_uploads_are_cut_off_at_the_body_deadline() {
    let mut config = config();
    short_timeouts(&mut config);
    let world = world_with(config).await;
    waiting_webhook(&world, "upload").await;
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let mut stalled = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(server.local_addr()).await.unwrap();
        stream
            .write_all(&post_head("/webhooks/upload", 200_000))
            .await
            .unwrap();
        stream.write_all(&[b'x'; 199_000]).await.unwrap();
        stalled.push(stream);
    }
    for stream in &mut stalled {
        let answer = until_closed(stream).await;
        if !answer.is_empty() {
            let answer = Answer::parse(&answer);
            assert_eq!(answer.status, 408, "{answer:?}");
            assert!(answer.error().contains("body"), "{answer:?}");
        }
    }
    // None of them resumed the webhook; a complete request still does.
    let answer = send(server.local_addr(), "POST", "/webhooks/upload", b"done").await;
    assert_eq!(answer.status, 202, "{answer:?}");
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_beyond_the_cap_closes_the_upload_arriving_the_longest() {
    let mut config = config();
    short_timeouts(&mut config);
    // The uploads in progress must outlast the test: only making room ends one.
    config.webhook_server.body_read_timeout = Dur::from_millis(10_000);
    config.webhook_server.body_deadline = Dur::from_millis(10_000);
    config.webhook_server.max_connections = 2;
    let world = world_with(config).await;
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr();
    // Two connections in the middle of sending a body fill the cap of two.
    let mut first = in_progress(addr, "/webhooks/slow", 4).await;
    first.write_all(b"1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut second = in_progress(addr, "/webhooks/slow", 4).await;
    second.write_all(b"2").await.unwrap();
    // A third is served at once: the upload arriving the longest is closed to make room.
    let answer = timeout(BOUND, send(addr, "POST", "/webhooks/nope", b""))
        .await
        .expect("a complete request is served while slow uploads fill the cap");
    assert_eq!(answer.status, 404, "{answer:?}");
    assert!(
        until_closed(&mut first).await.is_empty(),
        "the oldest upload was closed"
    );
    // The younger one was left alone: it completes and gets its answer.
    second.write_all(b"222").await.unwrap();
    let answer = Answer::parse(
        &timeout(BOUND, async {
            let mut raw = vec![0; 4096];
            let n = second.read(&mut raw).await.unwrap();
            raw.truncate(n);
            raw
        })
        .await
        .expect("the younger upload got its answer"),
    );
    assert_eq!(answer.status, 404, "{answer:?}");
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_cannot_lock_out_a_real_request() {
    let mut config = config();
    short_timeouts(&mut config);
    // Neither the idle connections nor the upload in progress time out during the test.
    config.webhook_server.header_read_timeout = Dur::from_millis(10_000);
    config.webhook_server.body_read_timeout = Dur::from_millis(10_000);
    config.webhook_server.body_deadline = Dur::from_millis(10_000);
    config.webhook_server.max_connections = 4;
    let world = world_with(config).await;
    let run = waiting_webhook(&world, "kept").await;
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr();
    // A request in progress: its headers and half its body sent.
    let mut upload = in_progress(addr, "/webhooks/kept", 4).await;
    upload.write_all(b"ok").await.unwrap();
    // Then far more idle connections than the cap: none of them sends anything.
    let mut idle = Vec::new();
    for _ in 0..12 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    // A real request is still served, over and over.
    for _ in 0..3 {
        let answer = send(addr, "POST", "/webhooks/nope", b"").await;
        assert_eq!(answer.status, 404, "{answer:?}");
    }
    // The request in progress was not closed to make room: it completes.
    upload.write_all(b"!!").await.unwrap();
    let answer = Answer::parse(
        &timeout(BOUND, async {
            let mut raw = vec![0; 4096];
            let n = upload.read(&mut raw).await.unwrap();
            raw.truncate(n);
            raw
        })
        .await
        .expect("the upload in progress got its answer"),
    );
    assert_eq!(answer.status, 202, "{answer:?}");
    assert_eq!(run.result().await.unwrap().body, "ok!!");
    // Most of the idle connections were closed to make room.
    let mut closed = 0;
    for stream in &mut idle {
        let mut byte = [0; 1];
        if let Ok(Ok(0)) = timeout(Duration::from_millis(50), stream.read(&mut byte)).await {
            closed += 1;
        }
    }
    assert!(closed >= 8, "{closed} of 12 idle connections closed");
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_headers_over_the_limit_are_refused_with_431() {
    let mut config = config();
    config.webhook_server.max_header_bytes = 32 * 1024;
    let world = world_with(config).await;
    let run = waiting_webhook(&world, "heads").await;
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    for size in [40 * 1024, 200 * 1024, 500 * 1024] {
        let request = format!(
            "POST /webhooks/heads HTTP/1.1\r\nhost: test\r\nx-big: {}\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi",
            "a".repeat(size)
        );
        let answer = send_raw(server.local_addr(), request.as_bytes()).await;
        assert_eq!(answer.status, 431, "{size} bytes of header: {answer:?}");
    }
    let state = world.query(&run.id).await.unwrap();
    assert_eq!(
        state.hooks[0].status,
        HookStatus::Waiting,
        "nothing delivered"
    );
    // Headers within the limit are fine.
    let request = format!(
        "POST /webhooks/heads HTTP/1.1\r\nhost: test\r\nx-big: {}\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi",
        "a".repeat(16 * 1024)
    );
    let answer = send_raw(server.local_addr(), request.as_bytes()).await;
    assert_eq!(answer.status, 202, "{answer:?}");
    // A limit below what hyper can work with is refused when the world is made.
    let mut config = self::config();
    config.webhook_server.max_header_bytes = 4096;
    let err = World::new(config).unwrap_err();
    assert!(err.to_string().contains("max_header_bytes"), "{err}");
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_within_the_grace_period_despite_a_half_sent_request() {
    let mut config = config();
    short_timeouts(&mut config);
    // The grace period, not the body deadline, is what ends the half-sent request.
    config.webhook_server.body_read_timeout = Dur::from_millis(10_000);
    config.webhook_server.body_deadline = Dur::from_millis(10_000);
    let world = world_with(config).await;
    waiting_webhook(&world, "half").await;
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let mut stream = TcpStream::connect(server.local_addr()).await.unwrap();
    stream
        .write_all(&post_head("/webhooks/half", 1000))
        .await
        .unwrap();
    stream.write_all(&[b'x'; 500]).await.unwrap();
    // Let the server start on the request before shutting down.
    let idle = send(server.local_addr(), "GET", "/elsewhere", b"").await;
    assert_eq!(idle.status, 404);
    timeout(BOUND, server.shutdown())
        .await
        .expect("server shutdown waited on a half-sent request past its grace period");
    until_closed(&mut stream).await;
    timeout(BOUND, world.shutdown()).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_size_limit_is_max_payload_bytes() {
    let mut config = config();
    config.max_payload_bytes = 3 * 1024 * 1024;
    let world = world_with(config).await;
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr();

    // Over the framework's 2 MiB default, under the configured limit.
    let run = waiting_webhook(&world, "big").await;
    let body = vec![b'a'; 2 * 1024 * 1024 + 1];
    let answer = send(addr, "POST", "/webhooks/big", &body).await;
    assert_eq!(answer.status, 202, "{answer:?}");
    let request = timeout(BOUND, run.result()).await.unwrap().unwrap();
    assert_eq!(request.body.len(), body.len());

    // Over the configured limit: refused from the declared length, before any body is read.
    let run = waiting_webhook(&world, "too-big").await;
    let head = post_head("/webhooks/too-big", 3 * 1024 * 1024 + 1);
    let answer = send_raw(addr, &head).await;
    assert_eq!(answer.status, 413, "{answer:?}");
    assert!(
        answer.error().contains("3145728"),
        "names the limit: {answer:?}"
    );
    wait_for_hook(&world, &run.id, HookStatus::Waiting).await;
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_refused_before_they_are_converted() {
    let mut config = config();
    config.max_payload_bytes = 100_000;
    let world = world_with(config).await;
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr();
    let run = waiting_webhook(&world, "small").await;

    let answer = send(addr, "POST", "/webhooks/small", &[b'a'; 100_001]).await;
    assert_eq!(answer.status, 413, "{answer:?}");
    answer.error();
    // Control bytes under the byte limit that would grow sixfold as JSON.
    let answer = send(addr, "POST", "/webhooks/small", &[1u8; 60_000]).await;
    assert_eq!(answer.status, 413, "{answer:?}");
    assert!(answer.error().contains("100000"), "{answer:?}");
    wait_for_hook(&world, &run.id, HookStatus::Waiting).await;
    let answer = send(addr, "POST", "/webhooks/small", &[b'a'; 50_000]).await;
    assert_eq!(answer.status, 202, "{answer:?}");
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_world_that_shut_down_refuses_webhooks() {
    let world = world_with(config()).await;
    let run = waiting_webhook(&world, "late").await;
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    world.shutdown().await.unwrap();

    let answer = send(server.local_addr(), "POST", "/webhooks/late", b"{}").await;
    assert_eq!(answer.status, 503, "{answer:?}");
    assert!(answer.error().contains("shut"), "{answer:?}");
    let err = world
        .resume_webhook("late", &WebhookRequest::new("POST", "{}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let state = world.query(&run.id).await.unwrap();
    assert_eq!(state.hooks[0].status, HookStatus::Waiting);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_one_json_shape() {
    let world = world_with(config()).await;
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr();
    for (method, path, status) in [
        ("GET", "/elsewhere", 404),
        ("POST", "/webhooks", 404),
        ("POST", "/webhooks/a/b", 404),
        ("POST", "/webhooks/unknown", 404),
        ("POST", "/webhooks/%FF%FE", 400),
    ] {
        let answer = send(addr, method, path, b"").await;
        assert_eq!(answer.status, status, "{method} {path}: {answer:?}");
        assert!(
            answer.head.contains("content-type: application/json"),
            "{method} {path}: {answer:?}"
        );
        assert!(!answer.error().is_empty(), "{method} {path}");
    }
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_post_consumes_a_webhook_by_default() {
    let world = world_with(config()).await;
    let run = waiting_webhook(&world, "post-only").await;
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr();
    for method in ["GET", "HEAD", "PUT", "DELETE", "OPTIONS"] {
        let answer = send(addr, method, "/webhooks/post-only", b"").await;
        assert_eq!(answer.status, 405, "{method}: {answer:?}");
        assert!(answer.head.contains("allow: post"), "{method}: {answer:?}");
        if method != "HEAD" {
            assert!(answer.error().contains("POST"), "{method}: {answer:?}");
        }
    }
    wait_for_hook(&world, &run.id, HookStatus::Waiting).await;
    let answer = send(addr, "POST", "/webhooks/post-only", b"paid").await;
    assert_eq!(answer.status, 202, "{answer:?}");
    let request = timeout(BOUND, run.result()).await.unwrap().unwrap();
    assert_eq!(
        (request.method.as_str(), request.body.as_str()),
        ("POST", "paid")
    );
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_takes_the_methods_it_was_created_with() {
    let flow = workflow("put-or-patch", |ctx: WorkflowContext, _: ()| async move {
        let hook =
            ctx.create_webhook_with(HookOptions::new().token("edit").methods(["put", "PATCH"]));
        Ok::<_, WorkflowError>(hook.wait().await?.method)
    });
    let world = world_with(config()).await;
    world.register(&flow).unwrap();
    let run = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    wait_for_hook(&world, &run.id, HookStatus::Waiting).await;
    let state = world.query(&run.id).await.unwrap();
    assert_eq!(state.hooks[0].allowed_methods(), ["PUT", "PATCH"]);
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let answer = send(server.local_addr(), "POST", "/webhooks/edit", b"").await;
    assert_eq!(answer.status, 405, "{answer:?}");
    assert!(answer.head.contains("allow: put, patch"), "{answer:?}");
    let err = world
        .resume_webhook("edit", &WebhookRequest::new("GET", ""))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MethodNotAllowed, "{err}");
    assert_eq!(err.http_status(), 405);
    let answer = send(server.local_addr(), "PATCH", "/webhooks/edit", b"").await;
    assert_eq!(answer.status, 202, "{answer:?}");
    assert_eq!(
        timeout(BOUND, run.result()).await.unwrap().unwrap(),
        "PATCH"
    );

    // Methods are for webhooks, and must be HTTP methods.
    let bad = workflow("bad-methods", |ctx: WorkflowContext, case: u8| async move {
        match case {
            0 => {
                let hook = ctx.create_hook_with::<String>(HookOptions::new().methods(["PUT"]));
                Ok::<_, WorkflowError>(hook.wait().await?)
            }
            1 => Ok(ctx
                .create_webhook_with(HookOptions::new().methods(["NOT A METHOD"]))
                .wait()
                .await?
                .body),
            _ => Ok(ctx
                .create_webhook_with(HookOptions::new().methods(Vec::<String>::new()))
                .wait()
                .await?
                .body),
        }
    });
    world.register(&bad).unwrap();
    for (case, says) in [
        (0, "webhooks only"),
        (1, "not an HTTP method"),
        (2, "at least one"),
    ] {
        let run = world
            .execute(&bad, case, WorkflowOptions::default())
            .await
            .unwrap();
        let err = timeout(BOUND, run.result()).await.unwrap().unwrap_err();
        assert!(err.to_string().contains(says), "case {case}: {err}");
    }
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_only_tokens_are_refused() {
    let world = world_with(config()).await;
    for token in ["..", "."] {
        let run = world
            .execute(&hooked(), token.to_owned(), WorkflowOptions::default())
            .await
            .unwrap();
        let err = timeout(BOUND, run.result())
            .await
            .expect("a dot-only token was accepted")
            .unwrap_err();
        assert!(err.to_string().contains("token"), "{err}");
    }
    world.shutdown().await.unwrap();
}

fn durable(dir: &Path, persistence: Persistence) -> WorldConfig {
    let mut config = config();
    config.persistence = persistence;
    config.persistence_path = dir.to_path_buf();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_kept_after_shutdown_does_not_hold_the_hybrid_directory() {
    let dir = tempfile::tempdir().unwrap();
    let config = durable(dir.path(), Persistence::Hybrid);
    let world = world_with(config.clone()).await;
    let kept = waiting_webhook(&world, "kept").await;
    world.shutdown().await.unwrap();
    drop(world);

    let world = World::new(config).expect("the directory is free once its world is gone");
    world.register(hooked()).unwrap();
    world.start().await.unwrap();
    let err = timeout(BOUND, kept.result()).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    world
        .resume_webhook("kept", &WebhookRequest::new("POST", "again"))
        .await
        .unwrap();
    let run = world.handle::<WebhookRequest>(&kept.id).await.unwrap();
    let request = timeout(BOUND, run.result()).await.unwrap().unwrap();
    assert_eq!(request.body, "again");
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_outlives_its_world_hands_the_run_to_the_next_world() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = durable(dir.path(), Persistence::File);
    config.shared_poll_interval = Dur::from_millis(50);
    let old_world = world_with(config.clone()).await;
    let kept = waiting_webhook(&old_world, "handover").await;
    let old_server = old_world.serve_webhooks("127.0.0.1:0").await.unwrap();
    let old_addr = old_server.local_addr();
    old_world.shutdown().await.unwrap();

    // The new world listens before the old one is gone, so the two addresses differ.
    let world = world_with(config).await;
    let server = world.serve_webhooks("127.0.0.1:0").await.unwrap();
    drop(old_world);
    // The old endpoint does not take the request for a world that is gone (it refuses, or
    // it has stopped listening).
    if let Ok(Ok(mut stream)) = timeout(BOUND, TcpStream::connect(old_addr)).await {
        let request = b"POST /webhooks/handover HTTP/1.1\r\nhost: test\r\nconnection: close\r\ncontent-length: 3\r\n\r\nold";
        if stream.write_all(request).await.is_ok() {
            let raw = until_closed(&mut stream).await;
            if !raw.is_empty() {
                let answer = Answer::parse(&raw);
                assert_eq!(answer.status, 503, "{answer:?}");
                answer.error();
            }
        }
    }
    let answer = send(server.local_addr(), "POST", "/webhooks/handover", b"new").await;
    assert_eq!(answer.status, 202, "{answer:?}");
    let run = world.handle::<WebhookRequest>(&kept.id).await.unwrap();
    let request = timeout(BOUND, run.result()).await.unwrap().unwrap();
    assert_eq!(request.body, "new");
    drop(old_server);
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_in_use_error_does_not_name_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let world = world_with(config()).await;
    let err = timeout(BOUND, world.serve_webhooks(addr))
        .await
        .unwrap()
        .map(|_| ())
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains(&addr.to_string()), "{message}");
    world.shutdown().await.unwrap();
}
