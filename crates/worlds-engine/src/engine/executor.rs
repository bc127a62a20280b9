//! The workflow executor: advances one run as far as its history and code allow.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::error::{codes, StructuredError, WorldError};
use crate::model::{EventKind, RunStatus, WorkflowOptions, WorkflowState};
use crate::payload::Payload;
use crate::store::{Timer, TimerKind};

use super::context::WorkflowContext;
use super::definitions::WorkflowFuture;
use super::errors::WorkflowError;
use super::machine::{NewCommand, RunCore, RunInfo};
use super::{ActivityTask, Engine};

/// A run whose workflow future is alive in memory.
pub(crate) struct LiveRun {
    core: Arc<RunCore>,
    future: WorkflowFuture,
    /// The next history `seq` to ingest.
    next_seq: u64,
    /// The future has been polled at least once.
    polled: bool,
}

/// What became of a run after a workflow task.
enum Outcome {
    /// It waits for something; keep it (or evict it).
    Waiting(LiveRun),
    /// It reached a terminal status, or cannot go on here.
    Done,
}

impl Engine {
    /// Runs one workflow task: advances the run until its code waits on something not yet
    /// recorded, or until it finishes.
    pub(crate) async fn process_workflow(&self, run_id: &Arc<str>) {
        let cached = {
            let mut runs = self.runs.lock();
            let Some(slot) = runs.get_mut(&**run_id) else {
                return;
            };
            slot.queued = false;
            slot.executing = true;
            let cached = slot.cached.take();
            if cached.is_some() {
                self.cached_runs.fetch_sub(1, Ordering::Relaxed);
            }
            cached
        };
        let outcome = match cached {
            Some(live) => self.advance(live).await,
            None => match self.load(run_id).await {
                Ok(Some(live)) => {
                    if let Some(slot) = self.runs.lock().get_mut(&**run_id) {
                        slot.core = Some(live.core.clone());
                    }
                    self.advance(live).await
                }
                Ok(None) => Ok(Outcome::Done),
                Err(e) => Err(e),
            },
        };
        let again = {
            let mut runs = self.runs.lock();
            let Some(slot) = runs.get_mut(&**run_id) else {
                return;
            };
            slot.executing = false;
            match outcome {
                Ok(Outcome::Waiting(live)) if !self.config.evict_after_every_task => {
                    slot.cached = Some(live);
                    self.cached_runs.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Outcome::Waiting(_)) => {
                    slot.core = None;
                }
                Ok(Outcome::Done) => {
                    runs.remove(&**run_id);
                    return;
                }
                Err(e) => {
                    // Keep the slot, drop the machine: the next task for this run rebuilds it
                    // from the store.
                    tracing::warn!(run_id = %run_id, error = %e, "workflow task failed; the run resumes from its history on its next task");
                    slot.core = None;
                }
            }
            std::mem::take(&mut slot.dirty)
        };
        self.trim_cache(run_id);
        if again {
            self.schedule_workflow(run_id);
        }
    }

