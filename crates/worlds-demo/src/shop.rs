//! A small shop: the order every demo workflow works on, and the steps (activities) that do the
//! shop's real work.
//!
//! Steps are where side effects belong. The engine records each step's result once it
//! completes; a workflow replayed after a restart gets the recorded result back instead of
//! running the step again. A step may still run more than once if the process dies while it is
//! running, so real steps are written to be idempotent (here they only print and wait).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use worlds_engine::prelude::*;

use crate::DemoOptions;

/// A customer's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// The order number, such as `A-1001`.
    pub id: String,
    /// The amount to charge, in cents.
    pub cents: u64,
    /// The article ordered.
    pub sku: String,
    /// How many of it.
    pub quantity: u32,
}

impl Order {
    /// The `n`-th sample order: `A-{1000 + n}`, with an amount, article and quantity that vary
    /// with `n`.
    ///
    /// ```
    /// let order = worlds_demo::shop::Order::sample(1);
    /// assert_eq!(order.id, "A-1001");
    /// ```
    pub fn sample(n: usize) -> Order {
        let n64 = n as u64;
        Order {
            id: format!("A-{}", 1000 + n64),
            cents: 1_000 + (n64 * 1_337) % 9_000,
            sku: format!("SKU-{}", 10 + n % 90),
            quantity: 1 + (n % 3) as u32,
        }
    }
}

/// The shop's steps. The checkout and the order saga share `charge`.
#[derive(Debug, Clone)]
pub struct Steps {
    /// `charge-card`: charges the order's amount; returns a payment reference.
    pub charge: Activity<Order, String>,
    /// `ship`: hands the parcel to the carrier; returns a parcel reference.
    pub ship: Activity<Order, String>,
    /// `reserve-inventory`: sets the articles aside; returns a reservation reference.
    pub reserve: Activity<Order, String>,
    /// `create-shipment`: books the carrier, which is down: every attempt fails, and after two
    /// attempts the step fails for good.
    pub create_shipment: Activity<Order, String>,
    /// `refund-card`: refunds a payment (undoes `charge-card`).
    pub refund: Activity<String, ()>,
    /// `release-inventory`: releases a reservation (undoes `reserve-inventory`).
    pub release: Activity<String, ()>,
}

impl Steps {
    /// Defines the steps with these options.
    pub fn new(options: &DemoOptions) -> Steps {
        let work = Work {
            time: options.work,
            narrate: options.narrate,
        };
        Steps {
            charge: activity("charge-card", move |ctx: ActivityContext, order: Order| {
                let line = format!(
                    "→ charge-card        {} cents for {} (attempt {})",
                    order.cents,
                    order.id,
                    ctx.attempt()
                );
                async move {
                    work.done(line).await;
                    Ok::<_, StepError>(format!("payment-{}", order.id))
                }
            })
            .with_options(ActivityOptions::new().retry(retry_patterns::api())),
            ship: activity("ship", move |_ctx: ActivityContext, order: Order| {
                let line = format!("→ ship               {} × {}", order.quantity, order.sku);
                async move {
                    work.done(line).await;
                    Ok::<_, StepError>(format!("parcel-{}", order.id))
                }
            }),
            reserve: activity(
                "reserve-inventory",
                move |_ctx: ActivityContext, order: Order| {
                    let line = format!("→ reserve-inventory  {} × {}", order.quantity, order.sku);
                    async move {
                        work.done(line).await;
                        Ok::<_, StepError>(format!("res-{}", order.id))
                    }
                },
            ),
            create_shipment: activity(
                "create-shipment",
                move |ctx: ActivityContext, order: Order| {
                    let line = format!(
                        "→ create-shipment    {} (attempt {}): carrier unavailable",
                        order.id,
                        ctx.attempt()
                    );
                    async move {
                        work.done(line).await;
                        Err::<String, _>(StepError::msg("carrier unavailable"))
                    }
                },
            )
            .with_options(
                ActivityOptions::new().retry(
                    RetryConfig::new()
                        .max_attempts(2)
                        .initial_interval(options.pause)
                        .max_interval(options.pause),
                ),
            ),
            refund: activity(
                "refund-card",
                move |_ctx: ActivityContext, payment: String| {
                    let line = format!("↩ refund-card        {payment}");
                    async move {
                        work.done(line).await;
                        Ok::<_, StepError>(())
                    }
                },
            ),
            release: activity(
                "release-inventory",
                move |_ctx: ActivityContext, reservation: String| {
                    let line = format!("↩ release-inventory  {reservation}");
                    async move {
                        work.done(line).await;
                        Ok::<_, StepError>(())
                    }
                },
            ),
        }
    }

    /// Registers every step on `world`.
    pub fn register(&self, world: &World) -> Result<(), WorldError> {
        world
            .register(&self.charge)?
            .register(&self.ship)?
            .register(&self.reserve)?
            .register(&self.create_shipment)?
            .register(&self.refund)?
            .register(&self.release)?;
        Ok(())
    }
}

/// What every step does besides its result: say what it does, and take its time.
#[derive(Debug, Clone, Copy)]
struct Work {
    time: Duration,
    narrate: bool,
}

impl Work {
    /// Prints `line` if narrating, then waits the step's working time.
    async fn done(self, line: String) {
        if self.narrate {
            println!("  {line}");
        }
        if !self.time.is_zero() {
            tokio::time::sleep(self.time).await;
        }
    }
}
