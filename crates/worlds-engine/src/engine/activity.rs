//! Activity execution: one attempt at a time, with timeout, heartbeat watch and retries. The
//! context step code sees, [`ActivityContext`], is on the authoring side
//! (`engine/authoring/activity.rs`).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::error::{codes, StructuredError, WorldError};
use crate::model::EventKind;
use crate::payload::Payload;
use crate::retry::{classify, RetryClass};
use crate::store::{Timer, TimerKind};

use super::authoring::activity::{ActivityContext, ActivityFn, StepSetup};
use super::authoring::errors::StepError;
use super::{ActivityTask, Engine};

enum AttemptEnd {
    Returned(Result<Payload, StepError>),
    TimedOut(Duration),
    HeartbeatLost(Duration),
    Cancelled,
}

impl Engine {
    /// Runs one attempt of an activity and records what came of it.
    pub(crate) async fn run_activity(self: &Arc<Self>, task: ActivityTask) {
        let run_id = task.run_id.clone();
        if self.sealed_without_keys(&task.input) {
            // Stored encrypted, and this world has no keys: running it would fail the step on
            // an input its code cannot read. Left alone, for a process that has the keys.
            tracing::error!(run_id = %run_id, position = task.position, "the step's input is encrypted and this world has no encryption keys: configure WorldConfig::encryption_keys (or {}) to run it", crate::ENCRYPTION_KEYS_ENV);
            return;
        }
        let Some((handler, task)) = self.step_handler(task).await else {
            return;
        };
        // An attempt on a paused task queue waits for the pause to be lifted (see `flow.rs`).
        let queue = task
            .options
            .as_ref()
            .and_then(|o| o.task_queue.as_deref().map(Arc::<str>::from))
            .or_else(|| self.runs.task_queue_of(&run_id));
        let task = match self.pauses.holding_step(queue.as_deref()) {
            Some(pause) => match self.pauses.hold_step(&pause.target, task, queue) {
                Some(task) => task,
                None => return,
            },
            None => task,
        };
        // Held until the start is recorded: a run read back from its history waits for it
        // (see `run_steps.rs`).
        let Some(permit) = self.runs.start_permit(&run_id) else {
            return;
        };
        let token = permit.token().clone();
        // Written before the activity runs: an attempt that may have run is on record, so a
        // crash of the process during it counts against the retry policy (`WORKER_LOST`)
        // instead of going unnoticed, even a step that kills the process every time. Not
        // synced: the sync of the next waited write (at the latest the run's end) covers it.
        let started = self
            .journal
            .append_written(
                &run_id,
                vec![EventKind::ActivityStarted {
                    position: task.position,
                    attempt: task.attempt,
                }],
            )
            .await;
        drop(permit);
        if let Err(e) = started {
            // A duplicate of a task already taken, or the run finished: nothing to do. Unless
            // the store could not be reached: then the run resumes from its history.
            self.resync_if_passing(&run_id, &e);
            return;
        }
        // Step code starts only under a lease this process knows it holds. One that cannot
        // vouch for its lease by its own clock (its heartbeat lapsed: it was paused, or cut off
        // from the store) asks the store, and leaves a run another process took over to it:
        // that process may have run and recorded this step already.
        if !self.store.lease_confirmed(&run_id) {
            if let Err(e) = self.store.confirm_lease(&run_id).await {
                tracing::warn!(run_id = %run_id, position = task.position, attempt = task.attempt, error = %e, "not starting the step: this process could not confirm it still holds the run's lease");
                self.resync_if_passing(&run_id, &e);
                return;
            }
        }
        let options = self.activity_options(&task.name, task.options.as_deref());
        let ctx = self.activity_context(&task, token.clone());
        let start = self.clock.now_ms();
        self.progress
            .running_activities
            .fetch_add(1, Ordering::AcqRel);
        // Step code makes no follow-up for this worker: a run it starts must not wait for it.
        let work = AssertUnwindSafe(super::handoff::closed(super::ambient::in_step(
            ctx.clone(),
            handler(ctx.clone(), task.input.clone()),
        )))
        .catch_unwind();
        let timeout = async {
            match options.timeout {
                Some(d) => {
                    self.clock
                        .sleep_until(start.saturating_add(crate::clock::duration_ms(d.0)))
                        .await;
                    d.0
                }
                None => futures::future::pending().await,
            }
        };
        let heartbeat_watch = async {
            match options.heartbeat_timeout {
                Some(d) => loop {
                    let last = ctx.last_beat();
                    self.clock
                        .sleep_until(last.saturating_add(crate::clock::duration_ms(d.0)))
                        .await;
                    if ctx.last_beat() == last {
                        break d.0;
                    }
                },
                None => futures::future::pending().await,
            }
        };
        let mut work = std::pin::pin!(work);
        let end = tokio::select! {
            biased;
            _ = token.cancelled() => {
                // Cooperative cancellation: the attempt sees `is_cancelled()` and may clean up
                // for a short grace period; its result is discarded either way.
                let grace = self.clock.sleep(self.config.cancel_grace.0);
                tokio::select! {
                    _ = &mut work => {}
                    _ = grace => {}
                }
                AttemptEnd::Cancelled
            }
            result = &mut work => AttemptEnd::Returned(match result {
                Ok(result) => result,
                Err(panic) => Err(StepError::msg(format!(
                    "activity panicked: {}",
                    super::executor::panic_message(&panic)
                ))),
            }),
            d = timeout => AttemptEnd::TimedOut(d),
            d = heartbeat_watch => AttemptEnd::HeartbeatLost(d),
        };
        self.progress
            .running_activities
            .fetch_sub(1, Ordering::AcqRel);
        // Every beat sent before the attempt ended goes into history before its result.
        ctx.flush_beats().await;
        match end {
            AttemptEnd::Cancelled => {}
            AttemptEnd::Returned(Ok(output)) => {
                let check = self.journal.check_payload(
                    || format!("output of step #{} '{}'", task.position, task.name),
                    &output,
                );
                match check {
                    Ok(()) => {
                        // Not waited for: the workflow reads it from the store's tip, and what
                        // it does next is recorded after it in the same ordered log (the next
                        // step's start written, the run's end synced, along with this). A
                        // crash before then loses the result of an attempt whose start is on
                        // record: it counts as lost and runs again, as at-least-once allows.
                        let done = self
                            .journal
                            .append_nowait(
                                &run_id,
                                vec![EventKind::ActivityCompleted {
                                    position: task.position,
                                    attempt: task.attempt,
                                    output,
                                }],
                            )
                            .await;
                        match done {
                            Ok(_) => {
                                self.local_steps.forget(&run_id, task.position);
                                self.runs.schedule(&run_id);
                            }
                            Err(e) => {
                                self.resync_if_passing(&run_id, &e);
                            }
                        }
                    }
                    Err(e) => {
                        let error =
                            StructuredError::new(e.to_string()).with_code(codes::PAYLOAD_TOO_LARGE);
                        self.record_failure(&task, error).await;
                    }
                }
            }
            AttemptEnd::Returned(Err(error)) => {
                let class = classify(error.as_error());
                let mut stored = error.to_structured();
                if class == RetryClass::Fatal && stored.code.is_none() {
                    stored.code = Some(codes::FATAL.to_owned());
                }
                let retry_after = match class {
                    RetryClass::Fatal => None,
                    RetryClass::Retry { after } => Some(after),
                };
                self.record_attempt_failure(&task, &options, stored, retry_after)
                    .await;
            }
            AttemptEnd::TimedOut(d) => {
                let error = StructuredError::new(format!(
                    "activity '{}' timed out after {} ms",
                    task.name,
                    d.as_millis()
                ))
                .with_code(codes::TIMEOUT);
                self.record_attempt_failure(&task, &options, error, Some(None))
                    .await;
            }
            AttemptEnd::HeartbeatLost(d) => {
                let error = StructuredError::new(format!(
                    "activity '{}' sent no heartbeat for {} ms (its heartbeat timeout)",
                    task.name,
                    d.as_millis()
                ))
                .with_code(codes::HEARTBEAT_TIMEOUT);
                self.record_attempt_failure(&task, &options, error, Some(None))
                    .await;
            }
        }
    }

