//! The world's metrics in the Prometheus text exposition format (version 0.0.4), encoded with
//! `prometheus-client`.
//!
//! | series | type | what |
//! | --- | --- | --- |
//! | `worlds_uptime_seconds` | gauge | time since the world started, 0 while stopped |
//! | `worlds_workers{state="idle"\|"busy"}` | gauge | workers by state (their sum is the total) |
//! | `worlds_workload_ratio` | gauge | busy workers / workers, 0 to 1 |
//! | `worlds_runs_in_flight{status="queued"\|"running"}` | gauge | runs waiting to start, and started and not finished |
//! | `worlds_runs_total{status="completed"\|"failed"\|"cancelled"\|"compensated"}` | counter | runs that reached the status since the world was created |
//! | `worlds_runs_completed_last_minute` | gauge | runs completed in the last 60 s |
//! | `worlds_steps_total{outcome="completed"\|"failed"}` | counter | steps that completed, or failed with no retry left |
//! | `worlds_step_attempts_total` | counter | step attempts started (retries included) |
//! | `worlds_runs_removed_total` | counter | finished runs removed by this process's retention sweeps |
//! | `worlds_events_removed_total` | counter | events of the histories those sweeps removed |
//! | `worlds_run_duration_seconds{status="completed"\|"failed"\|"cancelled"}` | histogram | from acceptance to the final status, for runs accepted by this process |
//!
//! A failed run that is then compensated counts in both `failed` and `compensated`. Runs taken
//! over from the store on start count in the totals from then on, and not in the histogram.
//!
//! ```
//! # async fn serve(world: std::sync::Arc<worlds_engine::World>) {
//! use worlds_engine::telemetry::prometheus::CONTENT_TYPE;
//! let app: axum::Router = axum::Router::new().route(
//!     "/metrics",
//!     axum::routing::get(move || async move {
//!         ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], world.metrics_prometheus())
//!     }),
//! );
//! # let _ = app;
//! # }
//! ```

use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::{Registry, Unit};

use super::metrics::{MetricsRecorder, StatusLabel};
use super::WorldMetrics;

/// The content type of the text [`World::metrics_prometheus`](crate::World::metrics_prometheus)
/// returns.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

type Labelled<M> = Family<StatusLabel, M>;
type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

fn labelled_gauge(values: &[(&'static str, &'static str, f64)]) -> Labelled<FloatGauge> {
    let family = Labelled::<FloatGauge>::default();
    for (key, value, v) in values {
        family.get_or_create(&[(*key, *value)]).set(*v);
    }
    family
}

fn labelled_counter(values: &[(&'static str, &'static str, u64)]) -> Labelled<Counter> {
    let family = Labelled::<Counter>::default();
    for (key, value, v) in values {
        family.get_or_create(&[(*key, *value)]).inc_by(*v);
    }
    family
}

/// Encodes a metrics snapshot and the recorder's extra statistics.
pub(crate) fn encode(metrics: &WorldMetrics, recorder: &MetricsRecorder) -> String {
    let details = recorder.details();
    let mut registry = Registry::with_prefix("worlds");
    registry.register_with_unit(
        "uptime",
        "Time since the world started, 0 while it is stopped",
        Unit::Seconds,
        ConstGauge::new(metrics.uptime as f64 / 1_000.0),
    );
    registry.register(
        "workers",
        "Workers by state",
        labelled_gauge(&[
            ("state", "idle", metrics.workers.idle as f64),
            ("state", "busy", metrics.workers.busy as f64),
        ]),
    );
    registry.register(
        "workload_ratio",
        "Busy workers divided by workers",
        ConstGauge::new(metrics.workload),
    );
    let flows = &metrics.workflows;
    registry.register(
        "runs_in_flight",
        "Runs waiting to start (queued) and started but not finished (running)",
        labelled_gauge(&[
            ("status", "queued", flows.queued as f64),
            ("status", "running", flows.running as f64),
        ]),
    );
    registry.register(
        "runs",
        "Runs that reached a final status since the world was created",
        labelled_counter(&[
            ("status", "completed", flows.completed),
            ("status", "failed", flows.failed),
            ("status", "cancelled", details.cancelled),
            ("status", "compensated", details.compensated),
        ]),
    );
    registry.register(
        "runs_completed_last_minute",
        "Runs completed in the last 60 seconds",
        ConstGauge::new(metrics.throughput.per_minute as f64),
    );
    registry.register(
        "steps",
        "Steps that completed, or failed with no retry left",
        labelled_counter(&[
            ("outcome", "completed", details.steps_completed),
            ("outcome", "failed", details.steps_failed),
        ]),
    );
    registry.register(
        "step_attempts",
        "Step attempts started, retries included",
        ConstCounter::new(details.step_attempts),
    );
    registry.register(
        "runs_removed",
        "Finished runs removed by retention sweeps",
        ConstCounter::new(details.runs_removed),
    );
    registry.register(
        "events_removed",
        "Events of the histories retention sweeps removed",
        ConstCounter::new(details.events_removed),
    );
    registry.register_with_unit(
        "run_duration",
        "Time from a run's acceptance to its final status",
        Unit::Seconds,
        recorder.run_durations().clone(),
    );
    let mut text = String::new();
    // Writing to a String cannot fail, and every name and label here is valid.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry);
    text
}
