//! Options for workflows and activities.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::Dur;
use crate::retry::RetryConfig;

/// What the world does when a workflow fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureStrategy {
    /// Run the saga compensations in reverse order.
    Compensate,
    /// Restart the workflow from the beginning, with exponential backoff, up to `max_retries`.
    #[default]
    Retry,
    /// Cancel the parent and all children.
    Cascade,
    /// Mark the run failed and do nothing else.
    Ignore,
    /// Mark the run failed and keep it untouched for inspection.
    Quarantine,
}

/// What starting a run does when its workflow id is already taken by another run.
///
/// ```
/// use worlds_engine::{OnConflict, WorkflowOptions};
/// let opts = WorkflowOptions::new()
///     .workflow_id("order-42")
///     .on_conflict(OnConflict::UseExisting);
/// assert_eq!(opts.on_conflict, Some(OnConflict::UseExisting));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnConflict {
    /// Refuse with a conflict error (409). The default.
    #[default]
    Fail,
    /// Return a handle to the run that holds the id, whatever its status, if it is a run of
    /// the same workflow (a run of another workflow is still a conflict).
    UseExisting,
}

/// Options for one workflow, set on its definition and/or per `execute` call (the call wins).
///
/// ```
/// use std::time::Duration;
/// use worlds_engine::WorkflowOptions;
/// let opts = WorkflowOptions::new()
///     .workflow_id("order-42")
///     .priority(10)
///     .timeout(Duration::from_secs(3600));
/// assert_eq!(opts.workflow_id.as_deref(), Some("order-42"));
/// ```
///
/// Deserializing accepts the snake_case names and the specification's camelCase ones
/// (`workflowId`, `taskQueue`, `failureStrategy`, `maxRetries`…), and refuses any other key
/// by name, so that a misspelled option is an error rather than a silent default:
///
/// ```
/// use worlds_engine::{FailureStrategy, WorkflowOptions};
/// let opts: WorkflowOptions =
///     serde_json::from_str(r#"{"workflowId":"order-42","failureStrategy":"quarantine"}"#).unwrap();
/// assert_eq!(opts.failure_strategy, Some(FailureStrategy::Quarantine));
/// let typo = serde_json::from_str::<WorkflowOptions>(r#"{"maxRetry":5}"#).unwrap_err();
/// assert!(typo.to_string().contains("unknown field `maxRetry`"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct WorkflowOptions {
    /// A caller-chosen id, unique among runs; defaults to the run id.
    #[serde(alias = "workflowId")]
    pub workflow_id: Option<String>,
    /// The task queue its tasks go to; `None` is the default queue.
    #[serde(alias = "taskQueue")]
    pub task_queue: Option<String>,
    /// Queue priority: higher runs first. Default 0.
    pub priority: Option<i32>,
    /// What to do on failure; defaults to the world's strategy.
    #[serde(alias = "failureStrategy")]
    pub failure_strategy: Option<FailureStrategy>,
    /// How many times the `retry` strategy restarts the workflow. Default 3.
    #[serde(alias = "maxRetries")]
    pub max_retries: Option<u32>,
    /// The run fails if it has not finished this long after it was queued.
    pub timeout: Option<Dur>,
    /// A key naming this request to start a run: starting again with the same key within the
    /// world's `idempotency_ttl` (5 s by default) of the first start returns the first run
    /// instead of starting another. Meant for retries of one request (a client resending, a
    /// load balancer duplicating), not as a lasting id: use `workflow_id` for that.
    #[serde(alias = "idempotencyKey")]
    pub idempotency_key: Option<String>,
    /// What to do when `workflow_id` is taken. Default [`OnConflict::Fail`].
    #[serde(alias = "onConflict")]
    pub on_conflict: Option<OnConflict>,
}

impl WorkflowOptions {
    /// Options with nothing set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the workflow id.
    pub fn workflow_id(mut self, id: impl Into<String>) -> Self {
        self.workflow_id = Some(id.into());
        self
    }

