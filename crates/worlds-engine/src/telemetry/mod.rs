//! Telemetry: world metrics and heartbeat views.
//!
//! * [`WorldMetrics`] — what `World::get_metrics()` reports: uptime, worker counts, run counts,
//!   throughput over a rolling window, and workload.
//! * [`HeartbeatEntry`] — what `World::get_heartbeats()` reports: the last sign of life of each
//!   worker and each running activity attempt, and whether it is considered dead.

pub(crate) mod heartbeat;
pub(crate) mod metrics;

pub use heartbeat::{HeartbeatEntry, HeartbeatKind};
pub use metrics::{Throughput, WorkerMetrics, WorkflowMetrics, WorldMetrics, THROUGHPUT_WINDOW_MS};
