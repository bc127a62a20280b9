//! The DevKit's queue: each message is a run of the built-in workflow [`DELIVERY_WORKFLOW`],
//! which POSTs it to the app's queue handler until the app takes it.
//!
//! A message therefore has what every run has, on every backend: it survives a restart of the
//! server, its attempts are in its history, and the dashboard shows it. Delivery:
//!
//! - **Where**: `{callbackUrl}/.well-known/workflow/v1/flow` for `__wkf_workflow_…` queues,
//!   `…/step` for `__wkf_step_…` ones, the routes a DevKit app mounts its handlers on.
//! - **What**: the message as JSON, with the headers the DevKit's handlers read
//!   (`x-vqs-queue-name`, `x-vqs-message-id`, `x-vqs-message-attempt`) and a
//!   [Standard Webhooks](https://www.standardwebhooks.com/) signature (`webhook-id`,
//!   `webhook-timestamp`, `webhook-signature`) made with the server's delivery secret, which
//!   the app checks before it runs anything: its routes are not open to whoever can reach them.
//!   The signed id is `{message id}:{attempt}:{queue}`, so the app also knows those three
//!   headers are the server's.
//! - **Answers**: `2xx {"timeoutSeconds": N}` — deliver the same message again after N
//!   seconds (a durable sleep; the attempt number goes up); any other `2xx` — delivered, the run
//!   completes; `5xx` or no answer — retried with exponential backoff ([`retry_policy`]), then
//!   signed afresh and retried again, [`ROUNDS`] times in all; `4xx` — refused.
//! - **Dead letters**: a message that is refused or runs out of retries fails its run: the
//!   failed runs of [`DELIVERY_WORKFLOW`] are the dead-letter list, each with the last answer
//!   in its error, and `worlds runs retry` (or the dashboard) delivers one again.
//! - **Once per key**: a message queued with an idempotency key starts its run with that key,
//!   so the same key within the world's idempotency window gives the same message.
//! - **Later**: a message queued with `delaySeconds` waits that long before its first delivery,
//!   as a durable sleep of its run (an engine timer on the world's clock), so the wait survives
//!   a restart of the server; at most [`MAX_DELAY_SECONDS`] (7 days).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use worlds_engine::fetch::FetchRequest;
use worlds_engine::hooks::WebhookSignature;
use worlds_engine::prelude::*;
use worlds_engine::retry::{Backoff, RetryConfig};

/// The name of the built-in workflow that delivers DevKit queue messages.
pub const DELIVERY_WORKFLOW: &str = "worlds.devkit.deliver";

/// How many times a message is signed afresh and sent through a whole retry policy before it
/// is given up as a dead letter.
pub const ROUNDS: u32 = 3;

/// How long the app may take to answer one delivery (a step runs inside it).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The longest wait a `timeoutSeconds` answer may ask for: a year.
const MAX_TIMEOUT_SECONDS: u64 = 365 * 24 * 3600;

/// The longest `delaySeconds` a message may be queued with: 7 days.
pub(crate) const MAX_DELAY_SECONDS: u64 = 7 * 24 * 3600;

/// The delay before a message's first delivery, in milliseconds (rounded up), from the
/// `delaySeconds` it was queued with; `None` for none (absent or 0). A delay that is not a
/// number of seconds from 0 to [`MAX_DELAY_SECONDS`] is refused.
pub(crate) fn delay_ms(delay_seconds: Option<f64>) -> Result<Option<u64>, WorldError> {
    let Some(seconds) = delay_seconds else {
        return Ok(None);
    };
    if !seconds.is_finite() || seconds < 0.0 || seconds > MAX_DELAY_SECONDS as f64 {
        return Err(WorldError::InvalidInput {
            field: "delaySeconds".into(),
            message: format!(
                "delaySeconds must be a number of seconds from 0 to {MAX_DELAY_SECONDS} (7 days); got {seconds}"
            ),
        });
    }
    let ms = (seconds * 1_000.0).ceil() as u64;
    Ok((ms > 0).then_some(ms))
}

