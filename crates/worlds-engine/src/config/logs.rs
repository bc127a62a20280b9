//! How a world logs: the minimum level and where the files go (read by `telemetry::logs`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::Dur;

/// How severe an entry is. Ordered: `Debug < Info < Warn < Error`.
///
/// tracing's `TRACE` level has no entry level of its own and is written as `debug`.
///
/// ```
/// use worlds_engine::telemetry::logs::LogLevel;
/// assert!(LogLevel::Warn > LogLevel::Info);
/// assert_eq!("warn".parse::<LogLevel>().unwrap(), LogLevel::Warn);
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    /// Detail for finding a problem.
    Debug,
    /// Something worth knowing happened.
    #[default]
    Info,
    /// Something went wrong and the engine worked around it.
    Warn,
    /// Something went wrong and was not worked around.
    Error,
}

impl LogLevel {
    /// All levels, least severe first.
    pub const ALL: [LogLevel; 4] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Warn,
        LogLevel::Error,
    ];

    /// The lowercase name written in entries (`info`).
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }

    /// The level an event at tracing level `level` is written at.
    pub fn from_tracing(level: tracing::Level) -> LogLevel {
        match level {
            tracing::Level::ERROR => LogLevel::Error,
            tracing::Level::WARN => LogLevel::Warn,
            tracing::Level::INFO => LogLevel::Info,
            _ => LogLevel::Debug,
        }
    }

    /// The tracing filter that lets through events at this level and above (`debug` lets
    /// through `DEBUG`, not `TRACE`).
    pub fn to_filter(self) -> tracing::level_filters::LevelFilter {
        use tracing::level_filters::LevelFilter;
        match self {
            LogLevel::Debug => LevelFilter::DEBUG,
            LogLevel::Info => LevelFilter::INFO,
            LogLevel::Warn => LevelFilter::WARN,
            LogLevel::Error => LevelFilter::ERROR,
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A level or category name that is not one of the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{given}': expected one of {expected}")]
pub struct UnknownName {
    pub(crate) what: &'static str,
    pub(crate) given: String,
    pub(crate) expected: &'static str,
}

impl FromStr for LogLevel {
    type Err = UnknownName;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "debug" | "trace" => Ok(LogLevel::Debug),
            "info" => Ok(LogLevel::Info),
            "warn" | "warning" => Ok(LogLevel::Warn),
            "error" => Ok(LogLevel::Error),
            _ => Err(UnknownName {
                what: "log level",
                given: text.to_owned(),
                expected: "debug, info, warn, error",
            }),
        }
    }
}

/// How a world logs. Part of [`WorldConfig`](crate::WorldConfig) as `logs`.
///
/// ```
/// use worlds_engine::telemetry::logs::{LogLevel, LogsConfig};
/// use worlds_engine::WorldConfig;
/// let mut config = WorldConfig::memory();
/// config.logs = LogsConfig::default().level(LogLevel::Debug).dir("/var/log/my-app");
/// assert_eq!(config.logs.flush_interval.0.as_secs(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct LogsConfig {
    /// The least severe level written (to files, and to the console of `WorldLogs::init`).
    /// Default `info`.
    pub level: LogLevel,
    /// Where the day files go. Default: `logs` under `persistence_path` for file and hybrid
    /// worlds; none for memory worlds (console only).
    pub dir: Option<PathBuf>,
    /// Write files at all. Default true; false keeps a durable world's logs on the console.
    pub files: bool,
    /// How often waiting entries are written, on the world's clock. Default 2 s.
    #[serde(alias = "flushInterval")]
    pub flush_interval: Dur,
    /// Day files kept: older ones are removed when a new day starts. Default: all are kept.
    #[serde(alias = "maxFiles")]
    pub max_files: Option<usize>,
    /// `WorldLogs::init` (feature `console-log`) also writes to standard error. Default true.
    pub console: bool,
    /// Take events that happen inside no world's span (the application's own events, and the
    /// engine's where it runs on the caller's task, such as in `World::execute`). Default true;
    /// turn it off on all worlds but one when a process runs several, or each world's files
    /// get a copy of them.
    #[serde(alias = "captureUnattributed")]
    pub capture_unattributed: bool,
}

impl Default for LogsConfig {
    fn default() -> Self {
        Self {
            level: LogLevel::Info,
            dir: None,
            files: true,
            flush_interval: Dur(Duration::from_secs(2)),
            max_files: None,
            console: true,
            capture_unattributed: true,
        }
    }
}

impl LogsConfig {
    /// Sets the minimum level.
    pub fn level(mut self, level: LogLevel) -> Self {
        self.level = level;
        self
    }

    /// Writes the day files to `dir`.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Sets how often waiting entries are written.
    pub fn flush_interval(mut self, every: Duration) -> Self {
        self.flush_interval = Dur(every);
        self
    }
}