    /// Records a failed attempt: schedules a retry if the policy allows (`retry_after` is
    /// `Some`), else fails the step for good.
    pub(crate) async fn record_attempt_failure(
        &self,
        task: &ActivityTask,
        options: &crate::model::ActivityOptions,
        mut error: StructuredError,
        retry_after: Option<Option<Duration>>,
    ) {
        let policy = options.retry.clone().unwrap_or_default();
        let Some(own_delay) = retry_after else {
            self.record_failure(task, error).await;
            return;
        };
        if !policy.should_attempt(task.attempt) {
            if error.code.is_none() {
                error.code = Some(codes::RETRIES_EXHAUSTED.to_owned());
            }
            self.record_failure(task, error).await;
            return;
        }
        let delay = own_delay.unwrap_or_else(|| policy.delay(task.attempt));
        let delay_ms = crate::clock::duration_ms(delay).max(0) as u64;
        let next = task.attempt + 1;
        let recorded = self
            .journal
            .append(
                &task.run_id,
                vec![
                    EventKind::ActivityFailed {
                        position: task.position,
                        attempt: task.attempt,
                        error,
                        retrying: true,
                    },
                    EventKind::ActivityRetry {
                        position: task.position,
                        attempt: next,
                        delay_ms,
                    },
                ],
            )
            .await;
        if let Err(e) = recorded {
            // Refused (the run ended, the attempt was settled elsewhere): nothing to do. Not
            // reached (the store went away): the attempt would stay "running" with nothing to
            // end it, so the run is resumed from its history, which settles it again.
            self.resync_if_passing(&task.run_id, &e);
            return;
        }
        let timer = Timer {
            fire_at: self.clock.now_ms().saturating_add(delay_ms as i64),
            run_id: task.run_id.to_string(),
            kind: TimerKind::ActivityRetry {
                position: task.position,
                attempt: next,
            },
        };
        if let Err(e) = self.timers.add(timer).await {
            if !self.resync_if_passing(&task.run_id, &e) {
                tracing::error!(run_id = %task.run_id, error = %e, "could not arm the retry timer");
            }
        }
    }

