//! World configuration, with the defaults the specification sets.
//!
//! It sits below every part that reads it (engine, workers, hooks, telemetry, the webhook
//! endpoint): it depends only on plain data types (durations, retry policies, the failure
//! strategy, errors), so reading the configuration never ties a part to the world above it.

mod database;
mod encryption;
mod logs;
mod retention;
mod webhook_server;
pub(crate) mod webhook_signature;

pub use database::{redact_url, DatabaseConfig, DATABASE_URL_ENV};
pub use encryption::{EncryptionKeys, ENCRYPTION_KEYS_ENV};
pub use logs::{LogLevel, LogsConfig, UnknownName};
pub use retention::{RetentionConfig, RetentionRule, RetentionVerdict};
pub use webhook_server::WebhookServerOptions;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::Dur;
use crate::model::FailureStrategy;
use crate::retry::RetryConfig;

/// The environment variable that sets the default data directory of file and hybrid worlds
/// (see [`WorldConfig::persistence_path`]); the `worlds` command line reads it for `--dir`.
pub const DATA_DIR_ENV: &str = "WORLDS_ENGINE_DIR";

/// The data directory when neither the configuration nor [`DATA_DIR_ENV`] names one, relative
/// to the current directory.
pub const DEFAULT_DATA_DIR: &str = ".worlds-engine";

/// The default data directory: [`DATA_DIR_ENV`] if set and not empty, else
/// [`DEFAULT_DATA_DIR`].
///
/// ```
/// # if std::env::var_os(worlds_engine::DATA_DIR_ENV).is_none() {
/// assert_eq!(worlds_engine::default_data_dir().to_str(), Some(".worlds-engine"));
/// # }
/// ```
pub fn default_data_dir() -> PathBuf {
    match std::env::var_os(DATA_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(DEFAULT_DATA_DIR),
    }
}

/// Where a world keeps its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Persistence {
    /// In process memory only: fast, lost on exit.
    Memory,
    /// JSON files under `persistence_path`.
    File,
    /// Memory for reads, a write-ahead log on disk for durability.
    #[default]
    Hybrid,
    /// A PostgreSQL database shared by every process of the world, on any number of hosts
    /// ([`WorldConfig::database`] says where). Opened by the `worlds-postgres` crate:
    /// `worlds_postgres::open(config).await`.
    Postgres,
}

impl Persistence {
    /// True for the backends kept in a directory (`File`, `Hybrid`).
    pub fn uses_directory(self) -> bool {
        matches!(self, Persistence::File | Persistence::Hybrid)
    }
}

