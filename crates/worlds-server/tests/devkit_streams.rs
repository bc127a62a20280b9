//! The stream routes the Workflow DevKit's World uses, over real loopback HTTP: several chunks
//! written in one request, pages of chunks as `{"$bytes"}` with whether the stream is done,
//! where a stream stands, and live reading from a negative start. Bytes come back exactly as
//! written, whichever route wrote them; hostile input is refused with a 400 that says why, and
//! writes nothing.

use std::sync::Arc;

use base64::Engine as _;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use worlds_engine::prelude::*;
use worlds_engine::ResolveData;
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions, ApiServer};

struct Served {
    world: Arc<World>,
    _server: ApiServer,
    http: Client,
    base: String,
    write: String,
    read: String,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(value: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(
            value["$bytes"]
                .as_str()
                .unwrap_or_else(|| panic!("{value}")),
        )
        .unwrap()
}

impl Served {
    async fn new() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let world = Arc::new(World::new(WorldConfig::memory()).unwrap());
        // Runs that stay open (to write to) and runs that finish at once.
        let open = workflow("open", |ctx: WorkflowContext, _: Value| async move {
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(())
        });
        let quick = workflow("quick", |_ctx: WorkflowContext, _: Value| async move {
            Ok::<_, WorkflowError>(())
        });
        world.register(&open).unwrap();
        world.register(&quick).unwrap();
        world.start().await.unwrap();
        let now = world.clock().now_ms();
        let keys = Arc::new(KeyRing::new());
        let write = keys.create("app", Scope::Write, now, None).key;
        let read = keys.create("viewer", Scope::Read, now, None).key;
        let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
            .await
            .unwrap();
        Served {
            base: format!("http://{}", server.local_addr()),
            world,
            _server: server,
            http: Client::new(),
            write,
            read,
        }
    }

    async fn run(&self, name: &str) -> String {
        let handle = self
            .world
            .execute_by_name::<Value, Value>(name, json!(null), WorkflowOptions::default())
            .await
            .unwrap();
        handle.id.clone()
    }

    async fn send(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, body)
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(&self.write, reqwest::Method::POST, path, Some(body))
            .await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(&self.read, reqwest::Method::GET, path, None)
            .await
    }

    /// Appends `bytes` as one chunk through the single-chunk route (the body as it is).
    async fn write_raw(&self, path: &str, bytes: Vec<u8>) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.write)
            .header("content-type", "application/octet-stream")
            .body(bytes)
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn tail(&self, path: &str) -> Value {
        let (status, info) = self.get(&format!("{path}/info")).await;
        assert_eq!(status, StatusCode::OK, "{info}");
        info
    }
}

/// The `chunk` events' indices and bytes, and whether `end` came, of a live read of a stream
/// that is done.
async fn live(s: &Served, path: &str) -> (Vec<(u64, Vec<u8>)>, bool) {
    let response = s
        .http
        .get(format!("{}{path}", s.base))
        .bearer_auth(&s.read)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    let mut chunks = Vec::new();
    let mut ended = false;
    let mut event = "";
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("event:") {
            event = name.trim();
        } else if let Some(data) = line.strip_prefix("data:") {
            match event {
                "chunk" => {
                    let chunk: Value = serde_json::from_str(data.trim()).unwrap();
                    let bytes = match (chunk["text"].as_str(), chunk["base64"].as_str()) {
                        (Some(text), _) => text.as_bytes().to_vec(),
                        (None, Some(b)) => {
                            base64::engine::general_purpose::STANDARD.decode(b).unwrap()
                        }
                        _ => Vec::new(),
                    };
                    chunks.push((chunk["index"].as_u64().unwrap(), bytes));
                }
                "end" => ended = true,
                other => panic!("unexpected event {other}: {data}"),
            }
        }
    }
    (chunks, ended)
}

