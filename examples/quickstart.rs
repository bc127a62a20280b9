//! Quickstart: define two steps and a workflow, run it on an in-memory world, and print the
//! run's history.
//!
//! Run it with `cargo run --example quickstart`.

use serde::{Deserialize, Serialize};
use worlds_engine::prelude::*;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: String,
    cents: u64,
}

#[tokio::main]
async fn main() -> Result<(), WorldError> {
    // Steps do the real work. They are retried on failure and their results are recorded.
    let charge = activity(
        "charge-card",
        |ctx: ActivityContext, order: Order| async move {
            println!(
                "  charging {} cents for {} (attempt {})",
                order.cents,
                order.id,
                ctx.attempt()
            );
            Ok::<_, StepError>(format!("payment-{}", order.id))
        },
    )
    .with_options(ActivityOptions::new().retry(retry_patterns::api()));

    let ship = activity("ship", |_ctx: ActivityContext, order: Order| async move {
        Ok::<_, StepError>(format!("parcel-{}", order.id))
    });

    // The workflow orchestrates steps. After a crash it is replayed against its history, so
    // recorded steps are not run again.
    let (charge_step, ship_step) = (charge.clone(), ship.clone());
    let checkout = workflow("checkout", move |ctx: WorkflowContext, order: Order| {
        let (charge, ship) = (charge_step.clone(), ship_step.clone());
        async move {
            let payment = ctx.run(&charge, order.clone()).await?;
            ctx.sleep("250ms").await?; // a durable timer
            let parcel = ctx.run(&ship, order).await?;
            Ok::<_, WorkflowError>(format!("{payment} / {parcel}"))
        }
    });

    let world = World::new(WorldConfig::memory())?;
    world
        .register(&charge)?
        .register(&ship)?
        .register(&checkout)?;
    world.start().await?;

    let order = Order {
        id: "A-1001".into(),
        cents: 4200,
    };
    let run = world
        .execute(
            &checkout,
            order,
            WorkflowOptions::new().workflow_id("order-A-1001"),
        )
        .await?;
    println!("started run {} (workflow id {})", run.id, run.workflow_id);
    let receipt = run.result().await?;
    println!("result: {receipt}");

    let state = run.query().await?;
    println!("history of {} ({}):", state.id, state.status);
    for event in &state.history {
        let position = event
            .kind
            .position()
            .map(|p| format!("#{p}"))
            .unwrap_or_default();
        println!(
            "  {:>3}  {:<24} {position}",
            event.seq,
            event.kind.type_name()
        );
    }

    world.shutdown().await?;
    Ok(())
}
