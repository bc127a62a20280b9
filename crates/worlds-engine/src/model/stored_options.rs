//! Reading options back from stored records (history events, run state).
//!
//! [`WorkflowOptions`], [`ActivityOptions`] and [`RetryConfig`] refuse unknown keys, because
//! they are what users write and a misspelled option must not be silently ignored. Records a
//! store already holds are another matter: a history written by another version of the engine
//! may carry a field this one does not know (one added later, or one since removed), and such a
//! history must still load. So stored options are read through the lenient copies here, which
//! ignore unknown keys, and converted.

use serde::{Deserialize, Deserializer};

use super::{ActivityOptions, FailureStrategy, OnConflict, WorkflowOptions};
use crate::duration::Dur;
use crate::retry::{Backoff, RetryConfig};

/// For `#[serde(deserialize_with)]` on a stored `Option<Box<ActivityOptions>>`.
pub(crate) fn activity<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Box<ActivityOptions>>, D::Error> {
    let stored = Option::<StoredActivity>::deserialize(deserializer)?;
    Ok(stored.map(|s| Box::new(s.into())))
}

/// For `#[serde(deserialize_with)]` on a stored `Option<Box<WorkflowOptions>>`.
pub(crate) fn workflow<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Box<WorkflowOptions>>, D::Error> {
    let stored = Option::<StoredWorkflow>::deserialize(deserializer)?;
    Ok(stored.map(|s| Box::new(s.into())))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StoredWorkflow {
    workflow_id: Option<String>,
    task_queue: Option<String>,
    priority: Option<i32>,
    failure_strategy: Option<FailureStrategy>,
    max_retries: Option<u32>,
    timeout: Option<Dur>,
    idempotency_key: Option<String>,
    on_conflict: Option<OnConflict>,
}

impl From<StoredWorkflow> for WorkflowOptions {
    fn from(s: StoredWorkflow) -> Self {
        WorkflowOptions {
            workflow_id: s.workflow_id,
            task_queue: s.task_queue,
            priority: s.priority,
            failure_strategy: s.failure_strategy,
            max_retries: s.max_retries,
            timeout: s.timeout,
            idempotency_key: s.idempotency_key,
            on_conflict: s.on_conflict,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StoredActivity {
    retry: Option<StoredRetry>,
    timeout: Option<Dur>,
    heartbeat_timeout: Option<Dur>,
    task_queue: Option<String>,
}

impl From<StoredActivity> for ActivityOptions {
    fn from(s: StoredActivity) -> Self {
        ActivityOptions {
            retry: s.retry.map(Into::into),
            timeout: s.timeout,
            heartbeat_timeout: s.heartbeat_timeout,
            task_queue: s.task_queue,
        }
    }
}

/// Every field optional: a missing one takes [`RetryConfig::default`]'s value, as the strict
/// type does.
#[derive(Deserialize, Default)]
#[serde(default)]
struct StoredRetry {
    max_attempts: Option<u32>,
    backoff: Option<Backoff>,
    initial_interval: Option<Dur>,
    max_interval: Option<Dur>,
    multiplier: Option<f64>,
}

impl From<StoredRetry> for RetryConfig {
    fn from(s: StoredRetry) -> Self {
        let d = RetryConfig::default();
        RetryConfig {
            max_attempts: s.max_attempts.unwrap_or(d.max_attempts),
            backoff: s.backoff.unwrap_or(d.backoff),
            initial_interval: s.initial_interval.unwrap_or(d.initial_interval),
            max_interval: s.max_interval.unwrap_or(d.max_interval),
            multiplier: s.multiplier.unwrap_or(d.multiplier),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Holder {
        #[serde(default, deserialize_with = "activity")]
        a: Option<Box<ActivityOptions>>,
        #[serde(default, deserialize_with = "workflow")]
        w: Option<Box<WorkflowOptions>>,
    }

    #[test]
    fn stored_options_ignore_fields_this_version_does_not_know() {
        let held: Holder = serde_json::from_str(
            r#"{"a":{"timeout":500,"sticky":true,"retry":{"max_attempts":2,"jitter":0.5}},
                "w":{"workflow_id":"w-1","legacy":1}}"#,
        )
        .unwrap();
        let a = held.a.unwrap();
        assert_eq!(a.timeout, Some(Dur::from_millis(500)));
        let retry = a.retry.unwrap();
        assert_eq!(retry.max_attempts, 2);
        assert_eq!(retry.max_interval, RetryConfig::default().max_interval);
        assert_eq!(held.w.unwrap().workflow_id.as_deref(), Some("w-1"));
    }

    #[test]
    fn absent_and_null_stored_options_are_none() {
        let held: Holder = serde_json::from_str(r#"{"a":null}"#).unwrap();
        assert!(held.a.is_none() && held.w.is_none());
    }
}
