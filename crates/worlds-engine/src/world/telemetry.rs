//! The world's logs and its metrics in Prometheus form.

use std::path::Path;

use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::World;
use crate::telemetry::logs::{LogEntry, LogError, LogQuery};

impl World {
    /// A [`tracing_subscriber::Layer`] that writes this world's events to its log files, as
    /// entries at or above [`LogsConfig::level`](crate::telemetry::logs::LogsConfig::level).
    /// Add it to the application's subscriber (see [`crate::telemetry::logs`]), or let
    /// `telemetry::init_logging` (feature `console-log`) install one. A world that writes no
    /// files (a memory world without a log directory) gives a layer that writes nothing.
    pub fn log_layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let logs = self.engine.logs();
        logs.layer().with_filter(logs.config().level.to_filter())
    }

    /// A new span that attributes the events inside it to this world. The engine runs the
    /// world's workers and background loops in one; instrument tasks of your own with it when
    /// a process runs several worlds.
    ///
    /// ```no_run
    /// use tracing::Instrument;
    /// # async fn demo(world: &worlds_engine::World) {
    /// async { tracing::info!(category = "system", "nightly import done") }
    ///     .instrument(world.log_span())
    ///     .await;
    /// # }
    /// ```
    pub fn log_span(&self) -> tracing::Span {
        self.engine.logs().span()
    }

    /// The directory this world writes its day files to, if it writes any.
    pub fn log_dir(&self) -> Option<&Path> {
        self.engine.logs().dir()
    }

    /// Writes the entries waiting for the next flush now.
    pub fn flush_logs(&self) -> Result<(), LogError> {
        self.engine.logs().flush().map(drop)
    }

    /// Entries of this world's log files that match `query`, oldest first (with a limit, the
    /// most recent ones). Reads the files, so entries still waiting to be flushed are not
    /// included (call [`flush_logs`](Self::flush_logs) first to see them); a world that writes
    /// no files has none.
    pub async fn query_logs(&self, query: LogQuery) -> Result<Vec<LogEntry>, LogError> {
        let Some(dir) = self.log_dir().map(Path::to_owned) else {
            return Ok(Vec::new());
        };
        tokio::task::spawn_blocking(move || crate::telemetry::logs::read_logs(&dir, &query))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }

    /// [`get_metrics`](Self::get_metrics) and the engine's step and run-duration statistics in
    /// the Prometheus text exposition format (version 0.0.4), for a `/metrics` endpoint. Serve
    /// it with the content type [`CONTENT_TYPE`](crate::telemetry::prometheus::CONTENT_TYPE);
    /// [`crate::telemetry::prometheus`] lists the series.
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    /// let world = World::new(WorldConfig::memory())?;
    /// let text = world.metrics_prometheus();
    /// assert!(text.contains("# TYPE worlds_runs_total counter"));
    /// # Ok::<(), WorldError>(())
    /// ```
    ///
    /// Needs the `prometheus` feature.
    #[cfg(feature = "prometheus")]
    pub fn metrics_prometheus(&self) -> String {
        crate::telemetry::prometheus::encode(&self.get_metrics(), self.engine.metrics())
    }

    #[cfg(feature = "console-log")]
    pub(crate) fn logs(&self) -> &std::sync::Arc<crate::telemetry::logs::Logs> {
        self.engine.logs()
    }
}
