//! Quickstart: run the `checkout` workflow on an in-memory world and print the run's history.
//!
//! The workflow and its steps are defined in `crates/worlds-demo/src/checkout.rs` and
//! `crates/worlds-demo/src/shop.rs` — two steps and a workflow that runs them with a durable
//! timer in between. `worlds dev` runs the same definitions on a durable world.
//!
//! Run it with `cargo run --example quickstart`.

use worlds_demo::shop::Order;
use worlds_demo::{Demo, DemoOptions};
use worlds_engine::prelude::*;

#[tokio::main]
async fn main() -> Result<(), WorldError> {
    // Steps do the real work: they are retried on failure and their results are recorded. The
    // workflow orchestrates them: after a crash it is replayed against its history, so recorded
    // steps are not run again.
    let demo = Demo::new(&DemoOptions::new().narrate(true));

    let world = World::new(WorldConfig::memory())?;
    demo.register(&world)?;
    world.start().await?;

    let order_id = "A-1001";
    let order = Order {
        id: order_id.into(),
        cents: 4200,
        sku: "SKU-42".into(),
        quantity: 2,
    };
    let run = world
        .execute(
            &demo.checkout,
            order,
            // One run per order: after a restart, the same call finds this run again.
            WorkflowOptions::new()
                .workflow_id(format!("order-{order_id}"))
                .on_conflict(OnConflict::UseExisting),
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