#[tokio::test]
async fn chunks_written_together_or_alone_read_back_byte_for_byte_with_where_the_stream_stands() {
    let s = Served::new().await;
    let id = s.run("open").await;
    let path = format!("/v1/runs/{id}/streams/strm_x_user");

    let binary = vec![0u8, 255, 0x80, 0xC3, 0x28, 0];
    let (status, written) = s
        .post(
            &format!("{path}/chunks"),
            json!({"chunks": [{"$bytes": b64(&binary)}, "text \u{fc} \u{0}", {"$bytes": ""}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{written}");
    assert_eq!(written, json!({"indices": [0, 1, 2]}));
    let (status, single) = s.write_raw(&path, vec![0xFF, 0xFE, b'a']).await;
    assert_eq!(status, StatusCode::CREATED, "{single}");
    assert_eq!(single, json!({"index": 3}));
    let (status, more) = s
        .post(&format!("{path}/chunks"), json!({"chunks": ["last"]}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{more}");
    assert_eq!(more, json!({"indices": [4]}));

    let expected: Vec<Vec<u8>> = vec![
        binary.clone(),
        "text \u{fc} \u{0}".as_bytes().to_vec(),
        Vec::new(),
        vec![0xFF, 0xFE, b'a'],
        b"last".to_vec(),
    ];
    assert_eq!(s.tail(&path).await, json!({"tailIndex": 4, "done": false}));

    // Paged in the DevKit's shape: every chunk as `$bytes`, whichever route wrote it.
    let mut read = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let url = match &cursor {
            Some(c) => format!("{path}/chunks?limit=2&cursor={c}"),
            None => format!("{path}/chunks?limit=2"),
        };
        let (status, page) = s.get(&url).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        pages += 1;
        for chunk in page["data"].as_array().unwrap() {
            read.push((chunk["index"].as_u64().unwrap(), unb64(&chunk["data"])));
        }
        assert_eq!(page["done"], json!(false), "the stream is open: {page}");
        if page["hasMore"] == json!(false) {
            assert_eq!(page["cursor"], Value::Null, "{page}");
            break;
        }
        cursor = Some(page["cursor"].as_str().unwrap().to_owned());
    }
    assert_eq!(pages, 3);
    let want: Vec<(u64, Vec<u8>)> = expected
        .iter()
        .cloned()
        .zip(0u64..)
        .map(|(b, i)| (i, b))
        .collect();
    assert_eq!(read, want);

    // The existing page route and the live route give the same bytes.
    let (status, page) = s.get(&format!("{path}?limit=1000")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let older: Vec<Vec<u8>> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| match (c["text"].as_str(), c["base64"].as_str()) {
            (Some(t), _) => t.as_bytes().to_vec(),
            (None, Some(b)) => base64::engine::general_purpose::STANDARD.decode(b).unwrap(),
            _ => panic!("{c}"),
        })
        .collect();
    assert_eq!(older, expected);

    // Closed: the page that reaches the end says so; one that does not, does not.
    let (status, _) = s.post(&format!("{path}/close"), json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, first) = s.get(&format!("{path}/chunks?limit=2")).await;
    assert_eq!(
        (first["hasMore"].clone(), first["done"].clone()),
        (json!(true), json!(false))
    );
    let (_, last) = s.get(&format!("{path}/chunks?cursor=2")).await;
    assert_eq!(last["data"].as_array().unwrap().len(), 3, "{last}");
    assert_eq!(
        (last["hasMore"].clone(), last["done"].clone()),
        (json!(false), json!(true))
    );
    let (_, past) = s.get(&format!("{path}/chunks?cursor=99")).await;
    assert_eq!(
        past,
        json!({"data": [], "cursor": null, "hasMore": false, "done": true})
    );
    assert_eq!(s.tail(&path).await, json!({"tailIndex": 4, "done": true}));
    let (chunks, ended) = live(&s, &format!("{path}/live")).await;
    assert!(ended);
    assert_eq!(chunks, want);

    // A closed stream takes no more chunks, and a refused write writes none.
    let (status, body) = s
        .post(&format!("{path}/chunks"), json!({"chunks": ["late"]}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(s.tail(&path).await["tailIndex"], json!(4));
}

#[tokio::test]
async fn a_stream_never_written_reads_empty_and_a_run_that_does_not_exist_is_not_found() {
    let s = Served::new().await;
    let id = s.run("open").await;
    let path = format!("/v1/runs/{id}/streams/never");
    assert_eq!(s.tail(&path).await, json!({"tailIndex": -1, "done": false}));
    let (status, page) = s.get(&format!("{path}/chunks")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(
        page,
        json!({"data": [], "cursor": null, "hasMore": false, "done": false})
    );

    // Once the run has finished, its streams are done, written or not.
    let quick = s.run("quick").await;
    for _ in 0..500 {
        let state = s.world.get_run(&quick, ResolveData::None).await.unwrap();
        if state.status.is_terminal() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let finished = format!("/v1/runs/{quick}/streams/never");
    assert_eq!(
        s.tail(&finished).await,
        json!({"tailIndex": -1, "done": true})
    );
    let (_, page) = s.get(&format!("{finished}/chunks")).await;
    assert_eq!(page["done"], json!(true), "{page}");
    let (status, body) = s
        .post(&format!("{finished}/chunks"), json!({"chunks": ["x"]}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");

    for (status, body) in [
        s.get("/v1/runs/wrun_none/streams/x/info").await,
        s.get("/v1/runs/wrun_none/streams/x/chunks").await,
        s.post(
            "/v1/runs/wrun_none/streams/x/chunks",
            json!({"chunks": ["a"]}),
        )
        .await,
        s.post("/v1/runs/wrun_none/streams/x/chunks", json!({"chunks": []}))
            .await,
    ] {
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    }
}

#[tokio::test]
async fn hostile_input_is_refused_with_a_reason_and_writes_nothing() {
    let s = Served::new().await;
    let id = s.run("open").await;
    let path = format!("/v1/runs/{id}/streams/s");
    let (status, _) = s
        .post(&format!("{path}/chunks"), json!({"chunks": ["a", "b"]}))
        .await;
    assert_eq!(status, StatusCode::CREATED);

    // Bad chunks: nothing of the request is stored, and the answer names the chunk.
    for (chunks, says) in [
        (json!(["ok", {"$bytes": "not base64!"}]), "chunks[1]"),
        (json!([{"$bytes": "YQ"}]), "base64"),
        (json!(["ok", 5]), "chunks[1]"),
        (json!([null]), "chunks[0]"),
        (json!([{"$bytes": 5}]), "chunks[0]"),
        (json!([{"$bytes": "YQ==", "extra": 1}]), "chunks[0]"),
        (json!([["a"]]), "chunks[0]"),
    ] {
        let (status, body) = s
            .post(&format!("{path}/chunks"), json!({ "chunks": chunks }))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{chunks}: {body}");
        assert!(body.to_string().contains(says), "{chunks}: {body}");
    }
    for body in [
        json!({}),
        json!({"chunks": "a"}),
        json!({"chunks": [], "more": 1}),
        json!([]),
    ] {
        let (status, answer) = s.post(&format!("{path}/chunks"), body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
    }
    let many: Vec<Value> = (0..10_001).map(|_| json!("")).collect();
    let (status, body) = s
        .post(&format!("{path}/chunks"), json!({ "chunks": many }))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("at most 10000"),
        "{body}"
    );
    assert_eq!(
        s.tail(&path).await["tailIndex"],
        json!(1),
        "nothing written"
    );

    // No chunks: nothing written, no error.
    let (status, body) = s
        .post(&format!("{path}/chunks"), json!({"chunks": []}))
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::CREATED, json!({"indices": []}))
    );

    // Names holding NUL or other control characters, on every route.
    for name in ["a%00b", "%0A", "%7F"] {
        let bad = format!("/v1/runs/{id}/streams/{name}");
        for (status, body) in [
            s.get(&format!("{bad}/info")).await,
            s.get(&format!("{bad}/chunks")).await,
            s.post(&format!("{bad}/chunks"), json!({"chunks": ["x"]}))
                .await,
            s.post(&format!("{bad}/chunks"), json!({"chunks": []}))
                .await,
        ] {
            assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
            assert!(
                body["message"].as_str().unwrap().contains("stream name"),
                "{body}"
            );
        }
    }
    let long = "n".repeat(201);
    let (status, _) = s.get(&format!("/v1/runs/{id}/streams/{long}/info")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Limits: a sign or words are refused; a huge one is the most a page holds.
    for limit in ["-1", "abc", "1.5", "", "%2B3", "%00"] {
        let (status, body) = s.get(&format!("{path}/chunks?limit={limit}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "limit={limit}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains("limit"),
            "{body}"
        );
    }
    let big: Vec<Value> = (0..1_100).map(|i| json!(i.to_string())).collect();
    let (status, _) = s
        .post(&format!("{path}/chunks"), json!({ "chunks": big }))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    for limit in ["5000", "99999999999999999999999999"] {
        let (status, page) = s.get(&format!("{path}/chunks?limit={limit}")).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        assert_eq!(page["data"].as_array().unwrap().len(), 1_000);
        assert_eq!(page["hasMore"], json!(true));
        assert_eq!(page["cursor"], json!("1000"));
    }
    let (_, page) = s.get(&format!("{path}/chunks")).await;
    assert_eq!(
        page["data"].as_array().unwrap().len(),
        100,
        "100 by default"
    );
    let (_, page) = s.get(&format!("{path}/chunks?limit=0")).await;
    assert_eq!(
        page["data"].as_array().unwrap().len(),
        100,
        "0 is the default"
    );

    // Cursors this did not give, and parameters it does not take.
    for query in [
        "cursor=abc",
        "cursor=-1",
        "cursor=1e3",
        "cursor=%00",
        "from=3",
    ] {
        let (status, body) = s.get(&format!("{path}/chunks?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
    }

    // Writing takes a write key.
    let (status, _) = s
        .send(
            &s.read,
            reqwest::Method::POST,
            &format!("{path}/chunks"),
            Some(json!({"chunks": ["x"]})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn live_reads_start_back_from_the_end_for_a_negative_from() {
    let s = Served::new().await;
    let id = s.run("open").await;
    let path = format!("/v1/runs/{id}/streams/s");
    let (status, _) = s
        .post(
            &format!("{path}/chunks"),
            json!({"chunks": ["0", "1", "2", "3", {"$bytes": b64(&[4, 0xFF])}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = s.post(&format!("{path}/close"), json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let indices = |chunks: Vec<(u64, Vec<u8>)>| chunks.into_iter().map(|c| c.0).collect::<Vec<_>>();
    let (chunks, ended) = live(&s, &format!("{path}/live?from=-2")).await;
    assert!(ended);
    assert_eq!(chunks[1], (4, vec![4, 0xFF]));
    assert_eq!(indices(chunks), vec![3, 4]);
    let (chunks, _) = live(&s, &format!("{path}/live?from=-1")).await;
    assert_eq!(indices(chunks), vec![4]);
    let (chunks, _) = live(&s, &format!("{path}/live?from=-100")).await;
    assert_eq!(
        indices(chunks),
        vec![0, 1, 2, 3, 4],
        "clamped to the first chunk"
    );
    let (chunks, _) = live(&s, &format!("{path}/live?from={}", i64::MIN)).await;
    assert_eq!(indices(chunks), vec![0, 1, 2, 3, 4]);
    let (chunks, ended) = live(&s, &format!("{path}/live?from=7")).await;
    assert!(ended && chunks.is_empty());
}
