//! The world's logs ([`WorldLogs`]) and its metrics in Prometheus form.

use std::path::Path;

use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::World;
use crate::telemetry::logs::{LogEntry, LogError, LogQuery};

/// The world's logs, from [`World::logs`]: the tracing layer and span that route events to
/// the world's files, and reading those files back.
#[derive(Debug, Clone, Copy)]
pub struct WorldLogs<'w> {
    world: &'w World,
}

impl World {
    /// The world's logs (see [`crate::telemetry::logs`]).
    pub fn logs(&self) -> WorldLogs<'_> {
        WorldLogs { world: self }
    }
}

impl WorldLogs<'_> {
    /// A [`tracing_subscriber::Layer`] that writes this world's events to its log files, as
    /// entries at or above [`LogsConfig::level`](crate::telemetry::logs::LogsConfig::level).
    /// Add it to the application's subscriber (see [`crate::telemetry::logs`]), or let
    /// [`init_logging`](Self::init) (feature `console-log`) install one. A world that writes no
    /// files (a memory world without a log directory) gives a layer that writes nothing.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let logs = self.world.engine.logs();
        logs.layer().with_filter(logs.config().level.to_filter())
    }

    /// Installs a process-wide subscriber that writes this world's events to its log files
    /// and, if [`LogsConfig::console`](crate::telemetry::logs::LogsConfig::console), every event
    /// at or above the world's minimum level to standard error, time-stamped by the world's
    /// clock. The console lines are coloured only when standard error is a terminal and the
    /// `NO_COLOR` environment variable is unset or empty: a pipe or a file gets plain text.
    ///
    /// Returns false, and installs nothing, if the process already has a global subscriber: add
    /// [`layer`](Self::layer) to that one instead. Call it before
    /// [`World::start`], so that the world's workers run inside its span from the
    /// beginning.
    ///
    /// ```no_run
    /// use worlds_engine::prelude::*;
    /// # fn demo() -> Result<(), WorldError> {
    /// let world = World::new(WorldConfig::default())?;
    /// world.logs().init();
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "console-log")]
    pub fn init(&self) -> bool {
        use tracing_subscriber::layer::SubscriberExt;

        let logs = self.world.engine.logs();
        let console = logs.config().console.then(|| {
            use std::io::IsTerminal;
            let colour = console_colour(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            );
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(colour)
                .with_timer(crate::telemetry::logs::ClockTime::new(logs.clock().clone()))
                .with_filter(logs.config().level.to_filter())
        });
        let subscriber = tracing_subscriber::registry()
            .with(console)
            .with(self.layer());
        tracing::subscriber::set_global_default(subscriber).is_ok()
    }

    /// A new span that attributes the events inside it to this world. The engine runs the
    /// world's workers and background loops in one; instrument tasks of your own with it when
    /// a process runs several worlds.
    ///
    /// ```no_run
    /// use tracing::Instrument;
    /// # async fn demo(world: &worlds_engine::World) {
    /// async { tracing::info!(category = "system", "nightly import done") }
    ///     .instrument(world.logs().span())
    ///     .await;
    /// # }
    /// ```
    pub fn span(&self) -> tracing::Span {
        self.world.engine.logs().span()
    }

    /// The directory this world writes its day files to, if it writes any.
    pub fn dir(&self) -> Option<&Path> {
        self.world.engine.logs().dir()
    }

    /// Writes the entries waiting for the next flush now.
    pub fn flush(&self) -> Result<(), LogError> {
        self.world.engine.logs().flush().map(drop)
    }

    /// Entries of this world's logs that match `query`, oldest first (with a limit, the most
    /// recent ones): from its log store if it has one (a PostgreSQL world: every member's
    /// entries), else from its files. Entries still waiting to be flushed are not included
    /// (call [`flush`](Self::flush) first to see them); a world that writes no files and has
    /// no log store has none.
    pub async fn query(&self, query: LogQuery) -> Result<Vec<LogEntry>, LogError> {
        if let Some(store) = self.world.engine.logs().store() {
            return store.query(&query).await;
        }
        let Some(dir) = self.dir().map(Path::to_owned) else {
            return Ok(Vec::new());
        };
        tokio::task::spawn_blocking(move || crate::telemetry::logs::read_logs(&dir, &query))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }
}

impl World {
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
}

/// Whether console log lines are coloured: only on a terminal, and never when `NO_COLOR` is set
/// to anything but the empty string (<https://no-color.org>).
#[cfg(feature = "console-log")]
fn console_colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(all(test, feature = "console-log"))]
mod tests {
    use std::ffi::OsStr;

    use super::console_colour;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(console_colour(true, None));
        assert!(console_colour(true, Some(OsStr::new(""))));
        assert!(!console_colour(true, Some(OsStr::new("1"))));
        assert!(!console_colour(false, None));
    }
}
