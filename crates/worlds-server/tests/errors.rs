//! One error shape for every refusal of the API, over real loopback HTTP: each route of the
//! OpenAPI document is called with bad bodies, bad queries and bad paths, and every refusal —
//! the handlers' own and axum's (a body of the wrong type or shape, a query or path that does
//! not parse, an unknown route, a method a route does not take, a body over the limit) — is
//! `{"code", "message", "details"}` as JSON, with a 400 naming the field where the request was
//! malformed (never a 422), and no 500. A database error tells its SQLSTATE, not where in the
//! server's source it was raised; an unknown workflow tells an HTTP caller what it can do.

use std::sync::Arc;

use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};
use worlds_engine::prelude::*;
use worlds_server::auth::{ApiKeys, Scope};
use worlds_server::{serve, ApiOptions, ApiServer};

struct Served {
    world: Arc<World>,
    server: ApiServer,
    base: String,
    key: String,
    http: Client,
}

async fn served(world: Arc<World>, max_body_bytes: Option<usize>) -> Served {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let echo = workflow("echo", |_ctx: WorkflowContext, input: Value| async move {
        Ok::<_, WorkflowError>(input)
    });
    world.register(&echo).unwrap();
    world.start().await.unwrap();
    let keys = ApiKeys::open(world.clone()).await.unwrap();
    let key = keys.create("t", Scope::Admin, None).await.unwrap().key;
    let mut options = ApiOptions::with_world_keys(keys);
    options.max_body_bytes = max_body_bytes;
    let server = serve(world.clone(), "127.0.0.1:0", options).await.unwrap();
    Served {
        base: format!("http://{}", server.local_addr()),
        world,
        server,
        key,
        http: Client::new(),
    }
}

/// A body: `Some((content type, bytes))`.
type Body = Option<(Option<&'static str>, Vec<u8>)>;

impl Served {
    /// Calls the API; for a refusal, checks its shape and returns (status, body).
    async fn call(&self, method: Method, path: &str, body: Body) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some((content_type, bytes)) = body {
            if let Some(content_type) = content_type {
                request = request.header("content-type", content_type);
            }
            request = request.body(bytes);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let text = response.text().await.unwrap();
        if !(status.is_client_error() || status.is_server_error()) {
            return (status, serde_json::from_str(&text).unwrap_or(Value::Null));
        }
        let what = format!("{method} {path} → {status}");
        assert!(
            content_type.starts_with("application/json"),
            "{what}: {content_type:?} {text:?}"
        );
        let body: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text:?}"));
        let code = body["code"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: {body}"));
        assert!(
            !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
            "{what}: {body}"
        );
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {body}"
        );
        assert!(body.get("details").is_some(), "{what}: {body}");
        assert_ne!(status, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {body}");
        (status, body)
    }
}

/// `/v1/runs/{id}/events` with each `{param}` replaced by `with`.
fn concrete(path: &str, with: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').unwrap() + open;
        out.push_str(with);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn every_refusal_of_every_route_has_the_one_json_shape() {
    let s = served(Arc::new(World::new(WorldConfig::memory()).unwrap()), None).await;
    let doc = serde_json::to_value(worlds_server::openapi()).unwrap();
    let bad_bodies: Vec<Body> = vec![
        Some((Some("application/json"), b"{".to_vec())),
        Some((Some("application/json"), b"[1, 2]".to_vec())),
        Some((
            Some("application/json"),
            br#"{"no such field": true, "workflow": 5}"#.to_vec(),
        )),
        Some((None, br#"{"workflow": "echo"}"#.to_vec())),
        Some((Some("text/plain"), b"hello".to_vec())),
    ];
    let mut fields: Vec<String> = Vec::new();
    let mut refusals = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let Ok(method) = method.to_uppercase().parse::<Method>() else {
                continue;
            };
            if !["GET", "POST", "PATCH", "DELETE", "PUT"].contains(&method.as_str()) {
                continue;
            }
            // Unknown ids, ids that are no UTF-8, and queries of the wrong types.
            let mut calls: Vec<(String, Body)> = vec![
                (concrete(path, "nope"), None),
                (concrete(path, "%FF%FE"), None),
                (
                    format!(
                        "{}?limit=many&wait_ms=soon&resolve=maybe&order=sideways&status=nope&started_after=yesterday",
                        concrete(path, "nope")
                    ),
                    None,
                ),
            ];
            if operation.get("requestBody").is_some() {
                for body in &bad_bodies {
                    calls.push((concrete(path, "nope"), body.clone()));
                }
                // On the routes without a path parameter the body is read for sure.
                if !path.contains('{') {
                    for body in &bad_bodies {
                        calls.push((path.clone(), body.clone()));
                    }
                }
            }
            for (target, body) in calls {
                let (status, answer) = s.call(method.clone(), &target, body).await;
                assert!(
                    !status.is_server_error(),
                    "{method} {target} → {status} {answer}"
                );
                if status.is_client_error() {
                    refusals += 1;
                    if let Some(field) = answer["details"]["field"].as_str() {
                        fields.push(field.to_owned());
                    }
                }
            }
        }
    }
    assert!(refusals > 100, "{refusals} refusals");
    // axum's own refusals were among them, each naming what was wrong.
    for expected in ["body", "query", "path", "content-type"] {
        assert!(
            fields.iter().any(|f| f == expected),
            "no refusal named {expected}: {fields:?}"
        );
    }
    assert!(
        fields.iter().any(|f| f.starts_with("body.")),
        "a body of the wrong shape names the field: {fields:?}"
    );

    // A body of the wrong type: the field-naming 400, not axum's 422.
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/runs",
            Some((
                Some("application/json"),
                br#"{"workflow": "echo", "options": {"priority": "high"}}"#.to_vec(),
            )),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["details"]["field"], "body.options.priority", "{body}");
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/bulk",
            Some((
                Some("application/json"),
                br#"{"action": "explode"}"#.to_vec(),
            )),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "INVALID_INPUT");
    assert_eq!(body["details"]["field"], "body.action", "{body}");

    // Unknown routes and methods.
    let (status, _) = s.call(Method::GET, "/v1/no/such/route", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = s.call(Method::DELETE, "/v1/runs", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["code"], "METHOD_NOT_ALLOWED");
    assert_eq!(body["details"]["method"], "DELETE", "{body}");

    // An unknown workflow: what an HTTP caller can do, not a call to make in Rust.
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/runs",
            Some((
                Some("application/json"),
                br#"{"workflow": "nope"}"#.to_vec(),
            )),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let message = body["message"].as_str().unwrap();
    assert!(!message.contains("world.register"), "{message}");
    assert!(
        message.contains("'nope'") && message.contains("check the name"),
        "{message}"
    );
    assert_eq!(body["details"]["workflow"], "nope");
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

/// A POST with a chunked body over a plain socket: (status, content type, body).
async fn chunked_post(base: &str, path: &str, key: &str, body: &[u8]) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {key}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )
    .into_bytes();
    for piece in body.chunks(512) {
        request.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        request.extend_from_slice(piece);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    // The server may answer and close before it has read everything.
    let _ = socket.write_all(&request).await;
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, rest) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = match chunked {
        // One chunk holds an error body: its size line, then the JSON.
        true => rest
            .split_once("\r\n")
            .map_or("", |(_, b)| b)
            .split("\r\n")
            .next()
            .unwrap_or("")
            .to_owned(),
        false => rest.to_owned(),
    };
    (status, content_type, body)
}

