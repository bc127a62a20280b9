//! The Workflow DevKit's World, served: the routes under `/v1/devkit` that the
//! `@worlds-engine/devkit-world` package (in `clients/devkit-world`) calls, so a DevKit app
//! keeps its runs, steps, hooks, events, streams and queue in a worlds-engine server.
//!
//! Nothing here is a store of its own. A DevKit run is an engine run driven from outside
//! ([`worlds_engine::ExternalRuns`]): the app's runtime executes the workflow code and records
//! what happens as DevKit events (`event.rs`), each one an atomic write of the engine events
//! with that meaning (`plan.rs`), checked by the engine's rules. The DevKit's event log and
//! records are read back off the run (`log.rs`, `reads.rs`). So a DevKit run is kept on every
//! backend, listed by `worlds runs list`, and drawn by the dashboard with its steps, hooks and
//! streams like any run. Queue messages are runs of a built-in workflow that delivers them to
//! the app (`queue.rs`, `delivery.rs`).
//!
//! | route | DevKit call |
//! |---|---|
//! | `POST /v1/devkit/events` | `events.create` (every write) |
//! | `GET /v1/devkit/runs`, `GET /v1/devkit/runs/{id}`, `POST /v1/devkit/runs/{id}/attributes` | `runs.list`, `get`, `experimentalSetAttributes` |
//! | `GET /v1/devkit/runs/{id}/steps`, `GET /v1/devkit/runs/{id}/steps/{step}` | `steps.list`, `get` |
//! | `GET /v1/devkit/runs/{id}/events`, `GET /v1/devkit/runs/{id}/events/{event}`, `GET /v1/devkit/events?correlationId=` | `events.list`, `get`, `listByCorrelationId` |
//! | `GET /v1/devkit/hooks`, `GET /v1/devkit/hooks/{hook}`, `POST /v1/devkit/hooks/by-token` | `hooks.list`, `get`, `getByToken` |
//! | `POST /v1/devkit/queue` | `queue` |
//!
//! Streams use the run stream routes every run has (`/v1/runs/{id}/streams/{name}`: write,
//! write several chunks, read pages of chunks, read live, close).

pub(crate) mod create;
pub(crate) mod delivery;
pub(crate) mod event;
pub(crate) mod log;
pub(crate) mod plan;
pub(crate) mod queue;
pub(crate) mod reads;

use worlds_engine::hooks::WebhookSignature;
use worlds_engine::{World, WorldError};

pub use crate::state::LOOPBACK;
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