/// Everything a world can be configured with. `WorldConfig::default()` gives the documented
/// defaults.
///
/// ```
/// use worlds_engine::{Persistence, WorldConfig};
/// let mut config = WorldConfig::default();
/// config.persistence = Persistence::Memory;
/// config.max_workers = 4;
/// assert_eq!(config.min_workers, 2);
/// assert_eq!(config.persistence_path.to_str(), Some(".worlds-engine"));
/// ```
///
/// Deserializing (from a configuration file, say) takes missing fields from the defaults,
/// accepts the snake_case names and the specification's camelCase ones (`minWorkers`,
/// `persistencePath`, `heartbeatTimeout`…), and refuses any other key by name:
///
/// ```
/// use worlds_engine::WorldConfig;
/// let config: WorldConfig = serde_json::from_str(r#"{"minWorkers":5,"maxWorkers":20}"#).unwrap();
/// assert_eq!((config.min_workers, config.max_workers), (5, 20));
/// let typo = serde_json::from_str::<WorldConfig>(r#"{"minWorker":5}"#).unwrap_err();
/// assert!(typo.to_string().contains("unknown field `minWorker`"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct WorldConfig {
    /// Workers kept running at all times. Default 2.
    #[serde(alias = "minWorkers")]
    pub min_workers: usize,
    /// Most workers the pool grows to. Default 10.
    #[serde(alias = "maxWorkers")]
    pub max_workers: usize,
    /// Busy/total ratio at or above which the pool grows. Default 0.7.
    #[serde(alias = "scaleThreshold")]
    pub scale_threshold: f64,
    /// Busy/total ratio at or below which the pool shrinks. Default 0.3.
    #[serde(alias = "scaleDownThreshold")]
    pub scale_down_threshold: f64,
    /// How often the autoscaler looks at the workload. Default 10 s.
    #[serde(alias = "scaleInterval")]
    pub scale_interval: Dur,
    /// Storage mode. Default hybrid.
    pub persistence: Persistence,
    /// Directory for file and hybrid storage. Default: the [`DATA_DIR_ENV`] environment variable
    /// (`WORLDS_ENGINE_DIR`) when it is set, else `.worlds-engine` ([`DEFAULT_DATA_DIR`]) in the
    /// current directory — so a program started from another folder would find another world:
    /// set the variable, or this field, to an absolute path. A path set here (in code or in a
    /// deserialized configuration) always wins over the variable, which only replaces the
    /// default. [`World::data_dir`](crate::World::data_dir) gives the absolute path in use.
    #[serde(alias = "persistencePath")]
    pub persistence_path: PathBuf,
    /// What to do when a workflow fails, unless the workflow says otherwise. Default retry.
    #[serde(alias = "failureStrategy")]
    pub failure_strategy: FailureStrategy,
    /// The version of the code this world runs (a release tag, a commit), recorded in every
    /// run it accepts, so that runs can be listed by the code that started them
    /// ([`WorkflowQueryFilter::code_version`](crate::WorkflowQueryFilter::code_version)).
    /// Default none.
    #[serde(alias = "codeVersion")]
    pub code_version: Option<String>,
    /// Drive only runs accepted by a world of this same [`code_version`](Self::code_version)
    /// (bulk operations excepted): during a rolling deploy, runs started by the old code keep
    /// running on processes of the old code until they drain, and the new code takes only its
    /// own. Needs `code_version`. Default false.
    #[serde(default, alias = "pinCodeVersion")]
    pub pin_code_version: bool,
    /// Interval between heartbeats (and the most often an activity heartbeat is written to
    /// history). Default 5 s.
    #[serde(alias = "heartbeatInterval")]
    pub heartbeat_interval: Dur,
    /// Silence after which a worker or activity is considered dead. Default 30 s.
    #[serde(alias = "heartbeatTimeout")]
    pub heartbeat_timeout: Dur,
    /// Largest input, output or hook payload, in bytes. Default 4 MiB.
    #[serde(alias = "maxPayloadBytes")]
    pub max_payload_bytes: usize,
    /// Most runs kept live in memory between their tasks; beyond it, the least recently used
    /// are evicted and resume by replay. Default 10 000.
    #[serde(alias = "maxCachedRuns")]
    pub max_cached_runs: usize,
    /// Evict every run from memory after each of its tasks, so every await resumes by replay.
    /// Slow; for testing that workflows replay correctly. Default false.
    #[serde(alias = "evictAfterEveryTask")]
    pub evict_after_every_task: bool,
    /// A run started from outside a workflow (`World::execute`, `World::execute_by_name`, the
    /// HTTP API) has its first workflow task run by the start call itself, once the run is
    /// recorded, instead of waiting in the queue for a worker: its first steps and timers are
    /// scheduled before the call returns, without a hand-over to another thread. Only while
    /// the world's workers run and serve the run's task queue. Default true.
    #[serde(alias = "eagerStart")]
    pub eager_start: bool,
    /// Extra workers dedicated to named task queues, one per entry.
    #[serde(alias = "taskQueues")]
    pub task_queues: Vec<String>,
    /// How long `shutdown` waits for in-flight work before giving up on it. Default 30 s.
    #[serde(alias = "shutdownGrace")]
    pub shutdown_grace: Dur,
    /// How long a running step may go on after its run was cancelled, to clean up, before it
    /// is abandoned. Default 5 s.
    #[serde(alias = "cancelGrace")]
    pub cancel_grace: Dur,
    /// Backoff between restarts of a failed workflow under the `retry` strategy (its
    /// `max_attempts` is ignored: `max_retries` of the workflow counts restarts). Default
    /// exponential from 1 s, doubling, at most 60 s, with 0–10 % jitter.
    #[serde(alias = "workflowRetry")]
    pub workflow_retry: RetryConfig,
    /// With file storage shared by several processes: how often this world looks for runs whose
    /// process has exited (and takes them over) and for runs other processes wrote to (a
    /// cancellation, a child's result). Default 1 s.
    #[serde(alias = "sharedPollInterval")]
    pub shared_poll_interval: Dur,
    /// The secret random hook tokens are derived from (see [`crate::hooks`]); the same in every
    /// process on a directory. Unset, the secret is read from the
    /// [`WORLDS_ENGINE_HOOK_SECRET`](crate::hooks::HOOK_SECRET_ENV) environment variable, else
    /// the key from [`hook_key_file`](Self::hook_key_file). With none of the three, a memory
    /// world draws a random key and a durable world keeps a generated one in `state/hook-key`
    /// inside its directory — where a copy of the directory can derive every token, so opening
    /// it logs a warning.
    #[serde(skip)]
    pub hook_secret: Option<HookSecret>,
    /// A file outside the data directory holding the hook key as 64 hex digits (as
    /// `openssl rand -hex 32` prints), used when neither `hook_secret` nor the environment
    /// variable is set. Pointing it at a `state/hook-key` moved out of the directory keeps the
    /// tokens already handed out. A file that cannot be read or holds no key fails
    /// [`World::new`](crate::World::new). Default none.
    #[serde(alias = "hookKeyFile")]
    pub hook_key_file: Option<PathBuf>,
    /// Encrypts payloads at rest: inputs, outputs, errors, recorded values, hook payloads and
    /// metadata, step heartbeat messages and stream chunks are stored sealed with AES-256-GCM,
    /// under a key derived (HKDF-SHA256) per run from the active key, and read back with
    /// whichever listed key sealed them. Ids, names, statuses, times and error codes stay
    /// readable, so lists, filters and the timeline work as before. Unset, the keys are read
    /// from the [`ENCRYPTION_KEYS_ENV`] environment variable; with neither, nothing is
    /// encrypted. Every process on a store needs the keys: one without them cannot read the
    /// sealed payloads (it leaves such runs alone; the CLI and the dashboard show
    /// "encrypted"). See [`EncryptionKeys`] for rotation. Default none.
    #[serde(skip)]
    pub encryption_keys: Option<EncryptionKeys>,
    /// How long an idempotency key keeps returning the run it started: a start with the same
    /// key within this time of the first returns that run; after it, a new run starts.
    /// Default 5 s.
    #[serde(alias = "idempotencyTtl")]
    pub idempotency_ttl: Dur,
    /// The start of every webhook URL: a webhook's URL is this, `/`, and its token. Default
    /// `http://localhost:3000/webhooks`.
    #[serde(alias = "webhookBaseUrl")]
    pub webhook_base_url: String,
    /// Logging: minimum level, log directory, flush interval (see [`crate::telemetry::logs`]).
    pub logs: LogsConfig,
    /// Timeouts and the connection limit of the webhook endpoint
    /// (`World::serve_webhooks`, feature `http`). Its shutdown waits at most
    /// `shutdown_grace` for requests in progress.
    #[serde(alias = "webhookServer")]
    pub webhook_server: WebhookServerOptions,
    /// The database of a [`Persistence::Postgres`] world.
    pub database: DatabaseConfig,
    /// How long finished runs are kept before a sweep removes them, by final status and per
    /// workflow (see [`RetentionConfig`]). Default: every run kept for ever.
    pub retention: RetentionConfig,
}

