//! Bulk operations: cancel, retry or resume every run a filter matches, as a durable run.
//!
//! An operation is a run of the built-in workflow [`BULK_WORKFLOW`]. It walks the matching runs
//! oldest first, one page of [`PAGE_SIZE`] per step, acting on each run of the page; a page's
//! counts are the step's recorded result. So an operation survives a crash like any run: the
//! pages already recorded are not walked again, and the page in flight is walked again —
//! which is harmless, because each action is idempotent under the operation's id (a run this
//! operation already reopened is skipped, a cancelled run stays cancelled). The walk is by run
//! id, so runs leaving the filter as the operation acts on them (a retried run is no longer
//! `failed`) do not shift the pages, and runs created after the operation was submitted are not
//! in it (its filter is bounded by the submission time).

use std::sync::{Arc, Weak};

use serde::{Deserialize, Serialize};

use super::authoring::errors::StepError;
use crate::error::WorldError;
use crate::model::{ReopenRequest, ResolveData, RunStatus, WorkflowQueryFilter};

use super::authoring::context::WorkflowContext;
use super::authoring::definitions::{workflow, Workflow};
use super::authoring::errors::WorkflowError;
use super::Engine;

/// The name of the built-in workflow that runs bulk operations (registered in every world).
pub const BULK_WORKFLOW: &str = "worlds.bulk";
/// Runs acted on per step.
pub(crate) const PAGE_SIZE: usize = 100;
/// Refusals kept per page (the counts hold them all).
const REFUSALS_KEPT: usize = 20;
/// Refusals an operation's progress keeps, over all its pages.
const PROGRESS_REFUSALS_KEPT: usize = 100;

/// What a bulk operation does to each run its filter matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// Cancel the run (a finished one is skipped).
    Cancel,
    /// Retry a failed run from its failed part ([`ReopenRequest::retry`]).
    Retry,
    /// Resume a quarantined run ([`ReopenRequest::resume`]).
    Resume,
}

impl BulkAction {
    /// The lower-case name used in the API and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Cancel => "cancel",
            BulkAction::Retry => "retry",
            BulkAction::Resume => "resume",
        }
    }
}

impl std::fmt::Display for BulkAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A bulk operation: an action over the runs a filter matches
/// ([`World::bulk`](crate::World::bulk)).
///
/// ```
/// use worlds_engine::{BulkAction, BulkRequest, RunStatus, WorkflowQueryFilter};
///
/// let request = BulkRequest::new(
///     BulkAction::Retry,
///     WorkflowQueryFilter::new().status(RunStatus::Failed).workflow_name("checkout"),
/// )
/// .by("alice")
/// .reason("the payment provider is back");
/// assert_eq!(request.action, BulkAction::Retry);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkRequest {
    /// What to do to each run.
    pub action: BulkAction,
    /// Which runs: status, workflow name, workflow id prefix, code version, creation time
    /// range, quarantined. Its paging fields are ignored.
    pub filter: WorkflowQueryFilter,
    /// Who asked, recorded on each run it reopens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Why, recorded on each run it cancels or reopens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A name for the operation (its workflow id): submitting again under the same name
    /// answers the first operation instead of starting another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl BulkRequest {
    /// `action` over the runs `filter` matches.
    pub fn new(action: BulkAction, filter: WorkflowQueryFilter) -> Self {
        BulkRequest {
            action,
            filter,
            by: None,
            reason: None,
            name: None,
        }
    }

    /// Names the operation: submitting again under `name` answers the first one.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Records who asked.
    pub fn by(mut self, who: impl Into<String>) -> Self {
        self.by = Some(who.into());
        self
    }

    /// Records why.
    pub fn reason(mut self, why: impl Into<String>) -> Self {
        self.reason = Some(why.into());
        self
    }
}

/// A run a bulk operation could not act on, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkRefusal {
    /// The run.
    pub run_id: String,
    /// Why it was refused.
    pub error: String,
}

/// What one step of an operation did: its page of runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BulkPage {
    pub(crate) matched: u64,
    pub(crate) applied: u64,
    pub(crate) skipped: u64,
    pub(crate) refused: u64,
    pub(crate) refusals: Vec<BulkRefusal>,
    /// Where the next page starts; `None` after the last.
    pub(crate) next: Option<String>,
}

/// How far a bulk operation got ([`World::bulk_progress`](crate::World::bulk_progress)).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkProgress {
    /// The operation's id (its run id).
    pub id: String,
    /// The operation's run status: `running` until every page is done, then `completed`.
    pub status: Option<RunStatus>,
    /// Runs the filter matched so far.
    pub matched: u64,
    /// Runs acted on.
    pub applied: u64,
    /// Runs left as they were: already finished (cancel), already reopened by this
    /// operation, or in a status the action does not apply to.
    pub skipped: u64,
    /// Runs the action was refused for (the first few are in `refusals`).
    pub refused: u64,
    /// Why some runs were refused.
    pub refusals: Vec<BulkRefusal>,
    /// True once every page is done.
    pub done: bool,
}

impl BulkProgress {
    pub(crate) fn add(&mut self, page: &BulkPage) {
        self.matched += page.matched;
        self.applied += page.applied;
        self.skipped += page.skipped;
        self.refused += page.refused;
        let room = PROGRESS_REFUSALS_KEPT.saturating_sub(self.refusals.len());
        self.refusals
            .extend(page.refusals.iter().take(room).cloned());
    }
}

