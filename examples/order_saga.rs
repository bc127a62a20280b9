//! Order saga: charge the card, reserve inventory, create the shipment — and when shipping
//! fails, undo what was done, newest first: release the inventory, then refund the card.
//!
//! The workflow registers a compensation after each step that needs undoing and runs under the
//! `compensate` failure strategy. When it fails, the engine runs the compensations in reverse
//! order, records each one in the run's history and ends the run `compensated`.
//!
//! Run it with `cargo run --example order_saga`.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use worlds_engine::prelude::*;
use worlds_engine::{Event, EventKind};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: String,
    cents: u64,
    sku: String,
    quantity: u32,
}

#[tokio::main]
async fn main() -> Result<(), WorldError> {
    // The forward steps.
    let charge = activity(
        "charge-card",
        |_ctx: ActivityContext, order: Order| async move {
            println!(
                "  → charge-card        {} cents for {}",
                order.cents, order.id
            );
            Ok::<_, StepError>(format!("pay-{}", order.id))
        },
    );
    let reserve = activity(
        "reserve-inventory",
        |_ctx: ActivityContext, order: Order| async move {
            println!("  → reserve-inventory  {} × {}", order.quantity, order.sku);
            Ok::<_, StepError>(format!("res-{}", order.id))
        },
    );
    // The carrier is down. Two quick attempts, then the step fails for good.
    let ship = activity(
        "create-shipment",
        |ctx: ActivityContext, order: Order| async move {
            println!(
                "  → create-shipment    {} (attempt {}): carrier unavailable",
                order.id,
                ctx.attempt()
            );
            Err::<String, _>(StepError::msg("carrier unavailable"))
        },
    )
    .with_options(
        ActivityOptions::new().retry(
            RetryConfig::new()
                .max_attempts(2)
                .initial_interval(Duration::from_millis(300))
                .max_interval(Duration::from_millis(300)),
        ),
    );

    // The undo steps.
    let refund = activity(
        "refund-card",
        |_ctx: ActivityContext, payment: String| async move {
            println!("  ↩ refund-card        {payment}");
            Ok::<_, StepError>(())
        },
    );
    let release = activity(
        "release-inventory",
        |_ctx: ActivityContext, reservation: String| async move {
            println!("  ↩ release-inventory  {reservation}");
            Ok::<_, StepError>(())
        },
    );

    let steps = (
        charge.clone(),
        reserve.clone(),
        ship.clone(),
        refund.clone(),
        release.clone(),
    );
    let order_saga = workflow("order-saga", move |ctx: WorkflowContext, order: Order| {
        let (charge, reserve, ship, refund, release) = steps.clone();
        async move {
            let payment = ctx.run(&charge, order.clone()).await?;
            // A compensation is workflow code: here, a closure that runs the refund step…
            ctx.add_compensation(move |ctx| async move {
                ctx.run(&refund, payment).await?;
                Ok(())
            });

            let reservation = ctx.run(&reserve, order.clone()).await?;
            // …or, for the common case, just "run this step with this input".
            ctx.add_compensation_step(&release, reservation);

            let parcel = ctx.run(&ship, order).await?;
            Ok::<_, WorkflowError>(parcel)
        }
    })
    .with_options(WorkflowOptions::new().failure_strategy(FailureStrategy::Compensate));

    let world = World::new(WorldConfig::memory())?;
    world
        .register(&charge)?
        .register(&reserve)?
        .register(&ship)?
        .register(&refund)?
        .register(&release)?
        .register(&order_saga)?;
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
            &order_saga,
            order,
            WorkflowOptions::new().workflow_id("order-A-1001"),
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
            EventKind::WorkflowQueued { name, .. } => name.clone(),
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