/// A secret that never shows in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct HookSecret(pub String);

impl std::fmt::Debug for HookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookSecret(..)")
    }
}

impl Default for WorldConfig {
    fn default() -> Self {
        Self {
            min_workers: 2,
            max_workers: 10,
            scale_threshold: 0.7,
            scale_down_threshold: 0.3,
            scale_interval: Dur(Duration::from_secs(10)),
            persistence: Persistence::Hybrid,
            persistence_path: default_data_dir(),
            failure_strategy: FailureStrategy::Retry,
            code_version: None,
            pin_code_version: false,
            heartbeat_interval: Dur(Duration::from_millis(5000)),
            heartbeat_timeout: Dur(Duration::from_millis(30000)),
            max_payload_bytes: 4 * 1024 * 1024,
            max_cached_runs: 10_000,
            evict_after_every_task: false,
            eager_start: true,
            task_queues: Vec::new(),
            shutdown_grace: Dur(Duration::from_secs(30)),
            cancel_grace: Dur(Duration::from_secs(5)),
            workflow_retry: RetryConfig::new()
                .backoff(crate::retry::Backoff::Exponential)
                .initial_interval(Duration::from_secs(1))
                .multiplier(2.0)
                .max_interval(Duration::from_secs(60)),
            shared_poll_interval: Dur(Duration::from_secs(1)),
            hook_secret: None,
            encryption_keys: None,
            hook_key_file: None,
            webhook_base_url: "http://localhost:3000/webhooks".to_owned(),
            idempotency_ttl: Dur(Duration::from_secs(5)),
            logs: Default::default(),
            webhook_server: Default::default(),
            database: Default::default(),
            retention: Default::default(),
        }
    }
}

