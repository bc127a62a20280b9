//! The workflow context: everything a workflow may do that touches the outside world, and the
//! [`CommandFuture`]s its calls return.
//!
//! Every call goes to the run through its [`RunDriver`]. The calls that take a definition
//! (`ctx.run`, `ctx.execute_child`) are with the definitions (`definitions.rs`), those that make
//! hooks with the hook handles (`hook_handles.rs`), and `get_writable` with the stream writers
//! (`streams.rs`).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::duration::IntoDuration;
use crate::model::{ActivityOptions, ValueKind, WorkflowOptions};
use crate::payload::Payload;
use crate::telemetry::logs::{world_log, LogLevel};

use super::activity::{ActivityContext, ActivityFn};
use super::driver::{CommandDesc, NewCommand, Resolution, RunDriver};
use super::errors::{ContextError, StepError, WorkflowError};

/// What a workflow knows about its own run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowMetadata {
    /// The workflow id.
    pub workflow_id: String,
    /// The run id (`wrun_…`).
    pub run_id: String,
    /// The workflow name.
    pub name: String,
    /// The parent run, for a child workflow.
    pub parent_id: Option<String>,
    /// When the run was accepted (ms since the Unix epoch).
    pub created_at: Millis,
    /// When the run first started executing.
    pub started_at: Millis,
    /// The workflow execution attempt, from 1.
    pub attempt: u32,
}

/// The handle a workflow function uses to run steps, sleep, start children and read time.
///
/// Every call is recorded in the run's history. After a crash or eviction the workflow function
/// runs again from the top, and each call returns its recorded result instead of doing the work
/// again. So a workflow must reach the outside world only through this context: no direct I/O,
/// no `SystemTime::now()`, no `tokio::time::sleep`, no unseeded randomness.
///
/// ```
/// use worlds_engine::prelude::*;
/// let add_one = activity("add-one", |_ctx: ActivityContext, n: u64| async move {
///     Ok::<_, StepError>(n + 1)
/// });
/// let step = add_one.clone();
/// let flow = workflow("count", move |ctx: WorkflowContext, n: u64| {
///     let step = step.clone();
///     async move {
///         let a = ctx.run(&step, n).await?;
///         ctx.sleep("1h").await?;              // durable: survives restarts
///         let b = ctx.run(&step, a).await?;
///         Ok::<_, WorkflowError>(b)
///     }
/// });
/// # let _ = flow;
/// ```
#[derive(Clone)]
pub struct WorkflowContext {
    /// The run the calls go to (the replay machine).
    pub(super) core: Arc<dyn RunDriver>,
}

impl std::fmt::Debug for WorkflowContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowContext")
            .field("run_id", &self.core.info().run_id)
            .finish()
    }
}

impl WorkflowContext {
    pub(crate) fn new(core: Arc<dyn RunDriver>) -> Self {
        Self { core }
    }

    /// Issues a command through the run (see [`RunDriver::issue`]).
    fn issue(&self, desc: CommandDesc, new: impl FnOnce(u32) -> NewCommand) -> u32 {
        self.core.issue(desc, Box::new(new))
    }

    /// The workflow id (caller-chosen, or the run id).
    pub fn workflow_id(&self) -> &str {
        &self.core.info().workflow_id
    }

    /// The run id (`wrun_…`).
    pub fn run_id(&self) -> &str {
        &self.core.info().run_id
    }

    /// The parent run id, if this is a child workflow.
    pub fn parent_id(&self) -> Option<&str> {
        self.core.info().parent_id.as_deref()
    }

    /// Facts about this run.
    pub fn get_metadata(&self) -> WorkflowMetadata {
        let info = self.core.info();
        WorkflowMetadata {
            workflow_id: info.workflow_id.clone(),
            run_id: info.run_id.clone(),
            name: info.name.clone(),
            parent_id: info.parent_id.clone(),
            created_at: info.created_at,
            started_at: info.started_at,
            attempt: info.attempt,
        }
    }