    /// Sets the task queue.
    pub fn task_queue(mut self, queue: impl Into<String>) -> Self {
        self.task_queue = Some(queue.into());
        self
    }

    /// Sets the priority (higher first).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets the failure strategy.
    pub fn failure_strategy(mut self, strategy: FailureStrategy) -> Self {
        self.failure_strategy = Some(strategy);
        self
    }

    /// Sets the number of workflow retries for the `retry` strategy.
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = Some(retries);
        self
    }

    /// Sets the run timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(Dur(timeout));
        self
    }

    /// Sets the idempotency key: a start repeated with this key within the world's
    /// `idempotency_ttl` returns the run the first one started.
    ///
    /// ```
    /// use worlds_engine::WorkflowOptions;
    /// let opts = WorkflowOptions::new().idempotency_key("req-7f3a");
    /// assert_eq!(opts.idempotency_key.as_deref(), Some("req-7f3a"));
    /// ```
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Sets what to do when the workflow id is taken.
    pub fn on_conflict(mut self, policy: OnConflict) -> Self {
        self.on_conflict = Some(policy);
        self
    }

    /// These options, with every unset field taken from `defaults`.
    pub fn or(self, defaults: &WorkflowOptions) -> WorkflowOptions {
        WorkflowOptions {
            idempotency_key: self
                .idempotency_key
                .or_else(|| defaults.idempotency_key.clone()),
            on_conflict: self.on_conflict.or(defaults.on_conflict),
            workflow_id: self.workflow_id.or_else(|| defaults.workflow_id.clone()),
            task_queue: self.task_queue.or_else(|| defaults.task_queue.clone()),
            priority: self.priority.or(defaults.priority),
            failure_strategy: self.failure_strategy.or(defaults.failure_strategy),
            max_retries: self.max_retries.or(defaults.max_retries),
            timeout: self.timeout.or(defaults.timeout),
        }
    }
}

/// Options for an activity: retries, timeouts and routing.
///
/// ```
/// use std::time::Duration;
/// use worlds_engine::{ActivityOptions, retry::retry_patterns};
/// let opts = ActivityOptions::new()
///     .retry(retry_patterns::api())
///     .timeout(Duration::from_secs(30))
///     .heartbeat_timeout(Duration::from_secs(5));
/// assert_eq!(opts.retry.unwrap().max_attempts, 5);
/// ```
///
/// Deserializing accepts the snake_case names and the specification's camelCase ones
/// (`heartbeatTimeout`, `taskQueue`), and refuses any other key by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ActivityOptions {
    /// Retry policy; defaults to [`RetryConfig::default`].
    pub retry: Option<RetryConfig>,
    /// Each attempt fails as timed out (and may be retried) after this long.
    pub timeout: Option<Dur>,
    /// An attempt that does not heartbeat for this long fails as timed out (and may be retried).
    #[serde(alias = "heartbeatTimeout")]
    pub heartbeat_timeout: Option<Dur>,
    /// The task queue its tasks go to; `None` is the workflow's queue.
    #[serde(alias = "taskQueue")]
    pub task_queue: Option<String>,
}

impl ActivityOptions {
    /// Options with nothing set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the retry policy.
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Sets the per-attempt timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(Dur(timeout));
        self
    }

    /// Sets the heartbeat timeout.
    pub fn heartbeat_timeout(mut self, timeout: Duration) -> Self {
        self.heartbeat_timeout = Some(Dur(timeout));
        self
    }

    /// Sets the task queue.
    pub fn task_queue(mut self, queue: impl Into<String>) -> Self {
        self.task_queue = Some(queue.into());
        self
    }

    /// These options, with every unset field taken from `defaults`.
    pub fn or(self, defaults: &ActivityOptions) -> ActivityOptions {
        ActivityOptions {
            retry: self.retry.or_else(|| defaults.retry.clone()),
            timeout: self.timeout.or(defaults.timeout),
            heartbeat_timeout: self.heartbeat_timeout.or(defaults.heartbeat_timeout),
            task_queue: self.task_queue.or_else(|| defaults.task_queue.clone()),
        }
    }
}
