//! # worlds-demo
//!
//! The example workflows bundled with worlds-engine, defined once and used by both the runnable
//! examples (`cargo run --example quickstart`, `cargo run --example order_saga`) and
//! `worlds dev`, which runs many of them on a durable world and shows their progress.
//!
//! * [`shop`] — the order every demo works on and the steps (activities) of a small shop.
//! * [`checkout`] — the quickstart workflow: charge the card, wait, ship.
//! * [`saga`] — the order saga: its shipment fails and its compensations undo the rest.
//! * [`approval`] — an expense that waits for a person's decision through a webhook and
//!   streams its progress (`cargo run --example approval`).
//!
//! [`Demo`] builds all of them with one [`DemoOptions`] (how long they pause and work, and
//! whether their steps narrate on stdout), registers them on a world, and starts the demo's
//! runs in turn.
//!
//! ```
//! use worlds_demo::{Demo, DemoOptions};
//! use worlds_engine::prelude::*;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let demo = Demo::new(&DemoOptions::new().pause(std::time::Duration::from_millis(1)));
//! let world = World::new(WorldConfig::memory())?;
//! demo.register(&world)?;
//! world.start().await?;
//! let run = demo.start(&world, 0).await?;
//! assert_eq!(run.workflow, "checkout");
//! assert_eq!(run.handle.result().await?, "payment-A-1000 / parcel-A-1000");
//! world.shutdown().await?;
//! # Ok::<(), WorldError>(())
//! # }).unwrap();
//! ```

#![forbid(unsafe_code)]

pub mod approval;
pub mod checkout;
pub mod saga;
pub mod shop;

use std::time::Duration;

use worlds_engine::{Workflow, WorkflowHandle, WorkflowOptions, World, WorldError};

use crate::shop::{Order, Steps};

/// How the demo definitions behave: the length of their durable pauses, the time each step
/// spends "working", and whether steps print what they do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoOptions {
    /// Each durable sleep of a workflow, and the delay before a failed step is retried.
    pub pause: Duration,
    /// How long each step takes, standing for real work (I/O, a call to another system).
    pub work: Duration,
    /// If true, every step prints one line on stdout when it runs.
    pub narrate: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            pause: Duration::from_millis(250),
            work: Duration::ZERO,
            narrate: false,
        }
    }
}

impl DemoOptions {
    /// The defaults: 250 ms pauses, steps that take no time, silent steps.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the durable pause (and the retry delay of a failing step).
    pub fn pause(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }

    /// Sets how long each step takes.
    pub fn work(mut self, work: Duration) -> Self {
        self.work = work;
        self
    }

    /// Makes every step print a line on stdout when it runs.
    pub fn narrate(mut self, narrate: bool) -> Self {
        self.narrate = narrate;
        self
    }
}

/// Every bundled definition: the shop's steps and the demo workflows.
#[derive(Debug, Clone)]
pub struct Demo {
    /// The activities every workflow uses.
    pub steps: Steps,
    /// The quickstart workflow ([`checkout`]).
    pub checkout: Workflow<Order, String>,
    /// The order saga ([`saga`]).
    pub order_saga: Workflow<Order, String>,
}

/// A run started by [`Demo::start`].
#[derive(Debug, Clone)]
pub struct DemoRun {
    /// The name of the workflow it runs.
    pub workflow: &'static str,
    /// Its handle.
    pub handle: WorkflowHandle<String>,
}

impl Demo {
    /// Builds every definition with these options.
    pub fn new(options: &DemoOptions) -> Demo {
        let steps = Steps::new(options);
        Demo {
            checkout: checkout::workflow(&steps, options),
            order_saga: saga::workflow(&steps, options),
            steps,
        }
    }

    /// The demo workflows with their names, in the order [`start`](Self::start) takes turns.
    fn workflows(&self) -> [(&'static str, &Workflow<Order, String>); 2] {
        [
            (checkout::NAME, &self.checkout),
            (saga::NAME, &self.order_saga),
        ]
    }

    /// The names of the demo workflows, in the order [`start`](Self::start) takes turns.
    pub fn workflow_names(&self) -> Vec<&'static str> {
        self.workflows().iter().map(|(name, _)| *name).collect()
    }

    /// Registers every step and workflow on `world`. Call it before `world.start()`, so that a
    /// durable world can resume the demo's unfinished runs.
    pub fn register(&self, world: &World) -> Result<(), WorldError> {
        self.steps.register(world)?;
        for (_, workflow) in self.workflows() {
            world.register(workflow)?;
        }
        Ok(())
    }

    /// Starts the `n`-th demo run: the workflows take turns (checkout, then order saga), each on
    /// [`Order::sample(n)`](Order::sample). The workflow id is left to the engine, so starting
    /// the same `n` again, in the same world or a later one, starts another run.
    pub async fn start(&self, world: &World, n: usize) -> Result<DemoRun, WorldError> {
        let workflows = self.workflows();
        let (workflow, definition) = workflows[n % workflows.len()];
        let order = Order::sample(n);
        let handle = world
            .execute(definition, order, WorkflowOptions::new())
            .await?;
        Ok(DemoRun { workflow, handle })
    }
}
