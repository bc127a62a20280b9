//! Macros: a workflow and its steps written as plain `async fn`s with `#[workflow]` and
//! `#[step]`, the steps reaching the application's resources (a stock database, a payment
//! gateway) through `#[resource]` parameters instead of globals.
//!
//! * `#[step]` makes calling the function from a workflow a durable step: its body runs once,
//!   is retried under the attribute's options, and its result is recorded and replayed.
//! * `#[workflow]` makes the function a definition: `world.register(&place_order)` and
//!   `world.execute(&place_order, ..)`. Its name is its path, `macros::place_order`.
//! * `world.provide(value)` registers a resource by type; a `#[resource] db: &Stock` parameter
//!   receives it, and callers do not pass it.
//!
//! Run it with `cargo run --example macros`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use worlds_engine::prelude::*;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: String,
    sku: String,
    quantity: u32,
    cents: u64,
}

/// Stands in for a database pool.
struct Stock {
    units: Mutex<HashMap<String, u32>>,
}

/// Stands in for an HTTP client of a payment provider that is busy on the first call.
#[derive(Default)]
struct Gateway {
    calls: AtomicU32,
}

/// Takes units out of stock; fails for good when there are not enough.
#[step(retry = database, timeout = "5s")]
async fn reserve(#[resource] stock: &Stock, sku: String, quantity: u32) -> Result<u32, StepError> {
    let mut units = stock.units.lock().expect("stock lock poisoned");
    let left = units.get(&sku).copied().unwrap_or(0);
    if left < quantity {
        return Err(StepError::fatal(format!("only {left} of {sku} left")));
    }
    units.insert(sku.clone(), left - quantity);
    println!("  reserve: {quantity} x {sku}, {} left", left - quantity);
    Ok(left - quantity)
}

/// Charges the card; the gateway refuses the first attempt, the retry goes through.
#[step(
    retry = RetryConfig::new().initial_interval(Duration::from_millis(200)),
    max_attempts = 3,
    timeout = "10s"
)]
async fn charge(#[resource] gateway: &Gateway, order: Order) -> Result<String, StepError> {
    let call = gateway.calls.fetch_add(1, Ordering::SeqCst) + 1;
    if call == 1 {
        println!("  charge: attempt {call} — gateway busy, will retry");
        return Err(StepError::msg("payment gateway busy"));
    }
    println!("  charge: attempt {call} — {} cents", order.cents);
    Ok(format!("pay-{}", order.id))
}

#[step]
async fn confirm(order_id: String, payment: String) -> Result<String, StepError> {
    println!("  confirm: order {order_id} paid by {payment}");
    Ok(format!("order {order_id} confirmed ({payment})"))
}

/// Reserve, charge, wait a moment (durably), confirm.
#[workflow(timeout = "1h")]
async fn place_order(ctx: WorkflowContext, order: Order) -> Result<String, WorkflowError> {
    reserve(order.sku.clone(), order.quantity).await?;
    let payment = charge(order.clone()).await?;
    ctx.sleep("100ms").await?;
    Ok(confirm(order.id, payment).await?)
}

#[tokio::main]
async fn main() -> Result<(), WorldError> {
    let world = World::new(WorldConfig::memory())?;
    world
        .provide(Stock {
            units: Mutex::new(HashMap::from([("SKU-42".to_owned(), 10)])),
        })
        .provide(Gateway::default());
    world.register(&place_order)?;
    world.start().await?;

    let order = Order {
        id: "A-1001".into(),
        sku: "SKU-42".into(),
        quantity: 2,
        cents: 4200,
    };
    println!("running {} for order {}", place_order.name(), order.id);
    // One run per order: the workflow id comes from the order, so running this again after a
    // restart finds the same run instead of placing the order twice.
    let options = WorkflowOptions::new()
        .workflow_id(format!("place-order-{}", order.id))
        .on_conflict(OnConflict::UseExisting);
    let run = world.execute(&place_order, order, options).await?;
    println!("result: {}", run.result().await?);

    let state = run.query().await?;
    println!("steps of {} ({}):", state.id, state.status);
    for step in &state.activities {
        println!(
            "  #{} {:<18} {} attempt(s)",
            step.position, step.name, step.attempt
        );
    }

    world.shutdown().await?;
    Ok(())
}