    /// The code to run for an attempt: a named step's closure, or a registered activity's
    /// handler. A named step whose closure is not here yet (its workflow has not replayed to it
    /// since a restart) is parked until the replay registers it; an unknown activity fails.
    async fn step_handler(
        self: &Arc<Self>,
        task: ActivityTask,
    ) -> Option<(ActivityFn, ActivityTask)> {
        if let Some(step) = self.local_steps.get(&task.run_id, task.position) {
            return Some((step, task));
        }
        if let Some(def) = self.registry.activity(&task.name) {
            return Some((def.handler, task));
        }
        let inline = self
            .store
            .get_activity(&task.run_id, task.position)
            .await
            .is_ok_and(|a| a.inline);
        if inline {
            let run_id = task.run_id.clone();
            match self.local_steps.park(task) {
                None => {
                    self.runs.schedule(&run_id);
                    return None;
                }
                Some(task) => {
                    let step = self.local_steps.get(&task.run_id, task.position)?;
                    return Some((step, task));
                }
            }
        }
        let error = StructuredError::new(format!(
            "activity '{}' is not registered in this process",
            task.name
        ))
        .with_code(codes::NOT_REGISTERED);
        self.record_failure(&task, error).await;
        None
    }

    /// Records the final failure of a step and wakes its workflow.
    async fn record_failure(&self, task: &ActivityTask, error: StructuredError) {
        let done = self
            .journal
            .append(
                &task.run_id,
                vec![EventKind::ActivityFailed {
                    position: task.position,
                    attempt: task.attempt,
                    error,
                    retrying: false,
                }],
            )
            .await;
        if let Err(e) = &done {
            self.resync_if_passing(&task.run_id, e);
        }
        if done.is_ok() {
            self.local_steps.forget(&task.run_id, task.position);
            self.runs.schedule(&task.run_id);
        }
    }

    /// Re-queues an activity whose retry delay has passed.
    pub(crate) async fn retry_activity(
        &self,
        run_id: &str,
        position: u32,
        attempt: u32,
    ) -> Result<(), WorldError> {
        let state = self.store.get_activity(run_id, position).await?;
        let workflow_id = self.runs.workflow_id(run_id).unwrap_or_default();
        self.enqueue_activity(ActivityTask::from_state(
            run_id.into(),
            workflow_id,
            &state,
            attempt,
        ));
        Ok(())
    }

    fn activity_context(
        self: &Arc<Self>,
        task: &ActivityTask,
        cancel: CancellationToken,
    ) -> ActivityContext {
        let beats = super::beats::BeatLog::new(
            Arc::downgrade(&self.journal),
            task.run_id.clone(),
            task.position,
            task.attempt,
        );
        ActivityContext::new(StepSetup {
            activity_id: task.activity_id.clone(),
            workflow_id: task.workflow_id.clone(),
            run_id: String::from(&*task.run_id),
            name: String::from(&*task.name),
            attempt: task.attempt,
            cancel,
            clock: self.clock.clone(),
            record: Box::new(beats),
            record_every: crate::clock::duration_ms(self.config.heartbeat_interval.0),
            hooks: self.hook_kit.clone(),
            resources: self.resources.clone(),
            streams: self.streams.sink(&task.run_id),
        })
    }
}