    /// Evicts cached runs beyond the configured bound; they resume by replay when needed.
    fn trim_cache(&self, just_ran: &str) {
        let limit = self.config.max_cached_runs;
        if self.cached_runs.load(Ordering::Relaxed) <= limit {
            return;
        }
        let mut runs = self.runs.lock();
        for (id, slot) in runs.iter_mut() {
            if self.cached_runs.load(Ordering::Relaxed) <= limit {
                break;
            }
            if &**id != just_ran && !slot.executing && slot.cached.take().is_some() {
                slot.core = None;
                self.cached_runs.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Rebuilds a run from its history (cold start or after eviction).
    async fn load(&self, run_id: &str) -> Result<Option<LiveRun>, WorldError> {
        let history = self.store.history(run_id, 0).await?;
        let state = WorkflowState::from_history(&history)?;
        if state.status.is_terminal() {
            return Ok(None);
        }
        let Some(def) = self.registry.workflow(&state.name) else {
            let error = StructuredError::new(format!(
                "workflow '{}' is not registered in this process; register it so the run can continue",
                state.name
            ))
            .with_code(codes::NOT_REGISTERED);
            self.finish_with(&state.id, EventKind::WorkflowFailed { error })
                .await?;
            return Ok(None);
        };
        let mut state = state;
        if state.status == RunStatus::Pending {
            let attempt = state.attempt + 1;
            let appended = self
                .append(run_id, vec![EventKind::WorkflowStarted { attempt }])
                .await?;
            for event in &appended.events {
                state.apply(event);
            }
        }
        let info = RunInfo {
            run_id: state.id.clone(),
            workflow_id: state.workflow_id.clone(),
            name: state.name.clone(),
            parent_id: state.parent_id.clone(),
            created_at: state.created_at,
            started_at: state.started_at.unwrap_or(state.created_at),
            attempt: state.attempt.max(1),
        };
        let core = Arc::new(RunCore::new(info, self.clock.clone(), self.ids.clone()));
        let input = state.input.clone().unwrap_or_else(Payload::null);
        let future = (def.handler)(WorkflowContext::new(core.clone()), input);
        // The history just read is the replay; only later events need reading again.
        for event in &history {
            core.ingest(event);
        }
        Ok(Some(LiveRun {
            core,
            future,
            next_seq: history.len() as u64,
            polled: false,
        }))
    }

    /// Reads events recorded since the run last looked, into its machine.
    /// Returns false if the run has finished.
    async fn catch_up(&self, live: &mut LiveRun) -> Result<bool, WorldError> {
        let events = self
            .store
            .history(&live.core.info.run_id, live.next_seq)
            .await?;
        let mut open = true;
        for event in &events {
            live.core.ingest(event);
            live.next_seq = event.seq + 1;
            if event.kind.is_terminal() {
                open = false;
            }
        }
        Ok(open)
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
                    self.finish(&live.core, result).await?;
                    return Ok(Outcome::Done);
                }
            }
            if let Some(divergence) = live.core.nondeterminism() {
                self.fail_nondeterministic(&live.core, divergence.to_structured())
                    .await?;
                return Ok(Outcome::Done);
            }
            let commands = live.core.take_new_commands();
            if !commands.is_empty() {
                let Some(recorded) = self.record_commands(&live.core, commands).await? else {
                    return Ok(Outcome::Done);
                };
                // Our own records follow straight on from what we have read unless someone
                // else appended in between; only then is a read of the store needed.
                if recorded.first().is_some_and(|e| e.seq == live.next_seq) {
                    for event in &recorded {
                        live.core.ingest(event);
                        live.next_seq = event.seq + 1;
                    }
                } else if !self.catch_up(&mut live).await? {
                    return Ok(Outcome::Done);
                }
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
                        self.fail_stuck(&live.core).await?;
                        return Ok(Outcome::Done);
                    }
                    return Ok(Outcome::Waiting(live));
                }
            }
        }
    }

    /// Records the commands the code issued, then acts on them (queue steps, arm timers, start
    /// children). Recording comes first: a crash in between re-issues work, never loses it.
    /// Returns the recorded events, or `None` if the run finished meanwhile.
    async fn record_commands(
        &self,
        core: &RunCore,
        commands: Vec<NewCommand>,
    ) -> Result<Option<Vec<crate::model::Event>>, WorldError> {
        let run_id = core.info.run_id.as_str();
        let mut events = Vec::with_capacity(commands.len());
        let mut steps = Vec::new();
        let mut timers = Vec::new();
        let mut children = Vec::new();
        for command in commands {
            match command {
                NewCommand::Activity {
                    position,
                    name,
                    input,
                    options,
                } => {
                    let activity_id = self.ids.step_id();
                    let refusal = if !self.registry.has_activity(&name) {
                        Some(
                            StructuredError::new(format!(
                                "activity '{name}' is not registered; register it with world.register(...)"
                            ))
                            .with_code(codes::NOT_REGISTERED),
                        )
                    } else {
                        self.check_payload(|| format!("input of step #{position} '{name}'"), &input)
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
                            name,
                            input,
                            attempt: 1,
                            options,
                        }),
                    }
                }
                NewCommand::Timer { position, fire_at } => {
                    events.push(EventKind::TimerScheduled { position, fire_at });
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
            }
        }
        let recorded = match self.append(run_id, events).await {
            Ok(appended) => appended.events,
            Err(WorldError::Conflict { .. } | WorldError::InvalidTransition { .. }) => {
                // The run finished (was cancelled) under us.
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        for step in steps {
            self.enqueue_activity(step);
        }
        for timer in timers {
            self.add_timer(timer).await?;
        }
        for (position, child_id, name, input, options) in children {
            self.start_child(run_id, position, child_id, &name, input, options)
                .await?;
        }
        Ok(Some(recorded))
    }

    async fn start_child(
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
            let code = match e.kind() {
                crate::error::ErrorKind::NotFound => codes::NOT_REGISTERED,
                crate::error::ErrorKind::PayloadTooLarge => codes::PAYLOAD_TOO_LARGE,
                _ => codes::CHILD_FAILED,
            };
            let error = StructuredError::new(format!("could not start child workflow: {e}"))
                .with_code(code);
            self.append(
                parent_id,
                vec![EventKind::ChildWorkflowFailed {
                    position,
                    child_id,
                    error,
                }],
            )
            .await?;
            self.schedule_workflow(parent_id);
        }
        Ok(())
    }

    /// The workflow function returned.
    async fn finish(
        &self,
        core: &RunCore,
        result: Result<Payload, WorkflowError>,
    ) -> Result<(), WorldError> {
        if let Err(divergence) = core.check_finished() {
            return self
                .fail_nondeterministic(core, divergence.to_structured())
                .await;
        }
        let run_id = &core.info.run_id;
        let kind = match result {
            Ok(output) => match self
                .check_payload(|| format!("output of workflow run {run_id}"), &output)
            {
                Ok(()) => EventKind::WorkflowCompleted { output },
                Err(e) => EventKind::WorkflowFailed {
                    error: StructuredError::new(e.to_string()).with_code(codes::PAYLOAD_TOO_LARGE),
                },
            },
            Err(error) => {
                let error = match error.downcast_ref::<super::errors::ContextError>() {
                    Some(e) => e.to_structured(),
                    None => error.to_structured(),
                };
                EventKind::WorkflowFailed { error }
            }
        };
        self.finish_with(run_id, kind).await
    }

    async fn fail_nondeterministic(
        &self,
        core: &RunCore,
        error: StructuredError,
    ) -> Result<(), WorldError> {
        tracing::error!(run_id = %core.info.run_id, error = %error, "run diverged from its history");
        self.finish_with(&core.info.run_id, EventKind::WorkflowFailed { error })
            .await
    }

    /// The workflow is pending, but on nothing the engine can resume: it awaited a future that
    /// is not a workflow command. Waiting forever would hide the bug, so the run fails.
    async fn fail_stuck(&self, core: &RunCore) -> Result<(), WorldError> {
        let error = StructuredError::new(
            "the workflow is waiting on something that is not a workflow command (such as \
             tokio::time::sleep, a channel or a direct network call), which the engine can \
             neither record nor resume; await ctx.sleep, a step or a child workflow instead",
        )
        .with_code(codes::NOT_A_COMMAND);
        tracing::error!(run_id = %core.info.run_id, "workflow awaits a non-durable future");
        self.finish_with(&core.info.run_id, EventKind::WorkflowFailed { error })
            .await
    }

    /// Records a terminal event and runs the terminal follow-ups.
    pub(crate) async fn finish_with(
        &self,
        run_id: &str,
        kind: EventKind,
    ) -> Result<(), WorldError> {
        match self.append(run_id, vec![kind]).await {
            Ok(_) => {
                let state = self
                    .store
                    .get_run(run_id, crate::model::ResolveData::All)
                    .await?;
                self.on_terminal(&state).await;
                Ok(())
            }
            // Cancelled (or otherwise finished) while the code ran: that outcome stands.
            Err(WorldError::Conflict { .. } | WorldError::InvalidTransition { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
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
