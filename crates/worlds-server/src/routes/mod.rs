//! The routes, grouped by the scope they need (see [`router`](crate::router)).

pub(crate) mod health;
pub(crate) mod hooks;
pub(crate) mod keys;
pub(crate) mod metrics;
pub(crate) mod recovery;
pub(crate) mod runs;
pub(crate) mod schedules;
pub(crate) mod streams;
pub(crate) mod workers;

use std::sync::Arc;

use worlds_engine::World;

/// What every handler gets: the world it serves.
#[derive(Clone)]
pub(crate) struct Api {
    pub(crate) world: Arc<World>,
    /// The world's keys, when the server checks those (the `/v1/keys` routes manage them).
    pub(crate) keys: Option<Arc<crate::auth::ApiKeys>>,
    /// Turns of the DevKit writes to each run.
    pub(crate) devkit: Arc<crate::devkit::RunLocks>,
    /// Where the DevKit queue may deliver.
    pub(crate) callbacks: Arc<crate::devkit::delivery::CallbackOrigins>,
    /// Cancelled when the server shuts down: long polls answer at once.
    pub(crate) stopping: tokio_util::sync::CancellationToken,
}
