//! Every body of the API keeps its JSON: each is written to the JSON the server and the client
//! exchange today and read back from it, so a renamed field, a lost default or a changed
//! `skip_serializing_if` fails here before a server and a client of different builds disagree.
//! Query parameters go through the query string, as they travel.
//!
//! The engine's records inside a body (options, a filter, an error, a key's record) are
//! written as the engine writes them: their own shape is the engine's to test.

use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use worlds_engine::model::keys::{ApiKeyRecord, Scope};
use worlds_engine::model::{Page, ResolveData, SortOrder};
use worlds_engine::{
    BulkAction, RunStatus, StructuredError, WorkerInfo, WorkerStatus, WorkflowOptions,
    WorkflowQueryFilter,
};
use worlds_wire::{
    Bulk, Cancel, ChunkBody, ChunkPage, CreatedKey, DevkitChunk, DevkitChunkPage, ErrorBody, Live,
    NewChunks, NewKey, NewSchedule, Outcome, PageBody, PageParams, Reopen, Reset, Resolve, Resume,
    Resumed, RunFilter, StartRun, Started, StreamTail, Wait, WireBytes, Workers, Written,
    WrittenMany,
};

/// `value` is written as `json`, and `json` reads as `value`.
fn both_ways<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: T, json: Value) {
    assert_eq!(
        serde_json::to_value(&value).unwrap(),
        json,
        "{value:?} written"
    );
    let read: T = serde_json::from_value(json.clone())
        .unwrap_or_else(|e| panic!("{json} does not read back: {e}"));
    assert_eq!(read, value, "{json} read");
}

/// `value` is written as the query string `query`, and `query` reads as `value`.
fn query_both_ways<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: T, query: &str) {
    assert_eq!(serde_urlencoded::to_string(&value).unwrap(), query);
    let read: T = serde_urlencoded::from_str(query)
        .unwrap_or_else(|e| panic!("{query} does not read back: {e}"));
    assert_eq!(read, value, "{query} read");
}

fn engine<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap()
}

#[test]
fn a_start_and_its_answers() {
    let mut options = WorkflowOptions::default();
    options.workflow_id = Some("order-7".into());
    options.priority = Some(3);
    both_ways(
        StartRun {
            workflow: "checkout".into(),
            input: json!({ "order": "A-1" }),
            options: options.clone(),
        },
        json!({ "workflow": "checkout", "input": { "order": "A-1" }, "options": engine(&options) }),
    );
    let bare: StartRun = serde_json::from_value(json!({ "workflow": "checkout" })).unwrap();
    assert_eq!(
        (bare.input, bare.options),
        (Value::Null, WorkflowOptions::default())
    );
    assert!(serde_json::from_value::<StartRun>(json!({ "workflow": "w", "extra": 1 })).is_err());

    both_ways(
        Started {
            run_id: "wrun_1".into(),
            workflow_id: "order-7".into(),
        },
        json!({ "run_id": "wrun_1", "workflow_id": "order-7" }),
    );
    both_ways(
        Outcome {
            run_id: "wrun_1".into(),
            workflow_id: "order-7".into(),
            status: RunStatus::Completed,
            done: true,
            output: Some(json!(42)),
            error: None,
        },
        json!({ "run_id": "wrun_1", "workflow_id": "order-7", "status": "completed", "done": true, "output": 42 }),
    );
    let error = StructuredError::new("card declined").with_code("DECLINED");
    both_ways(
        Outcome {
            run_id: "wrun_2".into(),
            workflow_id: "wrun_2".into(),
            status: RunStatus::Failed,
            done: true,
            output: None,
            error: Some(error.clone()),
        },
        json!({ "run_id": "wrun_2", "workflow_id": "wrun_2", "status": "failed", "done": true, "error": engine(&error) }),
    );
}

