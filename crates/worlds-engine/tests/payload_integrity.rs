//! Any payload the engine accepts is read back byte for byte after a restart, on every backend:
//! whatever its depth, its string escapes (lone surrogates included) or its whitespace.
//!
//! Regression: a workflow input 127 levels deep used to be accepted and then make the whole
//! directory unopenable, because decoding a stored event walked the payload again inside the
//! event's own levels.

mod common;

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::value::RawValue;
use serde_json::Value;
use worlds_engine::prelude::*;
use worlds_engine::store::{FileStore, HybridStore, MemoryStore, Store};
use worlds_engine::{EventKind, Payload, Persistence};

use common::crash_copy;
use common::store_events::Maker;

/// A JSON string literal built from random pieces: plain characters of any script, and every
/// escape JSON has, including `\u` escapes of lone surrogates and control characters.
fn json_string() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => any::<char>()
            .prop_filter("plain", |c| *c >= ' ' && *c != '"' && *c != '\\')
            .prop_map(String::from),
        1 => prop::sample::select(vec![
            r#"\""#, r"\\", r"\/", r"\b", r"\f", r"\n", r"\r", r"\t",
        ])
        .prop_map(str::to_owned),
        1 => any::<u16>().prop_map(|u| format!(r"\u{u:04x}")),
        1 => (0xd800u16..0xe000).prop_map(|u| format!(r"\u{u:04X}")),
    ];
    prop::collection::vec(piece, 0..12).prop_map(|pieces| format!("\"{}\"", pieces.concat()))
}

/// Whitespace JSON allows between tokens (line breaks included: the engine turns them into
/// spaces when it accepts the payload).
fn space() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![" ", "\t", "\n", "\r\n", ""]),
        0..3,
    )
    .prop_map(|s| s.concat())
}

