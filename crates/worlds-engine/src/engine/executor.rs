//! The workflow executor: advances one run as far as its history and code allow.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;

use crate::clock::Millis;
use crate::error::{codes, StructuredError, WorldError};
use crate::model::{EventKind, RunStatus, WorkflowOptions, WorkflowState};
use crate::payload::Payload;
use crate::store::{Timer, TimerKind};

use super::authoring::context::WorkflowContext;
use super::authoring::definitions::WorkflowFuture;
use super::authoring::driver::{NewCommand, RunDriver};
use super::authoring::errors::{ContextError, WorkflowError};
use super::machine::RunCore;
use super::{ActivityTask, Engine};

/// Which code a live run is executing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// The workflow function.
    Main,
    /// Its saga compensations, after it failed.
    Compensating,
}

/// A run whose workflow future is alive in memory.
pub(crate) struct LiveRun {
    core: Arc<RunCore>,
    future: WorkflowFuture,
    phase: Phase,
    /// The run status as of the last event read.
    status: RunStatus,
    /// The next history `seq` to ingest.
    next_seq: u64,
    /// The future has been polled at least once.
    polled: bool,
}

/// How a workflow task ended, for its run's slot.
pub(crate) enum TaskEnd {
    /// The run waits for something: its live machine may be cached.
    Waiting(LiveRun),
    /// The run is not kept in memory (it waits for a restart, or the task failed).
    Idle,
    /// The run reached a terminal status.
    Done,
}

/// A run asleep on timers stays cached when it wakes within this many milliseconds of the
/// end of its task: replaying it on wake-up would cost more than the memory it holds meanwhile.
/// Longer sleeps hold nothing in memory.
pub(super) const SHORT_NAP_MS: Millis = 30_000;

impl LiveRun {
    /// Keeping it in memory until its next task saves a replay: true unless everything it waits
    /// for is a timer that is not due within [`SHORT_NAP_MS`] of `now`.
    pub(super) fn worth_keeping(&self, now: Millis) -> bool {
        match self.core.asleep_until() {
            None => true,
            Some(Some(at)) => at <= now.saturating_add(SHORT_NAP_MS),
            Some(None) => false,
        }
    }
}

/// What became of a run after a workflow task.
enum Outcome {
    /// It waits for something; keep it (or evict it).
    Waiting(LiveRun),
    /// It waits for a restart (the `retry` strategy): nothing to keep but its slot.
    Dormant,
    /// It reached a terminal status, or cannot go on here.
    Done,
}

/// What a finished workflow function leads to.
pub(super) enum Next {
    Done,
    Dormant,
    Compensate,
}

/// What loading a run from its history found.
enum Loaded {
    Live(LiveRun),
    Dormant,
    Finished,
}

impl Engine {
    /// Runs one workflow task: advances the run until its code waits on something not yet
    /// recorded, or until it finishes.
    pub(crate) async fn process_workflow(&self, run_id: &Arc<str>) {
        let Some(cached) = self.runs.begin_task(run_id) else {
            return;
        };
        self.workflow_task(run_id, cached).await;
    }

    /// Runs a workflow task of a run whose slot the caller holds as executing (taken with
    /// `begin_task`, or claimed at its start), starting from its cached live run if any.
    pub(super) async fn workflow_task(&self, run_id: &Arc<str>, cached: Option<Box<LiveRun>>) {
        let outcome = match cached {
            Some(live) => self.advance(*live).await,
            None => match self.load(run_id).await {
                Ok(Loaded::Live(live)) => {
                    self.runs.set_core(run_id, live.core.clone());
                    self.advance(live).await
                }
                Ok(Loaded::Dormant) => Ok(Outcome::Dormant),
                Ok(Loaded::Finished) => Ok(Outcome::Done),
                Err(e) => Err(e),
            },
        };
        let end = match outcome {
            Ok(Outcome::Waiting(live)) => TaskEnd::Waiting(live),
            Ok(Outcome::Dormant) => TaskEnd::Idle,
            Ok(Outcome::Done) => TaskEnd::Done,
            Err(e) => {
                // Keep the slot, drop the machine: the next task for this run rebuilds it from
                // the store (after a passing store failure, one is queued shortly).
                if !self.resync_if_passing(run_id, &e) {
                    tracing::warn!(run_id = %run_id, error = %e, "workflow task failed; the run resumes from its history on its next task");
                }
                TaskEnd::Idle
            }
        };
        self.runs.end_task(run_id, end);
    }

