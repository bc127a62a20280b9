//! Definitions and the registry: unique names, unknown names, input that does not match the
//! workflow's type, steps calling unregistered activities, unique workflow ids, default options
//! on a definition versus per-call options, and typed values going in and out.

mod common;

use common::{add_one, event_types, test_world, Counter, Mode};
use serde::{Deserialize, Serialize};
use serde_json::json;
use worlds_engine::error::codes;
use worlds_engine::prelude::*;
use worlds_engine::{ErrorKind, EventKind, WorkflowQueryFilter};

/// A workflow that returns its input + 1 through one step, named `name`.
fn incrementer(name: &str, step: &Activity<u64, u64>) -> Workflow<u64, u64> {
    let step = step.clone();
    workflow(name, move |ctx: WorkflowContext, n: u64| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, n).await?) }
    })
}

/// A workflow that sleeps an hour, so its run stays open while a test looks at it.
fn napper(name: &str) -> Workflow<(), ()> {
    workflow(name, |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    })
}

async fn run_count(t: &worlds_engine::testing::TestWorld) -> usize {
    t.query_workflows(WorkflowQueryFilter::new())
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn second_workflow_with_a_taken_name_is_a_conflict_and_the_first_stays() {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let first = incrementer("calc", &step);
    // Same name, different behaviour: if the registry replaced the first definition, the run
    // below would return 1000 instead of 6.
    let second = workflow("calc", |_ctx: WorkflowContext, _n: u64| async move {
        Ok::<_, WorkflowError>(1000u64)
    });
    let t = test_world(Mode::Cached).await;
    t.register(&step).unwrap().register(&first).unwrap();
    let err = t.register(&second).unwrap_err();
    assert!(matches!(err, WorldError::Conflict { .. }), "{err:?}");
    assert_eq!(err.http_status(), 409);
    assert!(err.to_string().contains("'calc'"), "{err}");
    assert_eq!(t.workflow_names(), vec!["calc".to_owned()]);

    let run = t
        .execute(&first, 5, WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), 6);
}

#[tokio::test]
async fn second_activity_with_a_taken_name_is_a_conflict_and_the_first_stays() {
    let calls = Counter::default();
    let first = add_one("step", &calls);
    let second = activity("step", |_ctx: ActivityContext, _n: u64| async move {
        Ok::<_, StepError>(1000u64)
    });
    let flow = incrementer("uses-step", &first);
    let t = test_world(Mode::Cached).await;
    t.register(&first).unwrap();
    let err = t.register(&second).unwrap_err();
    assert!(matches!(err, WorldError::Conflict { .. }), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.http_status(), 409);
    assert!(err.to_string().contains("'step'"), "{err}");

    t.register(&flow).unwrap();
    let run = t
        .execute(&flow, 1, WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(
        run.result().await.unwrap(),
        2,
        "the first activity still runs"
    );
    assert_eq!(calls.get(), 1);
}

#[tokio::test]
async fn executing_an_unregistered_name_is_unknown_workflow_404_naming_it() {
    let t = test_world(Mode::Cached).await;
    let err = t
        .execute_by_name::<_, u64>("never-registered", 1u64, WorkflowOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WorldError::UnknownWorkflow { name } if name == "never-registered"),
        "{err:?}"
    );
    assert_eq!(err.http_status(), 404);
    assert!(err.to_string().contains("never-registered"), "{err}");
    assert_eq!(
        run_count(&t).await,
        0,
        "no run is created for an unknown name"
    );
}