#[test]
fn query_parameters() {
    query_both_ways(
        Wait {
            wait_ms: Some(30_000),
        },
        "wait_ms=30000",
    );
    query_both_ways(Wait::default(), "");
    query_both_ways(
        Resolve {
            resolve: Some(ResolveData::None),
        },
        "resolve=none",
    );
    query_both_ways(
        RunFilter {
            status: Some("failed,cancelled".into()),
            workflow: Some("checkout".into()),
            parent: Some("wrun_0".into()),
            started_after: Some(1_000),
            started_before: Some(2_000),
            quarantined: Some(false),
            code_version: Some("v2".into()),
            workflow_id_prefix: Some("order-".into()),
            cursor: Some("c1".into()),
            limit: Some(50),
            order: Some(SortOrder::Ascending),
            resolve: Some(ResolveData::All),
        },
        "status=failed%2Ccancelled&workflow=checkout&parent=wrun_0&started_after=1000\
         &started_before=2000&quarantined=false&code_version=v2&workflow_id_prefix=order-\
         &cursor=c1&limit=50&order=ascending&resolve=all",
    );
    query_both_ways(RunFilter::default(), "");
    assert!(serde_urlencoded::from_str::<RunFilter>("statuss=failed").is_err());
    query_both_ways(
        PageParams {
            cursor: Some("c2".into()),
            limit: Some(10),
            order: Some(SortOrder::Descending),
            resolve: Some(ResolveData::None),
        },
        "cursor=c2&limit=10&order=descending&resolve=none",
    );
    query_both_ways(
        ChunkPage {
            cursor: Some("c3".into()),
            limit: Some(5),
        },
        "cursor=c3&limit=5",
    );
    // A page size too large for a number is the most there is; a sign is refused by name.
    let huge: ChunkPage = serde_urlencoded::from_str("limit=99999999999999999999999").unwrap();
    assert_eq!(huge.limit, Some(usize::MAX));
    let signed = serde_urlencoded::from_str::<ChunkPage>("limit=-1").unwrap_err();
    assert!(signed.to_string().contains("whole number"), "{signed}");
    query_both_ways(Live { from: Some(-3) }, "from=-3");
}

#[test]
fn a_page() {
    let page = PageBody {
        data: vec![json!({ "id": "wrun_1" })],
        cursor: Some("c1".into()),
        has_more: true,
    };
    both_ways(
        page.clone(),
        json!({ "data": [{ "id": "wrun_1" }], "cursor": "c1", "has_more": true }),
    );
    // The engine's page writes the same JSON, so either reads the other.
    let engine_page = Page::from(page.clone());
    assert_eq!(engine(&engine_page), engine(&page));
    assert_eq!(PageBody::from(engine_page), page);
    both_ways(
        PageBody::<Value> {
            data: vec![],
            cursor: None,
            has_more: false,
        },
        json!({ "data": [], "cursor": null, "has_more": false }),
    );
}

#[test]
fn cancelling_reopening_and_bulk() {
    both_ways(
        Cancel {
            reason: Some("duplicate".into()),
        },
        json!({ "reason": "duplicate" }),
    );
    both_ways(Cancel::default(), json!({ "reason": null }));
    assert_eq!(
        serde_json::from_value::<Cancel>(json!({})).unwrap(),
        Cancel::default()
    );
    both_ways(
        Reopen {
            reason: Some("fixed".into()),
        },
        json!({ "reason": "fixed" }),
    );
    assert!(serde_json::from_value::<Reopen>(json!({ "position": 3 })).is_err());
    both_ways(
        Reset {
            position: 3,
            reason: None,
        },
        json!({ "position": 3, "reason": null }),
    );
    let mut filter = WorkflowQueryFilter::new();
    filter.workflow_name = Some("checkout".into());
    filter.quarantined = Some(true);
    both_ways(
        Bulk {
            action: BulkAction::Retry,
            filter: filter.clone(),
            reason: Some("fixed".into()),
            name: Some("retry-1".into()),
        },
        json!({ "action": "retry", "filter": engine(&filter), "reason": "fixed", "name": "retry-1" }),
    );
    let bare: Bulk = serde_json::from_value(json!({ "action": "cancel" })).unwrap();
    assert_eq!(bare.filter, WorkflowQueryFilter::default());
}

