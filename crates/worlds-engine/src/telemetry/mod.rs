//! Telemetry: world metrics, heartbeat views, logs, and metrics in Prometheus form.
//!
//! * [`WorldMetrics`] — what `World::get_metrics()` reports: uptime, worker counts, run counts,
//!   throughput over a rolling window, and workload.
//! * [`HeartbeatEntry`] — what `World::workers().heartbeats()` reports: the last sign of life of each
//!   worker and each running activity attempt, and whether it is considered dead.
//! * [`logs`] — the world's tracing events as entries, on the console and in daily NDJSON
//!   files, and read back with filters.
//! * `prometheus` — `World::metrics_prometheus()`: the metrics in the Prometheus text format
//!   (feature `prometheus`).

pub(crate) mod heartbeat;
pub mod logs;
pub(crate) mod metrics;
#[cfg(feature = "prometheus")]
pub mod prometheus;

pub use heartbeat::{HeartbeatEntry, HeartbeatKind};
pub use metrics::{
    RunLatency, Throughput, WorkerMetrics, WorkflowMetrics, WorldMetrics, RUN_LATENCY_BOUNDS_MS,
    THROUGHPUT_WINDOW_MS,
};