/// What a delivery run is started with.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Delivery {
    /// The DevKit queue (`__wkf_workflow_…` or `__wkf_step_…`).
    pub(crate) queue_name: String,
    /// The message, as the app sent it.
    pub(crate) message: Box<RawValue>,
    /// The handler route the message goes to.
    pub(crate) url: String,
    /// How long the message waits before its first delivery, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) delay_ms: Option<u64>,
}

/// The retry policy of one round of attempts: 5 attempts, 0.5 s doubling to at most 30 s
/// (about 8 s in all), well inside a signature's 5-minute tolerance.
pub fn retry_policy() -> RetryConfig {
    RetryConfig::new()
        .max_attempts(5)
        .backoff(Backoff::Exponential)
        .initial_interval(Duration::from_millis(500))
        .multiplier(2.0)
        .max_interval(Duration::from_secs(30))
}

/// The handler route of a queue under the app's base URL, or why there is none.
pub(crate) fn handler_url(callback_url: &str, queue_name: &str) -> Result<String, WorldError> {
    let route = if queue_name.starts_with("__wkf_workflow_") {
        "flow"
    } else if queue_name.starts_with("__wkf_step_") {
        "step"
    } else {
        return Err(WorldError::InvalidInput {
            field: "queueName".into(),
            message: format!(
                "{queue_name:?} is not a DevKit queue: it starts with __wkf_workflow_ or __wkf_step_"
            ),
        });
    };
    let base = callback_url.trim_end_matches('/');
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(WorldError::InvalidInput {
            field: "callbackUrl".into(),
            message: format!("{callback_url:?} is not an http(s) URL of the app"),
        });
    }
    Ok(format!("{base}/.well-known/workflow/v1/{route}"))
}

/// What the app's answer asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Taken: the delivery is done.
    Taken,
    /// Deliver again after this many seconds.
    Later(u64),
    /// Refused (a 4xx): a dead letter.
    Refused,
}

/// Reads the app's answer to a delivery.
pub(crate) fn answer(status: u16, body: &str) -> Answer {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Later {
        timeout_seconds: f64,
    }
    if !(200..300).contains(&status) {
        return Answer::Refused;
    }
    match serde_json::from_str::<Later>(body) {
        Ok(later) if later.timeout_seconds.is_finite() => {
            // Whole seconds, at least one: an answer of 0 would redeliver in a tight loop.
            let seconds = later.timeout_seconds.ceil().max(1.0) as u64;
            Answer::Later(seconds.min(MAX_TIMEOUT_SECONDS))
        }
        _ => Answer::Taken,
    }
}