/// The operation's input: the request, and the time bound that keeps later runs out of it
/// (within its millisecond, the operation's own run id is the bound).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BulkInput {
    pub(crate) request: BulkRequest,
    /// Runs created after this millisecond are not in the operation.
    pub(crate) before: crate::clock::Millis,
}

/// The built-in workflow that runs bulk operations over `engine`'s runs.
pub(crate) fn bulk_workflow(engine: Weak<Engine>) -> Workflow<BulkInput, BulkProgress> {
    workflow(
        BULK_WORKFLOW,
        move |ctx: WorkflowContext, input: BulkInput| {
            let engine = engine.clone();
            async move {
                let input = Arc::new(input);
                let op = ctx.run_id().to_owned();
                let mut progress = BulkProgress {
                    id: op.clone(),
                    ..BulkProgress::default()
                };
                let mut cursor: Option<String> = None;
                for page in 0u64.. {
                    let (engine, input, op, from) =
                        (engine.clone(), input.clone(), op.clone(), cursor.clone());
                    let done: BulkPage = ctx
                        .step(format!("page {page}"), move || {
                            let (engine, input, op, from) =
                                (engine.clone(), input.clone(), op.clone(), from.clone());
                            async move {
                                let engine = engine
                                    .upgrade()
                                    .ok_or_else(|| StepError::msg("the world is shutting down"))?;
                                engine
                                    .bulk_page(&op, &input, from)
                                    .await
                                    .map_err(|e| StepError::msg(e.to_string()))
                            }
                        })
                        .await?;
                    progress.add(&done);
                    match done.next {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                progress.done = true;
                progress.status = Some(RunStatus::Completed);
                Ok::<_, WorkflowError>(progress)
            }
        },
    )
}

impl Engine {
    /// Acts on one page of the runs `input` matches, from `cursor`.
    pub(crate) async fn bulk_page(
        &self,
        op: &str,
        input: &BulkInput,
        cursor: Option<String>,
    ) -> Result<BulkPage, WorldError> {
        let request = &input.request;
        let mut filter = request.filter.clone();
        let bound = input.before.saturating_add(1);
        filter.started_before = Some(filter.started_before.map_or(bound, |b| b.min(bound)));
        filter.cursor = cursor;
        filter.offset = None;
        filter.limit = Some(PAGE_SIZE);
        filter.oldest_first = true;
        filter.resolve_data = ResolveData::None;
        let runs = self.store.list_runs(&filter).await?;
        let mut page = BulkPage {
            next: runs.has_more.then_some(runs.cursor).flatten(),
            ..BulkPage::default()
        };
        for run in runs.data {
            if run.id.as_str() >= op {
                // Created after the operation (ids grow with time, and the walk goes by id):
                // not in it, and neither is anything after.
                page.next = None;
                break;
            }
            if run.name == BULK_WORKFLOW {
                // Never an operation itself (a bulk cancel of running runs would cancel it).
                continue;
            }
            page.matched += 1;
            let acted = match request.action {
                BulkAction::Cancel => self.bulk_cancel(&run, request).await,
                BulkAction::Retry | BulkAction::Resume => self.bulk_reopen(op, &run, request).await,
            };
            match acted {
                Ok(true) => page.applied += 1,
                Ok(false) => page.skipped += 1,
                Err(e) => {
                    page.refused += 1;
                    if page.refusals.len() < REFUSALS_KEPT {
                        page.refusals.push(BulkRefusal {
                            run_id: run.id.clone(),
                            error: e.to_string(),
                        });
                    }
                }
            }
        }
        Ok(page)
    }

    /// Cancels one run; false if it had already finished.
    async fn bulk_cancel(
        &self,
        run: &crate::WorkflowState,
        request: &BulkRequest,
    ) -> Result<bool, WorldError> {
        if run.status.is_terminal() || run.status == RunStatus::Compensating {
            return Ok(false);
        }
        let reason = request
            .reason
            .clone()
            .unwrap_or_else(|| "cancelled by a bulk operation".to_owned());
        match self.cancel_run(&run.id, Some(reason)).await {
            Ok(()) => Ok(true),
            // It finished in the meantime.
            Err(WorldError::Conflict { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Retries or resumes one run under operation `op`; false if this operation already
    /// reopened it or it is not failed.
    async fn bulk_reopen(
        &self,
        op: &str,
        run: &crate::WorkflowState,
        request: &BulkRequest,
    ) -> Result<bool, WorldError> {
        if run.status != RunStatus::Failed {
            // Retried by this operation before a crash, or not failed at all: the run's own
            // history says which, and either way there is nothing to do.
            return Ok(false);
        }
        let mut reopen = match request.action {
            BulkAction::Resume => ReopenRequest::resume(),
            _ => ReopenRequest::retry(),
        }
        .operation(op);
        if self.registry.workflow(&run.name).is_none() {
            // Driven where its code is not (the `worlds` tool): the process that has it
            // replays the run when it picks it up.
            reopen = reopen.without_replay_check();
        }
        reopen.by = request.by.clone();
        reopen.reason = request.reason.clone();
        let reopened = self.reopen(&run.id, reopen).await?;
        Ok(!reopened.already)
    }
}
