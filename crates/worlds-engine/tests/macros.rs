//! The attributes: `#[workflow]`, `#[step]` and `#[activity]` functions run and replay, take
//! their names and options from the attribute, and reach the world's resources.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use worlds_engine::current;
use worlds_engine::duration::Dur;
use worlds_engine::prelude::*;

use common::{test_world, Mode};

/// Stands in for a database pool: provided on the world, reached by steps. Clones share it.
#[derive(Clone, Default)]
struct Ledger {
    /// Calls of `charge`, failed ones included.
    charge_calls: Arc<AtomicU32>,
    entries: Arc<Mutex<Vec<String>>>,
}

impl Ledger {
    fn entries(&self) -> Vec<String> {
        self.entries.lock().clone()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: String,
    cents: u64,
}

/// Fails on its first two attempts, then charges.
#[step(
    retry = RetryConfig::new().initial_interval(Duration::from_secs(1)),
    max_attempts = 3,
    timeout = "30s"
)]
async fn charge(#[resource] ledger: &Ledger, order: Order) -> Result<String, StepError> {
    if ledger.charge_calls.fetch_add(1, Ordering::SeqCst) < 2 {
        return Err(StepError::msg("gateway busy"));
    }
    ledger.entries.lock().push(format!("charge {}", order.id));
    Ok(format!("receipt-{}", order.id))
}

/// Takes its resource as an `Arc`, several arguments, and a name of its own.
#[step(name = "ship-order", retry = none)]
async fn ship(#[resource] ledger: Arc<Ledger>, id: String, boxes: u32) -> Result<u32, StepError> {
    ledger.entries.lock().push(format!("ship {id} in {boxes}"));
    Ok(boxes)
}

#[workflow(timeout = "1h", max_retries = 0)]
async fn checkout(ctx: WorkflowContext, order: Order) -> Result<(String, u32), WorkflowError> {
    let receipt = charge(order.clone()).await?;
    ctx.sleep("10m").await?;
    let boxes = ship(order.id, 2).await?;
    Ok((receipt, boxes))
}

fn order(id: &str) -> Order {
    Order {
        id: id.into(),
        cents: 4_200,
    }
}

async fn a_macro_workflow_runs_each_step_once(mode: Mode) {
    let world = test_world(mode).await;
    let ledger = Ledger::default();
    world.provide(ledger.clone());
    world.register(&checkout).unwrap();
    let run = world
        .execute(&checkout, order("A-1"), WorkflowOptions::default())
        .await
        .unwrap();
    let state = world.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    let output: (String, u32) = state.output.clone().unwrap().decode().unwrap();
    assert_eq!(output, ("receipt-A-1".to_owned(), 2));
    // Both steps reached the one provided ledger (`&Ledger` and `Arc<Ledger>`), and each did
    // its work once however often the workflow replayed.
    assert_eq!(ledger.entries(), ["charge A-1", "ship A-1 in 2"]);
    assert_eq!(ledger.charge_calls.load(Ordering::SeqCst), 3);

    let names: Vec<&str> = state.activities.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["macros::charge", "ship-order"]);
    assert!(state.activities.iter().all(|a| a.inline));
    assert_eq!(
        state.activities[0].attempt, 3,
        "charge failed twice, then succeeded"
    );
    world.shutdown().await.unwrap();
}

async fn step_options_come_from_the_attribute(mode: Mode) {
    let world = test_world(mode).await;
    world.provide(Ledger::default());
    world.register(&checkout).unwrap();
    let run = world
        .execute(&checkout, order("A-2"), WorkflowOptions::default())
        .await
        .unwrap();
    let state = world.run_until_complete(&run.id, "1h").await.unwrap();
    let charge_options = state.activities[0].options.clone().unwrap();
    let retry = charge_options.retry.unwrap();
    assert_eq!(retry.max_attempts, 3);
    assert_eq!(retry.initial_interval, Dur(Duration::from_secs(1)));
    assert_eq!(charge_options.timeout, Some(Dur(Duration::from_secs(30))));
    let ship_options = state.activities[1].options.clone().unwrap();
    assert_eq!(ship_options.retry, Some(RetryConfig::none()));
    assert_eq!(ship_options.timeout, None);
    world.shutdown().await.unwrap();
}

/// An activity: registered by name, input recorded, several parameters as a tuple.
#[activity(name = "add", retry = database, max_attempts = 2)]
async fn add(ctx: ActivityContext, a: u64, b: u64) -> Result<u64, StepError> {
    assert_eq!(ctx.name(), "add");
    Ok(a + b)
}