/// The delivery workflow, signing with `signature`.
pub(crate) fn workflow(signature: WebhookSignature) -> Workflow<Delivery, u32> {
    worlds_engine::workflow(
        DELIVERY_WORKFLOW,
        move |ctx: WorkflowContext, delivery: Delivery| {
            let signature = signature.clone();
            async move {
                let message_id = ctx.run_id().to_owned();
                let body = delivery.message.get().to_owned();
                if let Some(delay) = delivery.delay_ms {
                    // A durable timer: the wait outlives a restart of the server.
                    ctx.sleep(Duration::from_millis(delay)).await?;
                }
                let mut attempt: u32 = 1;
                let mut round: u32 = 1;
                loop {
                    let now = ctx.now();
                    let mut request = FetchRequest::post(body.clone())
                        .header("content-type", "application/json")
                        .header("x-vqs-queue-name", delivery.queue_name.clone())
                        .header("x-vqs-message-id", message_id.clone())
                        .header("x-vqs-message-attempt", attempt.to_string())
                        .retry(retry_policy())
                        .timeout(ANSWER_TIMEOUT);
                    // Signed under message id, attempt and queue, so a captured delivery cannot
                    // be replayed as another attempt or to another queue.
                    let signed_id = format!("{message_id}:{attempt}:{}", delivery.queue_name);
                    // The secret was checked when the workflow was registered.
                    let headers =
                        signature
                            .sign(&signed_id, body.as_bytes(), now)
                            .map_err(|e| {
                                WorkflowError::msg(format!("cannot sign the delivery: {e}"))
                            })?;
                    for (name, value) in headers {
                        request = request.header(name, value);
                    }
                    let response = match ctx.fetch(&delivery.url, request).await {
                    Ok(response) => response,
                    Err(e) if round < ROUNDS => {
                        ctx.warn(format!(
                            "delivery of {message_id} to {} failed ({e}); signing it afresh for round {}",
                            delivery.url,
                            round + 1
                        ));
                        round += 1;
                        attempt += 1;
                        continue;
                    }
                    Err(e) => {
                        return Err(WorkflowError::msg(format!(
                            "the app at {} did not take message {message_id} after {ROUNDS} rounds of retries: {e}",
                            delivery.url
                        )))
                    }
                };
                    match answer(response.status, &response.body) {
                        Answer::Taken => return Ok(attempt),
                        Answer::Later(seconds) => {
                            ctx.sleep(Duration::from_secs(seconds)).await?;
                            attempt += 1;
                            round = 1;
                        }
                        Answer::Refused => {
                            let mut text = response.body;
                            text.truncate(1_000);
                            return Err(WorkflowError::msg(format!(
                                "the app at {} refused message {message_id} with HTTP {}: {text}",
                                delivery.url, response.status
                            )));
                        }
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_the_devkit_means_them() {
        // (status, body, answer)
        let table = [
            (200, r#"{"ok":true}"#, Answer::Taken),
            (200, "", Answer::Taken),
            (204, "", Answer::Taken),
            (200, r#"{"timeoutSeconds":5}"#, Answer::Later(5)),
            (200, r#"{"timeoutSeconds":0.2}"#, Answer::Later(1)),
            (200, r#"{"timeoutSeconds":0}"#, Answer::Later(1)),
            (
                200,
                r#"{"timeoutSeconds":1e300}"#,
                Answer::Later(MAX_TIMEOUT_SECONDS),
            ),
            (200, r#"{"timeoutSeconds":"soon"}"#, Answer::Taken),
            (401, r#"{"code":"UNAUTHENTICATED"}"#, Answer::Refused),
            (404, "", Answer::Refused),
        ];
        for (status, body, expected) in table {
            assert_eq!(answer(status, body), expected, "{status} {body}");
        }
    }

    #[test]
    fn delays_are_whole_milliseconds_up_to_seven_days() {
        assert_eq!(delay_ms(None).unwrap(), None);
        assert_eq!(delay_ms(Some(0.0)).unwrap(), None);
        assert_eq!(delay_ms(Some(0.0001)).unwrap(), Some(1));
        assert_eq!(delay_ms(Some(1.5)).unwrap(), Some(1_500));
        assert_eq!(
            delay_ms(Some(MAX_DELAY_SECONDS as f64)).unwrap(),
            Some(MAX_DELAY_SECONDS * 1_000)
        );
        for bad in [
            -1.0,
            -0.001,
            f64::NAN,
            f64::INFINITY,
            MAX_DELAY_SECONDS as f64 + 0.5,
        ] {
            let e = delay_ms(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("delaySeconds"), "{bad}: {e}");
        }
    }

    #[test]
    fn queues_map_to_their_handler_routes() {
        assert_eq!(
            handler_url("http://localhost:3000/", "__wkf_workflow_w//a.ts//x").unwrap(),
            "http://localhost:3000/.well-known/workflow/v1/flow"
        );
        assert_eq!(
            handler_url("https://app.example", "__wkf_step_step//a.ts//add").unwrap(),
            "https://app.example/.well-known/workflow/v1/step"
        );
        assert!(handler_url("http://localhost:3000", "orders").is_err());
        assert!(handler_url("file:///etc", "__wkf_step_x").is_err());
    }

    #[test]
    fn one_round_of_retries_fits_in_a_signature_tolerance() {
        let policy = retry_policy();
        let total: Duration = (1..5).map(|attempt| policy.base_delay(attempt)).sum();
        assert!(total < Duration::from_secs(60), "{total:?}");
    }
}
