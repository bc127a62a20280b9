//! The API's connections against slow and hostile clients, over real loopback HTTP: a body
//! trickled in is cut off at the whole-body deadline on every route (signed in or not), a body
//! declared over the limit is refused at once, idle connections and slow senders cannot lock
//! real callers out,
//! and an oversized request head gets 431. Every wait is bounded, so a hang fails a test
//! instead of stalling it; the limits are set small so nothing waits long.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use worlds_engine::duration::Dur;
use worlds_engine::prelude::*;
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions, ApiServer};

/// The longest any single wait may take before the test fails.
const BOUND: Duration = Duration::from_secs(5);

struct Served {
    world: Arc<World>,
    server: ApiServer,
    key: String,
}

impl Served {
    fn addr(&self) -> SocketAddr {
        self.server.local_addr()
    }
}

/// A world with `approval` (waits on the hook with the token it is given), served with its
/// `webhook_server` limits set by `limits`.
async fn served(
    limits: impl FnOnce(&mut WorldConfig),
    options: impl FnOnce(&mut ApiOptions),
) -> Served {
    let mut config = WorldConfig::memory();
    limits(&mut config);
    let world = Arc::new(World::new(config).unwrap());
    let approval = workflow(
        "approval",
        |ctx: WorkflowContext, token: String| async move {
            let hook = ctx.create_hook_with::<bool>(HookOptions::new().token(token));
            Ok::<_, WorkflowError>(hook.wait().await?)
        },
    );
    world.register(&approval).unwrap();
    world.start().await.unwrap();
    let keys = Arc::new(KeyRing::new());
    let key = keys
        .create("t", Scope::Write, world.clock().now_ms(), None)
        .key;
    let mut api = ApiOptions::with_keys(keys);
    options(&mut api);
    let server = serve(world.clone(), "127.0.0.1:0", api).await.unwrap();
    Served { world, server, key }
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
}

/// Reads until the server closes the connection (or `BOUND` passes: the test fails).
async fn until_closed(stream: &mut TcpStream) -> Answer {
    let raw = timeout(BOUND, async {
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw).await;
        raw
    })
    .await
    .expect("the server answered and closed in time");
    Answer::parse(&raw)
}

async fn send_raw(addr: SocketAddr, request: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    until_closed(&mut stream).await
}