/// Arbitrary JSON text.
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| f.to_string()),
        prop::sample::select(vec![
            "1e400",
            "-0",
            "0.000001E-7",
            "123456789012345678901234567890"
        ])
        .prop_map(str::to_owned),
        json_string(),
    ];
    leaf.prop_recursive(6, 48, 6, |inner| {
        prop_oneof![
            (
                prop::collection::vec((space(), inner.clone()), 0..6),
                space()
            )
                .prop_map(|(items, end)| {
                    let items: Vec<String> = items.into_iter().map(|(s, v)| s + &v).collect();
                    format!("[{}{end}]", items.join(","))
                }),
            prop::collection::vec((json_string(), space(), inner), 0..6).prop_map(|fields| {
                let fields: Vec<String> = fields
                    .into_iter()
                    .map(|(k, s, v)| format!("{k}{s}:{v}"))
                    .collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

/// JSON text, sometimes wrapped in hundreds or thousands of arrays and objects.
fn payload_text() -> impl Strategy<Value = String> {
    (
        json_text(),
        prop_oneof![3 => Just(0usize), 1 => 1usize..300, 1 => 300usize..4000],
    )
        .prop_map(|(inner, depth)| {
            let mut text = inner;
            for level in 0..depth {
                text = if level % 2 == 0 {
                    format!("[{text}]")
                } else {
                    format!("{{\"k\":{text}}}")
                };
            }
            text
        })
}

#[derive(Clone, Copy, Debug)]
enum Backend {
    Memory,
    File,
    Hybrid,
}

/// Stores each payload as a run's input and as its output, restarts the store, and checks that
/// every payload reads back byte for byte.
async fn round_trip(backend: Backend, texts: &[String]) {
    let payloads: Vec<Payload> = texts
        .iter()
        .map(|t| Payload::from_json(t.as_str()).expect("generated text is valid JSON"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let open = |root: &Path| -> Arc<dyn Store> {
        match backend {
            Backend::Memory => Arc::new(MemoryStore::new()),
            Backend::File => Arc::new(FileStore::open(root).unwrap()),
            Backend::Hybrid => Arc::new(HybridStore::open(root).unwrap()),
        }
    };
    let maker = Maker::new();
    let store = open(dir.path());
    let mut runs = Vec::new();
    for payload in &payloads {
        let run_id = maker.ids.run_id();
        let mut queued = maker.queued(&run_id, "w", &run_id);
        if let EventKind::WorkflowQueued(run) = &mut queued.kind {
            run.input = payload.clone();
        }
        store.create_run(queued).await.unwrap();
        let started = maker.event(
            &run_id,
            EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            },
        );
        let completed = maker.event(
            &run_id,
            EventKind::WorkflowCompleted {
                output: payload.clone(),
            },
        );
        store
            .append(&run_id, vec![started, completed])
            .await
            .unwrap();
        runs.push(run_id);
    }

    let crashed = tempfile::tempdir().unwrap();
    let reopened: Vec<Arc<dyn Store>> = match backend {
        Backend::Memory => vec![store],
        Backend::File => {
            drop(store);
            vec![open(dir.path())]
        }
        Backend::Hybrid => {
            // Both ways back: from the WAL (a copy taken while the store is open, as a crash
            // leaves it) and from the compacted run logs (after a clean close).
            crash_copy(dir.path(), crashed.path());
            drop(store);
            vec![open(crashed.path()), open(dir.path())]
        }
    };
    for store in reopened {
        for (run_id, payload) in runs.iter().zip(&payloads) {
            let history = store.history(run_id, 0).await.unwrap();
            let EventKind::WorkflowQueued(run) = &history[0].kind else {
                panic!("first event of {run_id} is {:?}", history[0].kind);
            };
            assert_eq!(run.input.as_json(), payload.as_json(), "{backend:?} input");
            let EventKind::WorkflowCompleted { output } = &history[2].kind else {
                panic!("last event of {run_id} is {:?}", history[2].kind);
            };
            assert_eq!(output.as_json(), payload.as_json(), "{backend:?} output");
        }
    }
}

/// Generates batches of payloads (a few hundred per backend in all) and round-trips each batch.
fn property(backend: Backend) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 40,
        ..Config::default()
    });
    runner
        .run(&prop::collection::vec(payload_text(), 6..12), |texts| {
            runtime.block_on(round_trip(backend, &texts));
            Ok(())
        })
        .unwrap();
}

#[test]
fn any_accepted_payload_reads_back_byte_for_byte_from_memory() {
    property(Backend::Memory);
}

#[test]
fn any_accepted_payload_reads_back_byte_for_byte_from_file() {
    property(Backend::File);
}

#[test]
fn any_accepted_payload_reads_back_byte_for_byte_from_hybrid() {
    property(Backend::Hybrid);
}

/// The cases the defect was found with, through the whole engine.
fn nested(depth: usize) -> Value {
    let mut value = Value::from(1);
    for _ in 0..depth {
        value = Value::Array(vec![value]);
    }
    value
}

async fn deep_input_and_output_survive_a_restart(persistence: Persistence) {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        let mut config = WorldConfig::default();
        config.persistence = persistence;
        config.persistence_path = dir.path().to_path_buf();
        config
    };
    let echo = activity("echo", |_ctx: ActivityContext, v: Value| async move {
        Ok::<_, StepError>(v)
    });
    let step = echo.clone();
    let flow = workflow("deep", move |ctx: WorkflowContext, v: Value| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, v).await?) }
    });
    let raw_flow = workflow(
        "raw",
        |_ctx: WorkflowContext, v: Box<RawValue>| async move { Ok::<_, WorkflowError>(v) },
    );
    let deep_raw = format!("{}{}", "[".repeat(3000), "]".repeat(3000));
    let odd_raw = r#"{"s": "\ud800 and \udfff\u0000"}"#;

    let (deep_id, raw_id, odd_id) = {
        let world = World::new(config()).unwrap();
        world
            .register(&echo)
            .unwrap()
            .register(&flow)
            .unwrap()
            .register(&raw_flow)
            .unwrap();
        world.start().await.unwrap();
        let deep = world
            .execute(&flow, nested(127), WorkflowOptions::default())
            .await
            .unwrap();
        assert_eq!(deep.result().await.unwrap(), nested(127));
        let raw = world
            .execute(
                &raw_flow,
                RawValue::from_string(deep_raw.clone()).unwrap(),
                WorkflowOptions::default(),
            )
            .await
            .unwrap();
        raw.result().await.unwrap();
        let odd = world
            .execute(
                &raw_flow,
                RawValue::from_string(odd_raw.into()).unwrap(),
                WorkflowOptions::default(),
            )
            .await
            .unwrap();
        odd.result().await.unwrap();
        let ids = (deep.id.clone(), raw.id.clone(), odd.id.clone());
        world.shutdown().await.unwrap();
        ids
    };

    let world = World::new(config()).expect("a directory holding accepted payloads opens");
    world
        .register(&echo)
        .unwrap()
        .register(&flow)
        .unwrap()
        .register(&raw_flow)
        .unwrap();
    world.start().await.unwrap();
    let deep = world.query(&deep_id).await.unwrap();
    assert_eq!(deep.output.unwrap().decode::<Value>().unwrap(), nested(127));
    let raw = world.query(&raw_id).await.unwrap();
    assert_eq!(raw.input.unwrap().as_json(), deep_raw);
    assert_eq!(raw.output.unwrap().as_json(), deep_raw);
    let odd = world.query(&odd_id).await.unwrap();
    assert_eq!(odd.output.unwrap().as_json(), odd_raw);
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn deep_payloads_do_not_make_a_file_directory_unopenable() {
    deep_input_and_output_survive_a_restart(Persistence::File).await;
}

#[tokio::test]
async fn deep_payloads_do_not_make_a_hybrid_directory_unopenable() {
    deep_input_and_output_survive_a_restart(Persistence::Hybrid).await;
}