#[test]
fn hooks_schedules_and_keys() {
    both_ways(
        Resume {
            token: "tok".into(),
            payload: json!({ "approved": true }),
        },
        json!({ "token": "tok", "payload": { "approved": true } }),
    );
    let bare: Resume = serde_json::from_value(json!({ "token": "tok" })).unwrap();
    assert_eq!(bare.payload, Value::Null);
    both_ways(
        Resumed {
            run_id: "wrun_1".into(),
            hook_id: "hook_1".into(),
        },
        json!({ "run_id": "wrun_1", "hook_id": "hook_1" }),
    );
    both_ways(
        NewSchedule {
            id: "nightly".into(),
            workflow: "report".into(),
            cron: "0 3 * * *".into(),
            input: json!({ "full": true }),
        },
        json!({ "id": "nightly", "workflow": "report", "cron": "0 3 * * *", "input": { "full": true } }),
    );
    both_ways(
        NewKey {
            scope: Scope::Write,
            name: "ci".into(),
            expires_in_ms: Some(60_000),
        },
        json!({ "scope": "write", "name": "ci", "expires_in_ms": 60_000 }),
    );
    let bare: NewKey = serde_json::from_value(json!({ "scope": "read" })).unwrap();
    assert_eq!((bare.name.as_str(), bare.expires_in_ms), ("", None));
    let record = ApiKeyRecord {
        id: "abcd1234".into(),
        name: "ci".into(),
        scope: Scope::Admin,
        digest: "00".repeat(32),
        created_at: 1_000,
        expires_at: Some(2_000),
        revoked_at: None,
    };
    both_ways(
        CreatedKey {
            key: "wek_abcd1234_secret".into(),
            record: record.clone(),
        },
        json!({ "key": "wek_abcd1234_secret", "record": engine(&record) }),
    );
}

#[test]
fn streams() {
    both_ways(
        ChunkBody {
            index: 0,
            created_at: 1_000,
            text: Some("hello".into()),
            base64: None,
        },
        json!({ "index": 0, "created_at": 1_000, "text": "hello" }),
    );
    both_ways(
        ChunkBody {
            index: 1,
            created_at: 1_001,
            text: None,
            base64: Some("/w==".into()),
        },
        json!({ "index": 1, "created_at": 1_001, "base64": "/w==" }),
    );
    both_ways(Written { index: 4 }, json!({ "index": 4 }));
    both_ways(
        WrittenMany {
            indices: vec![5, 6],
        },
        json!({ "indices": [5, 6] }),
    );
    both_ways(
        NewChunks {
            chunks: vec![json!({ "$bytes": "AA==" }), json!("text")],
        },
        json!({ "chunks": [{ "$bytes": "AA==" }, "text"] }),
    );
    both_ways(
        DevkitChunkPage {
            data: vec![DevkitChunk {
                index: 0,
                data: WireBytes {
                    bytes: "AA==".into(),
                },
            }],
            cursor: None,
            has_more: false,
            done: true,
        },
        json!({ "data": [{ "index": 0, "data": { "$bytes": "AA==" } }], "cursor": null, "hasMore": false, "done": true }),
    );
    both_ways(
        StreamTail {
            tail_index: -1,
            done: false,
        },
        json!({ "tailIndex": -1, "done": false }),
    );
}

#[test]
fn workers() {
    let worker = WorkerInfo {
        id: "w1".into(),
        status: WorkerStatus::Busy,
        current_task: Some("task_1".into()),
        last_heartbeat: 1_000,
        tasks_completed: 7,
        task_queue: None,
    };
    both_ways(
        Workers {
            live: vec![worker.clone()],
            dead: vec![],
        },
        json!({ "live": [engine(&worker)], "dead": [] }),
    );
}

#[test]
fn a_refusal() {
    both_ways(
        ErrorBody {
            code: "NOT_FOUND".into(),
            message: "run not found: wrun_x".into(),
            details: json!({ "what": "run", "id": "wrun_x" }),
        },
        json!({ "code": "NOT_FOUND", "message": "run not found: wrun_x", "details": { "what": "run", "id": "wrun_x" } }),
    );
    both_ways(
        ErrorBody {
            code: "FORBIDDEN".into(),
            message: "no".into(),
            details: Value::Null,
        },
        json!({ "code": "FORBIDDEN", "message": "no", "details": null }),
    );
    // A refusal from something in front of the server may leave `details` out.
    let bare: ErrorBody =
        serde_json::from_value(json!({ "code": "UNAVAILABLE", "message": "down" })).unwrap();
    assert_eq!(bare.details, Value::Null);
}
