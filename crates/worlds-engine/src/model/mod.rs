//! The data model: run statuses, history events, materialized run state, options and queries.
//!
//! Everything here is plain data plus the rules that govern it (the status machine and how an
//! event changes a run's state). Stores and the engine share these rules, so every backend
//! materializes a history the same way.

mod event;
mod event_json;
mod flow;
mod hook;
pub mod keys;
mod options;
mod query;
mod reopen;
mod resumes;
mod retention;
mod runtime;
pub(crate) mod schedule;
mod state;
mod stored_options;
pub(crate) mod stream;
mod text;
mod waits;

pub use crate::status::RunStatus;
pub use event::{Event, EventKind, QueuedRun, ReopenAction, ValueKind, EVENT_FORMAT_VERSION};
pub use flow::{Pause, PauseTarget, MAX_PAUSE_NAME, MAX_PAUSE_TEXT};
pub(crate) use hook::DEFAULT_WEBHOOK_METHOD;
pub use hook::{HookState, HookStatus};
pub use options::{ActivityOptions, FailureStrategy, OnConflict, WorkflowOptions};
pub use query::{
    ListQuery, Page, ResolveData, SortOrder, StatusFilter, WorkflowQueryFilter, DEFAULT_PAGE_SIZE,
};
pub use reopen::{
    attempt_commands, attempt_view, plan_reopen, reopened_by, AttemptCommand, AttemptView,
    ReopenRequest, Reopened,
};
pub use resumes::{late_timers, resumptions, LateTimer, Resumption, LATE_TIMER_MS};
pub use retention::{EndedCursor, EndedRun, Kept, Removal, RemoveRun};
pub use runtime::{
    apply_attribute_changes, check_attribute_changes, AttributeChange, RuntimeInfo, MAX_ATTRIBUTES,
    MAX_ATTRIBUTE_KEY, MAX_ATTRIBUTE_VALUE,
};
pub use state::{ActivityState, ActivityStatus, CompensationState, PendingRetry, WorkflowState};
pub(crate) use text::check_text;
pub use waits::{waits, waits_paused, Wait, WaitOn, LATE_MS, QUEUED_MS};
