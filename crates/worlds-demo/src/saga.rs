//! The order saga, `order-saga`: charge the card, reserve the inventory, wait for the
//! warehouse, create the shipment — which fails, the carrier being down — and then undo what
//! was done, newest first: release the inventory, then refund the card.
//!
//! The workflow registers a compensation after each step that needs undoing and runs under the
//! `compensate` failure strategy. When it fails, the engine runs the compensations in reverse
//! order, records each one in the run's history and ends the run `compensated`.

use worlds_engine::prelude::*;

use crate::shop::{Order, Steps};
use crate::DemoOptions;

/// The workflow's registered name.
pub const NAME: &str = "order-saga";

/// Defines `order-saga`, with the `compensate` failure strategy. Its durable wait for the
/// warehouse lasts `options.pause`.
pub fn workflow(steps: &Steps, options: &DemoOptions) -> Workflow<Order, String> {
    let steps = steps.clone();
    let pause = options.pause;
    worlds_engine::workflow(NAME, move |ctx: WorkflowContext, order: Order| {
        let steps = steps.clone();
        async move {
            let payment = ctx.run(&steps.charge, order.clone()).await?;
            // A compensation is workflow code: here, a closure that runs the refund step…
            let refund = steps.refund.clone();
            ctx.add_compensation(move |ctx| async move {
                ctx.run(&refund, payment).await?;
                Ok(())
            });

            let reservation = ctx.run(&steps.reserve, order.clone()).await?;
            // …or, for the common case, just "run this step with this input".
            ctx.add_compensation_step(&steps.release, reservation);

            ctx.sleep(pause).await?; // the warehouse packs the parcel
            let parcel = ctx.run(&steps.create_shipment, order).await?;
            Ok::<_, WorkflowError>(parcel)
        }
    })
    .with_options(WorkflowOptions::new().failure_strategy(FailureStrategy::Compensate))
}