impl WorldConfig {
    /// The defaults, with in-memory storage.
    pub fn memory() -> Self {
        Self {
            persistence: Persistence::Memory,
            ..Self::default()
        }
    }

    /// The defaults, on the PostgreSQL database at `url` (open the world with
    /// `worlds_postgres::open(config).await`).
    pub fn postgres(url: impl Into<String>) -> Self {
        Self {
            persistence: Persistence::Postgres,
            database: DatabaseConfig {
                url: Some(url.into()),
                ..DatabaseConfig::default()
            },
            ..Self::default()
        }
    }

    /// The encryption keys a world on this configuration uses:
    /// [`encryption_keys`](Self::encryption_keys), else those in the [`ENCRYPTION_KEYS_ENV`]
    /// environment variable, else none. Keys in the environment that do not read are an error.
    pub fn encryption(&self) -> Result<Option<EncryptionKeys>, crate::WorldError> {
        match &self.encryption_keys {
            Some(keys) => Ok(Some(keys.clone())),
            None => EncryptionKeys::from_env(),
        }
    }

    /// Checks the values, naming the first bad field.
    pub fn validate(&self) -> Result<(), crate::WorldError> {
        let bad = |field: &str, message: &str| Err(crate::WorldError::invalid(field, message));
        if self.min_workers == 0 {
            return bad("min_workers", "must be at least 1");
        }
        if self.max_workers < self.min_workers {
            return bad("max_workers", "must be at least min_workers");
        }
        if !(0.0..=1.0).contains(&self.scale_threshold) {
            return bad("scale_threshold", "must be between 0 and 1");
        }
        if !(0.0..=1.0).contains(&self.scale_down_threshold)
            || self.scale_down_threshold > self.scale_threshold
        {
            return bad(
                "scale_down_threshold",
                "must be between 0 and 1 and not above scale_threshold",
            );
        }
        if self.max_payload_bytes == 0 {
            return bad("max_payload_bytes", "must be positive");
        }
        if self.shared_poll_interval.0.is_zero() {
            return bad("shared_poll_interval", "must be positive");
        }
        if self.database.lease_duration.0 < database::MIN_LEASE_DURATION {
            return bad(
                "database.lease_duration",
                "must be at least 1s: a shorter lease passes to another process whenever a heartbeat is a little late",
            );
        }
        if let Some(version) = &self.code_version {
            if version.trim().is_empty() || version.len() > 200 || version.contains('\0') {
                return bad(
                    "code_version",
                    "must be a non-empty name of at most 200 bytes without NUL (a release tag or a commit)",
                );
            }
        }
        if self.pin_code_version && self.code_version.is_none() {
            return bad(
                "pin_code_version",
                "needs code_version: a world pinned to its code version must say which version it runs",
            );
        }
        self.webhook_server.validate()?;
        self.retention.validate()?;
        Ok(())
    }
}