#[tokio::test]
async fn input_of_the_wrong_shape_is_invalid_input_400_on_field_input() {
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let flow = incrementer("wants-a-number", &step);
    let t = test_world(Mode::Cached).await;
    t.register(&step).unwrap().register(&flow).unwrap();

    // The workflow takes a u64; an object is refused before anything is recorded.
    let err = t
        .execute_by_name::<_, u64>(
            "wants-a-number",
            json!({ "n": 1 }),
            WorkflowOptions::default(),
        )
        .await
        .unwrap_err();
    match &err {
        WorldError::InvalidInput { field, message } => {
            assert_eq!(field, "input");
            assert!(message.contains("wants-a-number"), "{message}");
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    assert_eq!(err.http_status(), 400);
    assert_eq!(run_count(&t).await, 0);
    assert_eq!(calls.get(), 0);

    // The right shape, as untyped JSON, is accepted by the same by-name path.
    let run = t
        .execute_by_name::<_, u64>("wants-a-number", json!(41), WorkflowOptions::default())
        .await
        .unwrap();
    t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(run.result().await.unwrap(), 42);
}

async fn step_calling_an_unregistered_activity_fails_with_not_registered(mode: Mode) {
    // The workflow catches the failure and reports what it saw, so the test checks what the
    // workflow code receives, not only what ends up in history.
    let flow = workflow("calls-ghost", |ctx: WorkflowContext, _: ()| async move {
        match ctx.run_by_name::<_, u64>("ghost-activity", 1u64).await {
            Ok(v) => Ok::<_, WorkflowError>(format!("unexpected success {v}")),
            Err(ContextError::ActivityFailed {
                name,
                position,
                error,
                ..
            }) => Ok(format!(
                "{name}|{position}|{}|{}",
                error.code.unwrap_or_default(),
                error.message
            )),
            Err(other) => Ok(format!("unexpected error {other}")),
        }
    });
    let t = test_world(mode).await;
    t.register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    let seen = run.result().await.unwrap();
    let parts: Vec<&str> = seen.splitn(4, '|').collect();
    assert_eq!(
        parts[..3],
        ["ghost-activity", "0", codes::NOT_REGISTERED],
        "{seen}"
    );
    assert!(parts[3].contains("ghost-activity"), "{seen}");
    // Refused before any attempt: scheduled and failed, never started.
    assert!(!event_types(&state).contains(&"activity_started"));
    assert_eq!(state.activities.len(), 1);
    assert_eq!(
        state.activities[0].status,
        worlds_engine::ActivityStatus::Failed
    );
}

async fn duplicate_workflow_id_is_a_conflict(mode: Mode) {
    let flow = napper("nap");
    let t = test_world(mode).await;
    t.register(&flow).unwrap();
    let first = t
        .execute(&flow, (), WorkflowOptions::new().workflow_id("order-42"))
        .await
        .unwrap();
    assert_eq!(first.workflow_id, "order-42");
    assert_ne!(
        first.id, "order-42",
        "the run id stays a generated wrun_ id"
    );
    t.settle().await;

    let err = t
        .execute(&flow, (), WorkflowOptions::new().workflow_id("order-42"))
        .await
        .unwrap_err();
    assert!(matches!(err, WorldError::Conflict { .. }), "{err:?}");
    assert_eq!(err.http_status(), 409);
    assert!(err.to_string().contains("order-42"), "{err}");
    // Only the first run exists, and the workflow id still leads to it.
    assert_eq!(run_count(&t).await, 1);
    assert_eq!(t.query("order-42").await.unwrap().id, first.id);

    t.run_until_complete("order-42", "2h").await.unwrap();
    first.result().await.unwrap();
}

async fn definition_options_apply_and_per_call_options_win(mode: Mode) {
    let flow = napper("report").with_options(
        WorkflowOptions::new()
            .priority(7)
            .task_queue("reports")
            .timeout(std::time::Duration::from_secs(3 * 3600)),
    );
    let t = test_world(mode).await;
    t.register(&flow).unwrap();

    // Nothing per call: the definition's options are used.
    let plain = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.query(&plain.id).await.unwrap();
    assert_eq!(state.priority, 7);
    assert_eq!(state.task_queue.as_deref(), Some("reports"));
    assert_eq!(state.timeout_ms, Some(3 * 3_600_000));

    // Per call: the call's priority wins, the fields it leaves unset come from the definition.
    let urgent = t
        .execute(&flow, (), WorkflowOptions::new().priority(99))
        .await
        .unwrap();
    let state = t.query(&urgent.id).await.unwrap();
    assert_eq!(state.priority, 99);
    assert_eq!(state.task_queue.as_deref(), Some("reports"));
    assert_eq!(state.timeout_ms, Some(3 * 3_600_000));
    // The options are part of the recorded history, not just of the in-memory state.
    match &state.history[0].kind {
        EventKind::WorkflowQueued(run) => {
            assert_eq!(run.priority, 99);
            assert_eq!(run.task_queue.as_deref(), Some("reports"));
        }
        other => panic!("first event is {other:?}"),
    }

    let moved = t
        .execute(&flow, (), WorkflowOptions::new().task_queue("elsewhere"))
        .await
        .unwrap();
    let state = t.query(&moved.id).await.unwrap();
    assert_eq!(state.task_queue.as_deref(), Some("elsewhere"));
    assert_eq!(state.priority, 7);

    for run in [&plain, &urgent, &moved] {
        t.run_until_complete(&run.id, "2h").await.unwrap();
        run.result().await.unwrap();
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Item {
    sku: String,
    quantity: u32,
    unit_cents: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: String,
    items: Vec<Item>,
    note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    order_id: String,
    total_cents: u64,
    lines: Vec<String>,
    note: Option<String>,
}

async fn typed_struct_input_and_output_round_trip(mode: Mode) {
    let price = activity("price", |_ctx: ActivityContext, order: Order| async move {
        let total = order
            .items
            .iter()
            .map(|i| u64::from(i.quantity) * i.unit_cents)
            .sum();
        Ok::<_, StepError>(total)
    });
    let p = price.clone();
    let checkout = workflow("checkout", move |ctx: WorkflowContext, order: Order| {
        let p = p.clone();
        async move {
            let total_cents: u64 = ctx.run(&p, order.clone()).await?;
            Ok::<_, WorkflowError>(Receipt {
                order_id: order.id.clone(),
                total_cents,
                lines: order
                    .items
                    .iter()
                    .map(|i| format!("{}x{}", i.quantity, i.sku))
                    .collect(),
                note: order.note.clone(),
            })
        }
    });
    let order = Order {
        id: "ord-1".into(),
        items: vec![
            Item {
                sku: "tea 🍵".into(),
                quantity: 2,
                unit_cents: 350,
            },
            Item {
                sku: "cake".into(),
                quantity: 1,
                unit_cents: 425,
            },
        ],
        note: Some("ring twice \"please\"".into()),
    };
    let t = test_world(mode).await;
    t.register(&price).unwrap().register(&checkout).unwrap();
    let run = t
        .execute(&checkout, order.clone(), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    let receipt: Receipt = run.result().await.unwrap();
    assert_eq!(
        receipt,
        Receipt {
            order_id: "ord-1".into(),
            total_cents: 2 * 350 + 425,
            lines: vec!["2xtea 🍵".into(), "1xcake".into()],
            note: Some("ring twice \"please\"".into()),
        }
    );
    // What was stored is the serialized struct, readable back into the same type.
    let stored_input: Order = state.input.as_ref().unwrap().decode().unwrap();
    assert_eq!(stored_input, order);
    let stored_output: Receipt = state.output.as_ref().unwrap().decode().unwrap();
    assert_eq!(stored_output, receipt);
    let step_input: Order = state.activities[0]
        .input
        .as_ref()
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(step_input, order);
    // A handle looked up later, typed by the caller, reads the same result.
    let again: WorkflowHandle<Receipt> = t.handle(&run.id).await.unwrap();
    assert_eq!(again.result().await.unwrap(), receipt);
}

in_both_modes!(
    step_calling_an_unregistered_activity_fails_with_not_registered,
    duplicate_workflow_id_is_a_conflict,
    definition_options_apply_and_per_call_options_win,
    typed_struct_input_and_output_round_trip,
);