    /// Rebuilds a run from its history (cold start or after eviction).
    async fn load(&self, run_id: &str) -> Result<Loaded, WorldError> {
        // Our own records not yet durable included: see `catch_up`.
        let history = self.store.history_tip(run_id, 0).await?;
        let mut state = WorkflowState::from_history(&history)?;
        if state.status.is_terminal() {
            return Ok(Loaded::Finished);
        }
        self.check_readable(&state)?;
        if state.external {
            // Its code runs elsewhere: this engine only keeps its records.
            return Ok(Loaded::Dormant);
        }
        if state.retry_pending().is_some() {
            // Failed, waiting out the delay before its next attempt.
            return Ok(Loaded::Dormant);
        }
        let Some(def) = self.registry.workflow(&state.name) else {
            let error = StructuredError::new(format!(
                "workflow '{}' is not registered in this process; register it so the run can continue",
                state.name
            ))
            .with_code(codes::NOT_REGISTERED);
            self.finish_with(&state.id, vec![EventKind::WorkflowFailed { error }])
                .await?;
            return Ok(Loaded::Finished);
        };
        if state.status == RunStatus::Pending {
            if let Some(pause) = self
                .pauses
                .holding_run(&state.name, state.task_queue.as_deref())
            {
                // Held until the pause is lifted (see `flow.rs`).
                if self.pauses.hold_run(&pause.target, run_id) {
                    return Ok(Loaded::Dormant);
                }
            }
            let started = EventKind::WorkflowStarted {
                attempt: 1,
                first_position: 0,
            };
            // Not waited for: a start lost in a crash is recorded again by the next load.
            let appended = self.journal.append_nowait(run_id, vec![started]).await?;
            for event in &appended.events {
                state.apply(event);
            }
        }
        // Replay only the current attempt: a retried workflow starts over after the commands
        // of the attempts that failed (a reopened one with the records it kept of them).
        let attempt = crate::model::attempt_view(&history);
        let info = self.run_info(&state);
        let core = Arc::new(RunCore::new(
            info,
            self.clock.clone(),
            self.ids.clone(),
            self.hook_kit.clone(),
            self.local_steps.clone(),
            self.logs.clone(),
            attempt.base,
        ));
        core.set_stream_limit(self.config.max_payload_bytes);
        let input = state.input.clone().unwrap_or_else(Payload::null);
        let ctx = WorkflowContext::new(core.clone());
        let future: WorkflowFuture = Box::pin(super::ambient::in_workflow(
            ctx.clone(),
            (def.handler)(ctx, input),
        ));
        // The history just read is the replay; only later events need reading again.
        for event in attempt.events(&history) {
            core.ingest(event);
        }
        Ok(Loaded::Live(LiveRun {
            core,
            future,
            phase: Phase::Main,
            status: state.status,
            next_seq: history.len() as u64,
            polled: false,
        }))
    }

    /// Reads events recorded since the run last looked, into its machine.
    /// Returns false if the run has finished.
    ///
    /// Reads the store's tip: records this process made without waiting for them to be
    /// durable (a step's result, commands) count at once. That is safe because everything the
    /// run does next is recorded after them in the same ordered log: a step it starts is
    /// written (with them) before it runs, its end is synced (with them), anything else is
    /// lost with them in a crash and done again on replay.
    async fn catch_up(&self, live: &mut LiveRun) -> Result<bool, WorldError> {
        let events = self
            .store
            .history_tip(&live.core.info.run_id, live.next_seq)
            .await?;
        for event in &events {
            live.core.ingest(event);
            live.next_seq = event.seq + 1;
            if let Some(status) = event.kind.status_change() {
                live.status = status;
            }
        }
        Ok(!live.status.is_terminal())
    }

    async fn advance(&self, mut live: LiveRun) -> Result<Outcome, WorldError> {
        if !self.catch_up(&mut live).await? {
            return Ok(Outcome::Done);
        }
        let mut poll = !live.polled;
        loop {
            if poll {
                live.polled = true;
                if let Poll::Ready(result) = poll_workflow(&mut live) {
                    // Commands issued in the last poll (a compensation registered just before
                    // the failure, the outcome of the last compensation) are recorded first.
                    if !self.record_new_commands(&mut live).await? {
                        return Ok(Outcome::Done);
                    }
                    match live.phase {
                        Phase::Main => match self.finish(&live.core, result).await? {
                            Next::Done => return Ok(Outcome::Done),
                            Next::Dormant => return Ok(Outcome::Dormant),
                            Next::Compensate => {
                                live.future = compensation_future(&live.core);
                                live.phase = Phase::Compensating;
                                continue;
                            }
                        },
                        Phase::Compensating => {
                            self.finish_compensation(&live.core).await?;
                            return Ok(Outcome::Done);
                        }
                    }
                }
            }
            if let Some(divergence) = live.core.nondeterminism() {
                self.fail_nondeterministic(&live.core, live.phase, divergence.to_structured())
                    .await?;
                return Ok(Outcome::Done);
            }
            if !self.record_new_commands(&mut live).await? {
                return Ok(Outcome::Done);
            }
            poll = live.core.deliver_next();
            if !poll {
                // Results recorded by others while we worked are picked up now rather than
                // by another trip through the queue.
                if !self.catch_up(&mut live).await? {
                    return Ok(Outcome::Done);
                }
                poll = live.core.deliver_next();
                if !poll {
                    if !live.core.has_open_commands() {
                        self.fail_stuck(&live.core, live.phase).await?;
                        return Ok(Outcome::Done);
                    }
                    return Ok(Outcome::Waiting(live));
                }
            }
        }
    }

