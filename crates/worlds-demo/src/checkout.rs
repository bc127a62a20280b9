//! The quickstart workflow, `checkout`: charge the card, wait, ship.
//!
//! The workflow only orchestrates: the work is done by the steps of [`Steps`], and the wait is
//! a durable timer, so a run that waits holds no worker, survives a restart, and after one
//! carries on without charging the card again.

use worlds_engine::prelude::*;

use crate::shop::{Order, Steps};
use crate::DemoOptions;

/// The workflow's registered name.
pub const NAME: &str = "checkout";

/// Defines `checkout`: `charge-card`, a durable sleep of `options.pause`, then `ship`. Its
/// result is `"{payment} / {parcel}"`.
pub fn workflow(steps: &Steps, options: &DemoOptions) -> Workflow<Order, String> {
    let (charge, ship) = (steps.charge.clone(), steps.ship.clone());
    let pause = options.pause;
    worlds_engine::workflow(NAME, move |ctx: WorkflowContext, order: Order| {
        let (charge, ship) = (charge.clone(), ship.clone());
        async move {
            // Recorded once: after a restart this returns the recorded payment at once.
            let payment = ctx.run(&charge, order.clone()).await?;
            ctx.sleep(pause).await?; // a durable timer
            let parcel = ctx.run(&ship, order).await?;
            Ok::<_, WorkflowError>(format!("{payment} / {parcel}"))
        }
    })
}
