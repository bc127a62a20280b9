//! The workers of the process serving the API.

use serde::{Deserialize, Serialize};
use worlds_engine::WorkerInfo;

/// The answer of `GET /v1/workers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Workers {
    /// Workers alive now: id, status (`idle`, `busy`…), current task, last heartbeat (ms
    /// since the epoch), tasks completed, task queue.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub live: Vec<WorkerInfo>,
    /// Workers declared dead lately (no heartbeat within the timeout), with the task each held.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub dead: Vec<WorkerInfo>,
}