#[tokio::test]
async fn a_stream_chunk_over_the_limit_gets_the_json_413() {
    let s = served(
        Arc::new(World::new(WorldConfig::memory()).unwrap()),
        Some(1024),
    )
    .await;
    // A run a DevKit runtime drives, created as a 5.x runtime creates it.
    let (status, created) = s
        .call(
            Method::POST,
            "/v1/devkit/events",
            Some((
                Some("application/json"),
                br#"{"runId": null, "event": {"eventType": "run_created", "eventData": {"workflowName": "w", "input": []}}}"#.to_vec(),
            )),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let id = created["run"]["runId"].as_str().unwrap();
    // Sent in chunks, so no Content-Length announces the size: the limit is met reading it.
    let (status, content_type, body) = chunked_post(
        &s.base,
        &format!("/v1/runs/{id}/streams/out"),
        &s.key,
        &vec![b'x'; 4096],
    )
    .await;
    assert_eq!(status, 413, "{body}");
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["code"], "PAYLOAD_TOO_LARGE", "{body}");
    // A chunk within the limit is taken.
    let (status, body) = s
        .call(
            Method::POST,
            &format!("/v1/runs/{id}/streams/out"),
            Some((None, b"small".to_vec())),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body, json!({"index": 0}));
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_database_error_does_not_tell_where_in_the_server_it_was_raised() {
    use sqlx::{Connection, PgConnection};
    use worlds_postgres::testing::{database_up, test_url, TestSchema};
    if !database_up().await {
        return;
    }
    let schema = TestSchema::fresh();
    let mut config = WorldConfig::postgres(test_url());
    config.database.schema = schema.name().to_owned();
    let s = served(Arc::new(worlds_postgres::open(config).await.unwrap()), None).await;
    let mut conn = PgConnection::connect(&test_url()).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP TABLE \"{}\".steps",
        schema.name()
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    // Finding the run of a step reads the dropped table.
    let response = s
        .http
        .get(format!("{}/v1/devkit/events?correlationId=step_x", s.base))
        .bearer_auth(&s.key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "INTERNAL", "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("SQLSTATE 42P01"), "{message}");
    assert!(!message.contains(" at line "), "{message}");
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

/// Built without the dashboard, the router serves no pages: what a browser asks for at `/` or
/// `/login` is the API's JSON "not found", and the API itself still answers.
#[cfg(not(feature = "dashboard"))]
#[tokio::test]
async fn without_the_dashboard_a_page_is_the_json_not_found() {
    let s = served(Arc::new(World::new(WorldConfig::memory()).unwrap()), None).await;
    for path in ["/", "/login", "/assets/app.js"] {
        let response = s
            .http
            .get(format!("{}{path}", s.base))
            .header("accept", "text/html")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], "NOT_FOUND", "{path}: {body}");
    }
    let (status, _) = s.call(Method::GET, "/v1/runs", None).await;
    assert_eq!(status, StatusCode::OK);
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}