/// An activity that reads a resource.
#[activity]
async fn record(#[resource] ledger: &Ledger, line: String) -> Result<(), StepError> {
    ledger.entries.lock().push(line);
    Ok(())
}

#[workflow]
async fn sum(ctx: WorkflowContext, values: Vec<u64>) -> Result<u64, WorkflowError> {
    let mut total = 0;
    for value in values {
        total = ctx.run(&add, (total, value)).await?;
    }
    ctx.run(&record, format!("sum {total}")).await?;
    Ok(total)
}

async fn macro_activities_are_registered_and_run(mode: Mode) {
    let world = test_world(mode).await;
    let ledger = Ledger::default();
    world.provide(ledger.clone());
    world
        .register(&add)
        .unwrap()
        .register(&record)
        .unwrap()
        .register(&sum)
        .unwrap();
    let run = world
        .execute(&sum, vec![1, 2, 3], WorkflowOptions::default())
        .await
        .unwrap();
    let state = world.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    assert_eq!(state.output.unwrap().decode::<u64>().unwrap(), 6);
    assert_eq!(ledger.entries(), ["sum 6"]);
    let names: Vec<&str> = state.activities.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["add", "add", "add", "macros::record"]);
    assert!(state.activities.iter().all(|a| !a.inline));
    world.shutdown().await.unwrap();
}

/// Takes its context and a tuple pattern; fails its first attempt.
#[step(max_attempts = 2)]
async fn add_attempt(ctx: ActivityContext, (a, b): (u32, u32)) -> Result<u32, StepError> {
    if ctx.attempt() == 1 {
        return Err(StepError::msg("first attempts fail"));
    }
    Ok(a + b + ctx.attempt())
}

#[step]
async fn double(n: u32) -> Result<u32, StepError> {
    Ok(n * 2)
}

/// No context parameter: the workflow reaches its context through `current::`.
#[workflow(name = "nap", priority = 5)]
async fn nap(minutes: u64) -> Result<String, WorkflowError> {
    current::sleep(minutes * 60_000).await?;
    let meta = current::get_workflow_metadata()?;
    Ok(format!("{} slept {minutes}m", meta.name))
}

#[workflow]
async fn parent(ctx: WorkflowContext) -> Result<(String, u32, u32, u32), WorkflowError> {
    let report = ctx
        .execute_child(&nap, 5, WorkflowOptions::default())
        .await?;
    // Steps are issued when called, so joined steps keep their order on every replay.
    let (a, b) = futures::join!(double(1), double(2));
    let (a, b) = (a?, b?);
    let c = add_attempt((a, b)).await?;
    Ok((report, a, b, c))
}

async fn workflows_without_a_context_and_joined_steps(mode: Mode) {
    let world = test_world(mode).await;
    world.register(&nap).unwrap().register(&parent).unwrap();
    let run = world
        .execute(&parent, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = world.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    let output: (String, u32, u32, u32) = state.output.unwrap().decode().unwrap();
    assert_eq!(output, ("nap slept 5m".to_owned(), 2, 4, 8));
    world.shutdown().await.unwrap();
}

in_both_modes!(
    a_macro_workflow_runs_each_step_once,
    step_options_come_from_the_attribute,
    macro_activities_are_registered_and_run,
    workflows_without_a_context_and_joined_steps,
);

#[test]
fn definitions_take_their_names_and_options_from_the_attribute() {
    assert_eq!(checkout.name(), "macros::checkout");
    assert_eq!(
        checkout.options().timeout,
        Some(Dur(Duration::from_secs(3_600)))
    );
    assert_eq!(checkout.options().max_retries, Some(0));
    assert_eq!(nap.name(), "nap");
    assert_eq!(nap.options().priority, Some(5));
    assert_eq!(add.name(), "add");
    let retry = add.options().retry.clone().unwrap();
    assert_eq!(retry, retry_patterns::database().max_attempts(2));
    assert_eq!(record.name(), "macros::record");
    assert_eq!(record.options(), &ActivityOptions::default());
}

#[tokio::test]
async fn a_step_called_outside_a_workflow_fails() {
    let err = charge(order("C-3")).await.unwrap_err();
    assert!(
        matches!(
            err,
            ContextError::OutsideWorkflow {
                call: "macros::charge"
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_missing_resource_fails_the_step_naming_its_type() {
    let world = test_world(Mode::Cached).await;
    world.register(&checkout).unwrap();
    let run = world
        .execute(&checkout, order("D-4"), WorkflowOptions::default())
        .await
        .unwrap();
    let state = world.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    let message = state.error.unwrap().message;
    assert!(
        message.contains("Ledger") && message.contains("world.provide"),
        "{message}"
    );
    world.shutdown().await.unwrap();
}