    /// True once cancellation of this run has been requested. The engine stops the run at its
    /// next await; code in a long loop between awaits can check this to stop early.
    pub fn is_cancelled(&self) -> bool {
        self.core.is_cancelled()
    }

    /// True while the workflow function is re-running code whose commands history already
    /// holds: after a restart, or when a run evicted from memory resumes, the function runs
    /// again from the top, and each call returns its recorded result. Code that does something
    /// other than a command (printing, counting) can check this to do it only once; for log
    /// lines, [`log`](Self::log) and its shorthands already do.
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    /// let flow = workflow("report", |ctx: WorkflowContext, n: u64| async move {
    ///     if !ctx.is_replaying() {
    ///         println!("starting with {n}"); // once, not again on every replay
    ///     }
    ///     ctx.sleep("1m").await?;
    ///     Ok::<_, WorkflowError>(n)
    /// });
    /// # let _ = flow;
    /// ```
    pub fn is_replaying(&self) -> bool {
        self.core.is_replaying()
    }

    /// Logs a line from workflow code, once: nothing is logged while the code
    /// [is replaying](Self::is_replaying) what history already holds, so a resumed run does not
    /// repeat its earlier lines. The line is a `tracing` event (category `workflow`, with the
    /// `run_id` and `workflow` fields) for the application's subscriber, and an entry in the
    /// world's log files whether or not a subscriber is installed.
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    /// use worlds_engine::telemetry::logs::LogLevel;
    /// let flow = workflow("ship", |ctx: WorkflowContext, order: u64| async move {
    ///     ctx.info(format!("shipping order {order}"));
    ///     ctx.sleep("1h").await?;
    ///     ctx.log(LogLevel::Debug, "shipped");
    ///     Ok::<_, WorkflowError>(order)
    /// });
    /// # let _ = flow;
    /// ```
    pub fn log(&self, level: LogLevel, message: impl AsRef<str>) {
        if self.is_replaying() {
            return;
        }
        let message = message.as_ref();
        let info = self.core.info();
        let (run_id, workflow) = (info.run_id.as_str(), info.name.as_str());
        let logs = self.core.logs();
        match level {
            LogLevel::Debug => {
                world_log!(
                    logs,
                    DEBUG,
                    Workflow,
                    message,
                    run_id = run_id,
                    workflow = workflow
                )
            }
            LogLevel::Info => {
                world_log!(
                    logs,
                    INFO,
                    Workflow,
                    message,
                    run_id = run_id,
                    workflow = workflow
                )
            }
            LogLevel::Warn => {
                world_log!(
                    logs,
                    WARN,
                    Workflow,
                    message,
                    run_id = run_id,
                    workflow = workflow
                )
            }
            LogLevel::Error => {
                world_log!(
                    logs,
                    ERROR,
                    Workflow,
                    message,
                    run_id = run_id,
                    workflow = workflow
                )
            }
        }
    }

    /// [`log`](Self::log) at level info: logged once, not again on replay.
    pub fn info(&self, message: impl AsRef<str>) {
        self.log(LogLevel::Info, message);
    }

    /// [`log`](Self::log) at level warn: logged once, not again on replay.
    pub fn warn(&self, message: impl AsRef<str>) {
        self.log(LogLevel::Warn, message);
    }

    /// [`log`](Self::log) at level error: logged once, not again on replay.
    pub fn error(&self, message: impl AsRef<str>) {
        self.log(LogLevel::Error, message);
    }

    /// Runs a registered activity by name; the result is deserialized into `O`.
    pub fn run_by_name<I, O>(&self, name: &str, input: I) -> CommandFuture<O>
    where
        I: Serialize,
        O: DeserializeOwned,
    {
        self.run_step(name, input, None)
    }

