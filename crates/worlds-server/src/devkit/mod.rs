//! The Workflow DevKit's World, served: the routes under `/v1/devkit` that the
//! `@worlds-engine/devkit-world` package (in `clients/devkit-world`) calls, so a DevKit app
//! keeps its runs, steps, hooks, events, streams and queue in a worlds-engine server.
//!
//! Nothing here is a store of its own. A DevKit run is an engine run driven from outside
//! ([`worlds_engine::ExternalRuns`]): the app's runtime executes the workflow code, and each
//! thing it records — a step created, an attempt started, a result, a wait, a hook payload —
//! becomes the engine event with that meaning (`writes.rs` has the table), checked by the
//! engine's rules. The DevKit's records are read back off the run (`records.rs`). So a DevKit
//! run is kept on every backend, listed by `worlds runs list`, and drawn by the dashboard
//! with its steps, hooks and streams like any run. Queue messages are runs of a built-in
//! workflow that delivers them to the app (`delivery.rs`).
//!
//! | route | DevKit call |
//! |---|---|
//! | `POST /v1/devkit/runs`, `GET /v1/devkit/runs`, `GET`/`PATCH /v1/devkit/runs/{id}`, `POST /v1/devkit/runs/{id}/cancel` | `runs.create`, `list`, `get`, `update`, `cancel` |
//! | `POST`/`GET /v1/devkit/runs/{id}/steps`, `GET`/`PATCH /v1/devkit/runs/{id}/steps/{step}`, `GET /v1/devkit/steps/{step}` | `steps.create`, `list`, `get`, `update` |
//! | `POST`/`GET /v1/devkit/runs/{id}/events`, `GET /v1/devkit/events?correlationId=` | `events.create`, `list`, `listByCorrelationId` |
//! | `POST /v1/devkit/runs/{id}/hooks`, `GET /v1/devkit/hooks`, `GET /v1/devkit/hooks/{hook}`, `POST /v1/devkit/hooks/by-token`, `POST /v1/devkit/hooks/{hook}/dispose` | `hooks.create`, `list`, `get`, `getByToken`, `dispose` |
//! | `POST /v1/devkit/queue` | `queue` |
//!
//! Streams use the run stream routes every run has (`/v1/runs/{id}/streams/{name}`: write,
//! close, read live).

pub(crate) mod create;
pub(crate) mod delivery;
pub(crate) mod log;
pub(crate) mod records;
pub(crate) mod routes;
pub(crate) mod writes;

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use worlds_engine::hooks::WebhookSignature;
use worlds_engine::{World, WorldError};

pub use delivery::{retry_policy, DELIVERY_WORKFLOW, ROUNDS};

/// Registers the workflow that delivers DevKit queue messages to apps, signing each delivery
/// with `signature` (a Standard Webhooks secret shared with the app, e.g.
/// `WebhookSignature::standard("whsec_…")`). Without it, `POST /v1/devkit/queue` answers 503.
///
/// ```
/// # fn demo(world: &worlds_engine::World) -> Result<(), worlds_engine::WorldError> {
/// use worlds_engine::hooks::WebhookSignature;
/// let secret = WebhookSignature::generate_standard_secret();
/// worlds_server::devkit::register_delivery(world, WebhookSignature::standard(secret))?;
/// # Ok(())
/// # }
/// ```
pub fn register_delivery(world: &World, signature: WebhookSignature) -> Result<(), WorldError> {
    signature.validate("delivery secret")?;
    world.register(delivery::workflow(signature))?;
    Ok(())
}

/// Locks that make the DevKit writes to one run take turns in this server, so two of them do
/// not both pick the same free position. (Servers sharing a database still may; the engine
/// refuses the second and the write is planned again, see `routes::record`.)
pub(crate) struct RunLocks {
    stripes: Vec<tokio::sync::Mutex<()>>,
}

impl RunLocks {
    const STRIPES: usize = 64;

    pub(crate) fn new() -> Arc<Self> {
        Arc::new(RunLocks {
            stripes: (0..Self::STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        })
    }

    /// The lock of this run (shared with the runs whose ids hash alike).
    pub(crate) async fn lock(&self, run_id: &str) -> tokio::sync::MutexGuard<'_, ()> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        run_id.hash(&mut hasher);
        let stripe = (hasher.finish() % Self::STRIPES as u64) as usize;
        self.stripes[stripe].lock().await
    }
}