    /// Records the commands issued since the last call and reads them into the machine.
    /// Returns false if the run finished meanwhile.
    async fn record_new_commands(&self, live: &mut LiveRun) -> Result<bool, WorldError> {
        // Stream writes first: a step started below must not write before the workflow did.
        self.streams.flush_ops(&live.core).await;
        // Named steps parked until this replay registered their code can run now.
        for task in self.local_steps.take_released() {
            self.enqueue_activity(task);
        }
        let commands = live.core.take_new_commands();
        if commands.is_empty() {
            return Ok(true);
        }
        let Some(recorded) = self.record_commands(&live.core, commands).await? else {
            return Ok(false);
        };
        // Our own records follow straight on from what we have read unless someone else
        // appended in between; only then is a read of the store needed.
        if recorded.first().is_some_and(|e| e.seq == live.next_seq) {
            for event in &recorded {
                live.core.ingest(event);
                live.next_seq = event.seq + 1;
            }
            Ok(true)
        } else {
            self.catch_up(live).await
        }
    }

    /// Records the commands the code issued, then acts on them (queue steps, arm timers, start
    /// children). Recording comes first: a crash in between re-issues work, never loses it.
    /// Returns the recorded events, or `None` if the run finished meanwhile.
    async fn record_commands(
        &self,
        core: &RunCore,
        commands: Vec<NewCommand>,
    ) -> Result<Option<Vec<Arc<crate::model::Event>>>, WorldError> {
        let run_id = core.info.run_id.as_str();
        let mut events = Vec::with_capacity(commands.len());
        let mut steps = Vec::new();
        let mut timers = Vec::new();
        let mut children = Vec::new();
        let mut recorded_hooks = Vec::new();
        for command in commands {
            match command {
                NewCommand::Hook(hook) => match self.hooks.record(run_id, hook).await? {
                    Some(events) => recorded_hooks.extend(events),
                    None => return Ok(None),
                },
                NewCommand::Activity {
                    position,
                    name,
                    input,
                    options,
                    inline,
                } => {
                    let activity_id = self.ids.step_id();
                    let refusal = if !inline && !self.registry.has_activity(&name) {
                        Some(
                            StructuredError::new(format!(
                                "activity '{name}' is not registered; register it with world.register(...)"
                            ))
                            .with_code(codes::NOT_REGISTERED),
                        )
                    } else {
                        self.journal
                            .check_payload(|| format!("input of step #{position} '{name}'"), &input)
                            .err()
                            .map(|e| {
                                StructuredError::new(e.to_string())
                                    .with_code(codes::PAYLOAD_TOO_LARGE)
                            })
                    };
                    events.push(EventKind::ActivityScheduled {
                        position,
                        activity_id: activity_id.clone(),
                        name: name.clone(),
                        input: input.clone(),
                        options: options.clone(),
                        inline,
                    });
                    match refusal {
                        Some(error) => events.push(EventKind::ActivityFailed {
                            position,
                            attempt: 0,
                            error,
                            retrying: false,
                        }),
                        None => steps.push(ActivityTask {
                            run_id: run_id.into(),
                            workflow_id: core.info.workflow_id.clone(),
                            activity_id,
                            position,
                            name: name.into(),
                            input,
                            attempt: 1,
                            options,
                        }),
                    }
                }
                NewCommand::Timer { position, fire_at } => {
                    events.push(EventKind::TimerScheduled {
                        position,
                        fire_at,
                        timer_id: None,
                    });
                    timers.push(Timer {
                        fire_at,
                        run_id: run_id.to_owned(),
                        kind: TimerKind::Sleep { position },
                    });
                }
                NewCommand::Child {
                    position,
                    name,
                    input,
                    options,
                } => {
                    let child_id = self.ids.run_id();
                    events.push(EventKind::ChildWorkflowStarted {
                        position,
                        child_id: child_id.clone(),
                        name: name.clone(),
                        input: Some(input.clone()),
                        options: (options != WorkflowOptions::default())
                            .then(|| Box::new(options.clone())),
                    });
                    children.push((position, child_id, name, input, options));
                }
                NewCommand::Value {
                    position,
                    kind,
                    value,
                } => events.push(EventKind::ValueRecorded {
                    position,
                    kind,
                    value,
                }),
                NewCommand::Patch { position, patch_id } => {
                    events.push(EventKind::PatchRecorded { position, patch_id })
                }
                NewCommand::CompensationAdded {
                    position,
                    compensation_id,
                } => events.push(EventKind::CompensationAdded {
                    position,
                    compensation_id,
                }),
                NewCommand::CompensationOutcome {
                    position,
                    compensation_id,
                    error: None,
                } => events.push(EventKind::CompensationExecuted {
                    position,
                    compensation_id,
                }),
                NewCommand::CompensationOutcome {
                    position,
                    compensation_id,
                    error: Some(error),
                } => events.push(EventKind::CompensationFailed {
                    position,
                    compensation_id,
                    error,
                }),
            }
        }
        // Not waited for: a command lost in a crash is issued again when the code replays, and
        // whatever it leads to (a step's result, a timer firing) is recorded after it, durably.
        let recorded = match self.journal.append_nowait(run_id, events).await {
            Ok(appended) if recorded_hooks.is_empty() => appended.events,
            Ok(appended) => {
                recorded_hooks.extend(appended.events);
                recorded_hooks
            }
            Err(
                WorldError::Conflict { .. }
                | WorldError::InvalidTransition { .. }
                | WorldError::LeaseLost { .. },
            ) => {
                // The run finished (was cancelled) under us.
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        for step in steps {
            self.enqueue_activity(step);
        }
        for timer in timers {
            self.timers.add(timer).await?;
        }
        for (position, child_id, name, input, options) in children {
            self.start_child(run_id, position, child_id, &name, input, options)
                .await?;
        }
        Ok(Some(recorded))
    }

    pub(crate) async fn start_child(
        &self,
        parent_id: &str,
        position: u32,
        child_id: String,
        name: &str,
        input: Payload,
        options: WorkflowOptions,
    ) -> Result<(), WorldError> {
        let created = self
            .create_run(
                name,
                input,
                options,
                Some((parent_id.to_owned(), position)),
                Some(child_id.clone()),
            )
            .await;
        if let Err(e) = created {
            if super::resync::is_passing(&e) {
                // The store could not be reached: not the child's fault. The parent resumes
                // from its history, whose recovery creates the child if it is still missing.
                return Err(e);
            }
            let code = match e.kind() {
                crate::error::ErrorKind::NotFound => codes::NOT_REGISTERED,
                crate::error::ErrorKind::PayloadTooLarge => codes::PAYLOAD_TOO_LARGE,
                _ => codes::CHILD_FAILED,
            };
            let error = StructuredError::new(format!("could not start child workflow: {e}"))
                .with_code(code);
            self.journal
                .append(
                    parent_id,
                    vec![EventKind::ChildWorkflowFailed {
                        position,
                        child_id,
                        error,
                    }],
                )
                .await?;
            self.runs.schedule(parent_id);
        }
        Ok(())
    }
}

/// The code that runs a failed workflow's compensations, last registered first, each on its own.
fn compensation_future(core: &Arc<RunCore>) -> WorkflowFuture {
    let stack = core.take_compensations();
    let driver: Arc<dyn RunDriver> = core.clone();
    let scope = WorkflowContext::new(driver.clone());
    let core = core.clone();
    Box::pin(super::ambient::in_workflow(scope, async move {
        for (id, compensate) in stack.into_iter().rev() {
            let driver = driver.clone();
            // The call itself is inside the guard too: a closure may panic before it returns
            // its future.
            let outcome = AssertUnwindSafe(async move { compensate(driver).await })
                .catch_unwind()
                .await;
            let error = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(match e.downcast_ref::<ContextError>() {
                    Some(e) => e.to_structured(),
                    None => e.to_structured(),
                }),
                Err(panic) => Some(StructuredError::new(format!(
                    "compensation panicked: {}",
                    panic_message(&panic)
                ))),
            };
            core.record_compensation_outcome(id, error);
        }
        Ok(Payload::null())
    }))
}

/// Polls the workflow future once. A panic in workflow code fails the run instead of the worker.
fn poll_workflow(live: &mut LiveRun) -> Poll<Result<Payload, WorkflowError>> {
    // Results are handed over by `deliver_next`, which is always followed by a poll, so the
    // top-level waker has nothing to do. Wakers of individual commands are still registered
    // and woken, which is what `FuturesUnordered` and friends rely on.
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let future = &mut live.future;
    match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx))) {
        Ok(poll) => poll,
        Err(panic) => Poll::Ready(Err(WorkflowError::msg(format!(
            "workflow code panicked: {}",
            panic_message(&panic)
        )))),
    }
}

pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}
