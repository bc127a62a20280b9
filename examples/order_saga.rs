//! Order saga: charge the card, reserve inventory, create the shipment — and when shipping
//! fails, undo what was done, newest first: release the inventory, then refund the card.
//!
//! The workflow, defined in `crates/worlds-demo/src/saga.rs`, registers a compensation after
//! each step that needs undoing and runs under the `compensate` failure strategy. When it
//! fails, the engine runs the compensations in reverse order, records each one in the run's
//! history and ends the run `compensated`. `worlds dev` runs the same definitions on a durable
//! world.
//!
//! Run it with `cargo run --example order_saga`.

use std::collections::HashMap;

use worlds_demo::shop::Order;
use worlds_demo::{Demo, DemoOptions};
use worlds_engine::prelude::*;
use worlds_engine::{Event, EventKind};

#[tokio::main]
async fn main() -> Result<(), WorldError> {
    // The steps print what they do. The warehouse takes 300 ms, and the failing shipment is
    // tried again 300 ms after its first attempt.
    let demo = Demo::new(
        &DemoOptions::new()
            .pause(std::time::Duration::from_millis(300))
            .narrate(true),
    );

    let world = World::new(WorldConfig::memory())?;
    demo.register(&world)?;
    world.start().await?;

    let order = Order {
        id: "A-1001".into(),
        cents: 4200,
        sku: "SKU-42".into(),
        quantity: 2,
    };
    println!("order saga for {} — shipping will fail\n", order.id);
    let run = world
        .execute(
            &demo.order_saga,
            order,
            // One run per order: after a restart, the same call finds this run again.
            WorkflowOptions::new()
                .workflow_id("order-A-1001")
                .on_conflict(OnConflict::UseExisting),
        )
        .await?;
    match run.result().await {
        Ok(parcel) => println!("\nshipped: {parcel}"),
        // The run's error is the original failure, whatever the compensations did.
        Err(WorldError::RunFailed { error, .. }) => {
            println!("\nthe order failed: {}", error.message)
        }
        Err(other) => return Err(other),
    }

    let state = run.query().await?;
    println!(
        "\nhistory of {} ({}), final status: {}\n",
        state.workflow_id, state.id, state.status
    );
    print_history(&state.history);

    println!("\ncompensations, in registration order (they ran last-registered first):");
    for c in &state.compensations {
        let outcome = match (&c.error, c.executed) {
            (Some(error), _) => format!("failed: {error}"),
            (None, true) => "executed".to_owned(),
            (None, false) => "not run".to_owned(),
        };
        println!("  {:<7} {outcome}", c.id);
    }
    println!("\nfinal status: {}", state.status);

    world.shutdown().await?;
    Ok(())
}

/// One line per event: sequence number, time since the run was queued, type, command position
/// and a short detail.
fn print_history(history: &[Event]) {
    let start = history.first().map(|e| e.timestamp).unwrap_or_default();
    // Step names by position, to name the events that only carry a position.
    let mut steps: HashMap<u32, String> = HashMap::new();
    for event in history {
        if let EventKind::ActivityScheduled { position, name, .. } = &event.kind {
            steps.insert(*position, name.clone());
        }
    }
    let step = |position: &u32| steps.get(position).cloned().unwrap_or_default();
    let mut last_step = String::new();

    println!(
        "  {:>3}  {:>7}  {:<24} {:>4}  detail",
        "seq", "time", "event", "pos"
    );
    for event in history {
        let detail = match &event.kind {
            EventKind::WorkflowQueued(run) => run.name.clone(),
            EventKind::WorkflowStarted { attempt, .. } => format!("attempt {attempt}"),
            EventKind::ActivityScheduled { name, .. } => name.clone(),
            EventKind::ActivityStarted { position, attempt } => {
                format!("{} (attempt {attempt})", step(position))
            }
            EventKind::ActivityCompleted {
                position, output, ..
            } => {
                last_step = step(position);
                if output.as_json() == "null" {
                    last_step.clone()
                } else {
                    format!("{last_step} → {output}")
                }
            }
            EventKind::ActivityFailed {
                position,
                error,
                retrying,
                ..
            } => {
                let then = if *retrying { "will retry" } else { "gave up" };
                format!("{}: {} ({then})", step(position), error.message)
            }
            EventKind::ActivityRetry {
                position, delay_ms, ..
            } => format!("{} again in {delay_ms} ms", step(position)),
            EventKind::CompensationAdded {
                compensation_id, ..
            } => format!("{compensation_id} undoes {last_step}"),
            EventKind::CompensationExecuted {
                compensation_id, ..
            } => format!("{compensation_id} done ({last_step})"),
            EventKind::CompensationFailed {
                compensation_id,
                error,
                ..
            } => format!("{compensation_id} failed: {}", error.message),
            EventKind::WorkflowFailed { error } => error.message.clone(),
            EventKind::WorkflowCancelled { reason } => reason.clone().unwrap_or_default(),
            EventKind::WorkflowQuarantined { reason } => reason.clone(),
            _ => String::new(),
        };
        let position = event
            .kind
            .position()
            .map(|p| format!("#{p}"))
            .unwrap_or_default();
        let line = format!(
            "  {:>3}  {:>5}ms  {:<24} {position:>4}  {detail}",
            event.seq,
            event.timestamp - start,
            event.kind.type_name(),
        );
        println!("{}", line.trim_end());
    }
}
