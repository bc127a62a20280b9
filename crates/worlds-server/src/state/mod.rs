//! The state every handler gets ([`Api`]): the world it serves, and what the routes keep
//! between requests. It lies below every module of handlers (`routes`, `devkit`, `dashboard`),
//! which all use it; the route list that names the handlers sits above them, in the crate root.

mod devkit;

use std::sync::Arc;

use worlds_engine::World;

pub use devkit::LOOPBACK;
pub(crate) use devkit::{CallbackOrigins, RunLocks};

/// What every handler gets: the world it serves.
#[derive(Clone)]
pub(crate) struct Api {
    pub(crate) world: Arc<World>,
    /// The world's keys, when the server checks those (the `/v1/keys` routes manage them).
    pub(crate) keys: Option<Arc<crate::auth::ApiKeys>>,
    /// Turns of the DevKit writes to each run.
    pub(crate) devkit: Arc<RunLocks>,
    /// Where the DevKit queue may deliver.
    pub(crate) callbacks: Arc<CallbackOrigins>,
    /// Cancelled when the server shuts down: long polls answer at once.
    pub(crate) stopping: tokio_util::sync::CancellationToken,
}
