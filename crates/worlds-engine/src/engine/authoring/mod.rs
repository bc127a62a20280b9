//! The authoring side of the engine: what a user's workflow and step code touches.
//!
//! * [`context`]: [`WorkflowContext`](context::WorkflowContext), the handle workflow code
//!   issues its commands through, and the [`CommandFuture`](context::CommandFuture)s it awaits;
//! * [`activity`]: [`ActivityContext`](activity::ActivityContext), what step code sees of its
//!   attempt;
//! * [`definitions`]: [`Workflow`](definitions::Workflow), [`Activity`](definitions::Activity),
//!   the functions that make them and the calls that run them;
//! * [`hook_handles`]: [`Hook`](hook_handles::Hook) and [`Webhook`](hook_handles::Webhook), and
//!   the calls that create them;
//! * [`streams`]: the stream writers of workflow and step code;
//! * [`errors`]: the errors this code returns and is given.
//!
//! This side names nothing of the runtime that drives it (the executor, the replay machine,
//! the journal…): it reaches its run through traits the runtime implements — [`RunDriver`] for a
//! workflow's calls ([`driver`], with the commands they issue), and, for a step,
//! [`BeatSink`](activity::BeatSink) and [`StepStreams`](activity::StepStreams). The runtime, the
//! rest of `engine/`, uses this side; never the reverse.
//!
//! [`RunDriver`]: driver::RunDriver

pub(crate) mod activity;
pub(crate) mod context;
pub(crate) mod definitions;
pub(crate) mod driver;
pub(crate) mod errors;
pub(crate) mod hook_handles;
pub(crate) mod streams;