    pub(super) fn run_step<I: Serialize, O>(
        &self,
        name: &str,
        input: I,
        options: Option<ActivityOptions>,
    ) -> CommandFuture<O> {
        let encoded = Payload::encode(&input);
        let desc = CommandDesc::Activity {
            name: name.to_owned(),
        };
        match encoded {
            Ok(input) => {
                let position = self.issue(desc, |position| NewCommand::Activity {
                    position,
                    name: name.to_owned(),
                    input,
                    options: options.map(Box::new),
                    inline: false,
                });
                CommandFuture::new(self.core.clone(), position)
            }
            Err(e) => self.rejected(desc, "ctx.run", e.to_string()),
        }
    }

    /// Sleeps durably: the run is suspended (holding no worker, possibly evicted from memory)
    /// until the timer fires, even across restarts.
    ///
    /// Accepts `"250ms" | "5s" | "2m" | "1h"`, a number of milliseconds, or a `Duration`.
    pub fn sleep(&self, duration: impl IntoDuration) -> CommandFuture<()> {
        match duration.into_duration() {
            Ok(d) => {
                let ms = crate::clock::duration_ms(d);
                let clock = self.core.clock().clone();
                let position = self.issue(CommandDesc::Timer, |position| NewCommand::Timer {
                    position,
                    fire_at: clock.now_ms().saturating_add(ms),
                });
                CommandFuture::new(self.core.clone(), position)
            }
            Err(e) => self.rejected(CommandDesc::Timer, "ctx.sleep", e.to_string()),
        }
    }

    /// Sleeps durably until the given time (ms since the Unix epoch).
    pub fn sleep_until(&self, at: Millis) -> CommandFuture<()> {
        let position = self.issue(CommandDesc::Timer, |position| NewCommand::Timer {
            position,
            fire_at: at,
        });
        CommandFuture::new(self.core.clone(), position)
    }

    /// Runs a named step: `f` is the step's code, written in place instead of registered as an
    /// activity. It runs on a worker with the default activity options — so a failure is
    /// retried, 3 attempts in all with exponential backoff from 1 s, unless
    /// [`step_with`](Self::step_with) says otherwise — its result is recorded under `name`, and
    /// on replay the recorded result is returned without calling `f`.
    ///
    /// The name labels the step in history and is checked on replay: the step at this
    /// position must carry the same name every time, or the run fails as non-deterministic.
    /// So build names only from deterministic data (constants, the workflow input, earlier
    /// step results) — `format!("charge-{i}")` in a loop, never a time or a random value. Two
    /// calls with the same name are two steps.
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    /// let flow = workflow("greet", |ctx: WorkflowContext, name: String| async move {
    ///     let greeting = ctx
    ///         .step("make-greeting", move || {
    ///             let name = name.clone();
    ///             async move { Ok::<_, StepError>(format!("hello, {name}")) }
    ///         })
    ///         .await?;
    ///     Ok::<_, WorkflowError>(greeting)
    /// });
    /// # let _ = flow;
    /// ```
    pub fn step<T, F, Fut>(&self, name: impl Into<String>, f: F) -> CommandFuture<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    {
        self.step_inline(name.into(), None, move |_ctx| f())
    }