/// A request's head: `POST path` with `headers` and a declared body of `declared` bytes.
fn post_head(path: &str, headers: &str, declared: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n{headers}content-length: {declared}\r\n\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_trickled_in_is_cut_off_at_the_deadline_on_every_route() {
    let s = served(
        |config| {
            config.webhook_server.body_deadline = Dur::from_millis(300);
            // Never paused long enough for the pause limit: only the deadline ends it.
            config.webhook_server.body_read_timeout = Dur::from_millis(10_000);
        },
        |_| {},
    )
    .await;
    let auth = format!(
        "authorization: Bearer {}\r\ncontent-type: application/json\r\n",
        s.key
    );
    #[allow(unused_mut)]
    let mut routes = vec![("/v1/runs", auth.as_str())];
    // The dashboard's sign-in form too, when it is built.
    #[cfg(feature = "dashboard")]
    routes.push((
        "/login",
        "content-type: application/x-www-form-urlencoded\r\norigin: http://test\r\n",
    ));
    for (path, headers) in routes {
        let mut stream = TcpStream::connect(s.addr()).await.unwrap();
        stream
            .write_all(post_head(path, headers, 1_000).as_bytes())
            .await
            .unwrap();
        let began = Instant::now();
        let (mut reader, mut writer) = stream.into_split();
        // One byte every 50 ms: never a pause, never done within the deadline.
        let trickle = tokio::spawn(async move {
            for _ in 0..1_000 {
                if writer.write_all(b"x").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let raw = timeout(BOUND, async {
            let mut raw = Vec::new();
            let mut chunk = [0; 4096];
            while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
                match reader.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => raw.extend_from_slice(&chunk[..n]),
                }
            }
            raw
        })
        .await
        .unwrap_or_else(|_| panic!("{path}: a trickled body still open after {BOUND:?}"));
        trickle.abort();
        let answer = Answer::parse(&raw);
        assert_eq!(answer.status, 408, "{path}: {answer:?}");
        assert!(answer.head.contains("connection: close"), "{answer:?}");
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "{path}: cut off after {:?}",
            began.elapsed()
        );
    }
    // A body sent at once is fine.
    let body = r#"{"workflow": "approval", "input": "t1"}"#;
    let answer = send_raw(
        s.addr(),
        format!("{}{body}", post_head("/v1/runs", &auth, body.len())).as_bytes(),
    )
    .await;
    assert_eq!(answer.status, 201, "{answer:?}");
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_declared_over_the_limit_is_refused_at_once() {
    let s = served(|_| {}, |api| api.max_body_bytes = Some(4_096)).await;
    let auth = format!("authorization: Bearer {}\r\n", s.key);
    for (path, headers) in [
        ("/v1/runs", auth.as_str()),
        ("/login", "origin: http://test\r\n"),
        ("/v1/hooks/resume", ""),
    ] {
        let began = Instant::now();
        // The head only: the server must not wait for a body it will refuse.
        let answer = send_raw(s.addr(), post_head(path, headers, 100_000_000).as_bytes()).await;
        assert_eq!(answer.status, 413, "{path}: {answer:?}");
        let body: Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(body["code"], "PAYLOAD_TOO_LARGE", "{body}");
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "{path}: answered after {:?}",
            began.elapsed()
        );
    }
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_cannot_lock_out_real_callers() {
    let s = served(
        |config| {
            config.webhook_server.max_connections = 4;
            // The idle connections outlast the test.
            config.webhook_server.header_read_timeout = Dur::from_millis(30_000);
        },
        |_| {},
    )
    .await;
    // A long poll in progress on its own connection.
    let mut long_poll = start_long_poll(&s).await;
    // Far more idle, unauthenticated connections than the cap: none sends anything.
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(s.addr()).await.unwrap());
    }
    // Real callers are served.
    for _ in 0..3 {
        let answer = send_raw(
            s.addr(),
            b"GET /healthz HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        let request = format!(
            "GET /v1/runs HTTP/1.1\r\nhost: test\r\nconnection: close\r\nauthorization: Bearer {}\r\n\r\n",
            s.key
        );
        let answer = send_raw(s.addr(), request.as_bytes()).await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    // The long poll was never closed to make room: it gets its answer.
    long_poll_answered(&s, &mut long_poll).await;
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_senders_cannot_lock_out_real_callers() {
    let s = served(
        |config| {
            config.webhook_server.max_connections = 4;
            // The slow bodies outlast the test: only making room ends them.
            config.webhook_server.body_deadline = Dur::from_millis(30_000);
            config.webhook_server.body_read_timeout = Dur::from_millis(30_000);
        },
        |_| {},
    )
    .await;
    // A long poll being served (its body all sent): never closed to make room.
    let mut long_poll = start_long_poll(&s).await;
    // Far more than the cap of requests whose bodies stall after one byte: starts by a caller
    // with a key, and (when it is built) the dashboard's sign-in form, which needs none.
    let auth = format!(
        "authorization: Bearer {}\r\ncontent-type: application/json\r\n",
        s.key
    );
    // A Vec only for the dashboard's route (without it, clippy would ask for an array).
    #[allow(unused_mut)]
    let mut routes = Vec::from([("/v1/runs", auth.as_str())]);
    #[cfg(feature = "dashboard")]
    routes.push((
        "/login",
        "content-type: application/x-www-form-urlencoded\r\norigin: http://test\r\n",
    ));
    let mut slow = Vec::new();
    for (path, headers) in routes.iter().cycle().take(20) {
        let mut stream = TcpStream::connect(s.addr()).await.unwrap();
        stream
            .write_all(post_head(path, headers, 1_000).as_bytes())
            .await
            .unwrap();
        stream.write_all(b"{").await.unwrap();
        slow.push(stream);
    }
    for _ in 0..3 {
        let answer = send_raw(
            s.addr(),
            b"GET /healthz HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    long_poll_answered(&s, &mut long_poll).await;
    // Shutdown would wait its grace period for the slow bodies still open.
    drop(slow);
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

/// A start of `approval` that waits for its run's result (the run waits on the hook `go`), in
/// progress on its own connection: its body is sent once the server asks for it, so the
/// request is surely being served.
async fn start_long_poll(s: &Served) -> TcpStream {
    let body = r#"{"workflow": "approval", "input": "go"}"#;
    let mut stream = in_flight(s.addr(), "/v1/runs?wait_ms=20000", &s.key, body.len()).await;
    stream.write_all(body.as_bytes()).await.unwrap();
    stream
}

/// Resumes the hook the [`start_long_poll`]'s run waits on, and checks the long poll gets the run's
/// output: it was never closed.
async fn long_poll_answered(s: &Served, long_poll: &mut TcpStream) {
    timeout(BOUND, async {
        while s.world.resume_hook("go", &true).await.is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the run waits on its hook");
    let answer = until_closed(long_poll).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.body.contains(r#""output":true"#), "{answer:?}");
}

/// A connection with a start that waits for its run (`POST path`) in flight: its head sent,
/// asking to continue, and the server's `100 Continue` read (the handler reads the body,
/// which is not sent yet).
async fn in_flight(addr: SocketAddr, path: &str, key: &str, declared: usize) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = post_head(
        path,
        &format!(
            "authorization: Bearer {key}\r\ncontent-type: application/json\r\nexpect: 100-continue\r\n"
        ),
        declared,
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut continued = Vec::new();
    timeout(BOUND, async {
        while !continued.ends_with(b"\r\n\r\n") {
            let mut byte = [0; 1];
            assert_eq!(stream.read(&mut byte).await.unwrap(), 1);
            continued.push(byte[0]);
        }
    })
    .await
    .expect("the server asks for the body");
    assert!(continued.starts_with(b"HTTP/1.1 100"), "{continued:?}");
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_in_flight_is_answered_at_once_when_the_server_shuts_down() {
    // The default grace (30 s) would outlast the test: the poll must not wait for it.
    let s = served(|_| {}, |_| {}).await;
    let body = r#"{"workflow": "approval", "input": "never"}"#;
    let mut long_poll = in_flight(s.addr(), "/v1/runs?wait_ms=60000", &s.key, body.len()).await;
    long_poll.write_all(body.as_bytes()).await.unwrap();
    timeout(BOUND, async {
        loop {
            let runs = s
                .world
                .query_workflows(worlds_engine::WorkflowQueryFilter::new())
                .await
                .unwrap();
            if runs.iter().any(|r| !r.hooks.is_empty()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the run waits on its hook");
    timeout(BOUND, s.server.shutdown())
        .await
        .expect("the shutdown did not wait for the long poll");
    let answer = until_closed(&mut long_poll).await;
    assert_eq!(answer.status, 202, "{answer:?}");
    assert!(answer.body.contains(r#""done":false"#), "{answer:?}");
    s.world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_headers_over_the_limit_are_refused_with_431() {
    let s = served(|_| {}, |_| {}).await;
    for size in [100 * 1024, 500 * 1024] {
        let request = format!(
            "GET /v1/runs HTTP/1.1\r\nhost: test\r\nconnection: close\r\nauthorization: Bearer {}\r\nx-big: {}\r\n\r\n",
            s.key,
            "a".repeat(size)
        );
        let answer = send_raw(s.addr(), request.as_bytes()).await;
        assert_eq!(answer.status, 431, "{size} bytes of header: {answer:?}");
    }
    let request = format!(
        "GET /v1/runs HTTP/1.1\r\nhost: test\r\nconnection: close\r\nauthorization: Bearer {}\r\nx-big: {}\r\n\r\n",
        s.key,
        "a".repeat(16 * 1024)
    );
    let answer = send_raw(s.addr(), request.as_bytes()).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}