    /// [`step`](Self::step) with options (retry policy, timeouts, task queue), and the step's
    /// [`ActivityContext`] (attempt number, heartbeats, cancellation).
    pub fn step_with<T, F, Fut>(
        &self,
        name: impl Into<String>,
        options: ActivityOptions,
        f: F,
    ) -> CommandFuture<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: Fn(ActivityContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    {
        self.step_inline(name.into(), Some(options), f)
    }

    fn step_inline<T, F, Fut>(
        &self,
        name: String,
        options: Option<ActivityOptions>,
        f: F,
    ) -> CommandFuture<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: Fn(ActivityContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    {
        let desc = CommandDesc::Activity { name: name.clone() };
        if name.is_empty() {
            return self.rejected(desc, "ctx.step", "a step name must not be empty".to_owned());
        }
        let handler: ActivityFn = Arc::new(move |ctx, _input| {
            let work = f(ctx);
            Box::pin(async move {
                let output = work.await?;
                Payload::encode(&output).map_err(StepError::from)
            })
        });
        let position = self.issue(desc, |position| NewCommand::Activity {
            position,
            name,
            input: Payload::null(),
            options: options.map(Box::new),
            inline: true,
        });
        // Kept until the result is recorded; not needed if history already holds it.
        if !self.core.has_result(position) {
            self.core.register_step(position, handler);
        }
        CommandFuture::new(self.core.clone(), position)
    }

    /// Starts a registered child workflow by name and waits for its result.
    pub fn execute_child_by_name<I, O>(
        &self,
        name: &str,
        input: I,
        options: WorkflowOptions,
    ) -> CommandFuture<O>
    where
        I: Serialize,
        O: DeserializeOwned,
    {
        let desc = CommandDesc::Child {
            name: name.to_owned(),
        };
        match Payload::encode(&input) {
            Ok(input) => {
                let position = self.issue(desc, |position| NewCommand::Child {
                    position,
                    name: name.to_owned(),
                    input,
                    options,
                });
                CommandFuture::new(self.core.clone(), position)
            }
            Err(e) => self.rejected(desc, "ctx.execute_child", e.to_string()),
        }
    }

    /// Registers a saga compensation: workflow code that undoes what came before it, run if
    /// the workflow fails under the `compensate` failure strategy.
    ///
    /// Compensations run last-registered first. Each runs on its own: if one fails, its error
    /// is recorded and the others still run. They are workflow code, so they reach the world
    /// through the context they are given (usually `ctx.run` of an undo step), and their
    /// progress is recorded: after a restart mid-compensation, compensations that already ran
    /// are not run again.
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    /// let refund = activity("refund", |_ctx: ActivityContext, payment: String| async move {
    ///     Ok::<_, StepError>(())
    /// });
    /// let charge = activity("charge", |_ctx: ActivityContext, cents: u64| async move {
    ///     Ok::<_, StepError>(format!("pay-{cents}"))
    /// });
    /// let (refund_step, charge_step) = (refund.clone(), charge.clone());
    /// let order = workflow("order", move |ctx: WorkflowContext, cents: u64| {
    ///     let (refund, charge) = (refund_step.clone(), charge_step.clone());
    ///     async move {
    ///         let payment = ctx.run(&charge, cents).await?;
    ///         ctx.add_compensation(move |ctx| async move {
    ///             ctx.run(&refund, payment).await?;
    ///             Ok(())
    ///         });
    ///         Ok::<_, WorkflowError>(())
    ///     }
    /// })
    /// .with_options(WorkflowOptions::new().failure_strategy(FailureStrategy::Compensate));
    /// # let _ = order;
    /// ```
    pub fn add_compensation<F, Fut>(&self, compensation: F)
    where
        F: FnOnce(WorkflowContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), WorkflowError>> + Send + 'static,
    {
        self.core.add_compensation(Box::new(move |core| {
            Box::pin(compensation(WorkflowContext::new(core)))
        }));
    }

    /// Changes workflow code safely while runs are in flight: `true` where the run takes the
    /// code's new branch, `false` where its history was recorded by code without it.
    ///
    /// A run that reaches this call on code that has it records a marker and gets `true`, on
    /// every replay too. A run whose history already went past this point on older code gets
    /// `false` and replays the old branch unchanged. So new runs, and old runs that had not
    /// got this far, take the new branch; old runs that had, finish on the old one.
    ///
    /// ```
    /// use worlds_engine::prelude::*;
    ///
    /// # let (charge, charge_with_tax) = (
    /// #     activity("charge", |_c: ActivityContext, n: u64| async move { Ok::<_, StepError>(n) }),
    /// #     activity("charge-with-tax", |_c: ActivityContext, n: u64| async move { Ok::<_, StepError>(n) }),
    /// # );
    /// let flow = workflow("order", move |ctx: WorkflowContext, cents: u64| {
    ///     let (charge, charge_with_tax) = (charge.clone(), charge_with_tax.clone());
    ///     async move {
    ///         let charged = if ctx.patched("tax-2026") {
    ///             ctx.run(&charge_with_tax, cents).await?
    ///         } else {
    ///             ctx.run(&charge, cents).await?
    ///         };
    ///         Ok::<_, WorkflowError>(charged)
    ///     }
    /// });
    /// # let _ = flow;
    /// ```
    ///
    /// When no run on the old branch is left, replace the `if` by
    /// [`deprecate_patch`](Self::deprecate_patch) and the new branch; later, drop that call
    /// too (markers nobody asks about are passed over).
    pub fn patched(&self, id: &str) -> bool {
        self.core.patch(id)
    }

    /// Says that only patch `id`'s new branch is left: every run still in flight has passed
    /// this point on new code, or has not reached it. Keeps the histories that hold the
    /// marker replaying; a run that went past this point on the old code fails with
    /// non-determinism, so deploy it once [`patched`](Self::patched) has drained the old runs.
    pub fn deprecate_patch(&self, id: &str) {
        self.core.patch(id);
    }

    /// The current time (ms since the Unix epoch), recorded the first time and replayed after.
    pub fn now(&self) -> Millis {
        let clock = self.core.clock().clone();
        let value = self.core.issue_value(
            ValueKind::Now,
            Box::new(|| Payload::encode(&clock.now_ms()).unwrap_or_else(|_| Payload::null())),
        );
        value.decode().unwrap_or_default()
    }

    /// A random number in `[0, 1)`, recorded the first time and replayed after.
    pub fn random(&self) -> f64 {
        let value = self.core.issue_value(
            ValueKind::Random,
            Box::new(|| {
                Payload::encode(&rand::random::<f64>()).unwrap_or_else(|_| Payload::null())
            }),
        );
        value.decode().unwrap_or_default()
    }

    /// A fresh unique id (a ULID string), recorded the first time and replayed after.
    pub fn uuid(&self) -> String {
        let ids = self.core.ids().clone();
        let value = self.core.issue_value(
            ValueKind::Uuid,
            Box::new(|| {
                Payload::encode(&ids.ulid().to_string()).unwrap_or_else(|_| Payload::null())
            }),
        );
        value.decode().unwrap_or_default()
    }

    /// A command whose argument was refused: it still takes a position (so later positions
    /// stay stable) and resolves at once with the error.
    pub(super) fn rejected<O>(
        &self,
        desc: CommandDesc,
        call: &'static str,
        message: String,
    ) -> CommandFuture<O> {
        let position = self.core.issue_unrecorded(desc);
        let error = ContextError::InvalidArgument { call, message };
        self.core.resolve_now(position, Resolution::Error(error));
        CommandFuture::new(self.core.clone(), position)
    }
}

/// The pending result of a context call. Await it.
#[must_use = "a workflow command does nothing useful unless awaited"]
pub struct CommandFuture<T> {
    core: Arc<dyn RunDriver>,
    position: u32,
    _type: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for CommandFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandFuture")
            .field("position", &self.position)
            .finish()
    }
}

impl<T> CommandFuture<T> {
    pub(crate) fn new(core: Arc<dyn RunDriver>, position: u32) -> Self {
        Self {
            core,
            position,
            _type: PhantomData,
        }
    }

    /// The command's position in the workflow's program order.
    pub fn position(&self) -> u32 {
        self.position
    }
}

impl<T: DeserializeOwned> Future for CommandFuture<T> {
    type Output = Result<T, ContextError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.core.poll_slot(self.position, cx.waker()) {
            Some(Resolution::Value(payload)) => {
                Poll::Ready(payload.decode().map_err(|e| ContextError::Decode {
                    position: self.position,
                    message: e.to_string(),
                }))
            }
            Some(Resolution::Error(e)) => Poll::Ready(Err(e)),
            None => Poll::Pending,
        }
    }
}
