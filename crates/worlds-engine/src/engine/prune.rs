//! Retention sweeps: removing the finished runs the world's policy lets go, as a durable run.
//!
//! A sweep is a run of the built-in workflow [`PRUNE_WORKFLOW`]. Its input fixes the policy and
//! the time it judges by, so a sweep resumed after a crash judges every run as it would have.
//! It walks the finished runs by end time ([`RetentionStore::ended_runs`]), one page of
//! [`PAGE_SIZE`] per step, asking the policy about each ([`RetentionConfig::verdict`]) and the
//! store to remove those it lets go ([`RetentionStore::remove_runs`], which re-checks under the
//! store's own lock that the run has finished, ended before the bound, and has no unfinished
//! parent or child). A page's counts are its step's recorded result, so the pages already done
//! are not walked again; the page in flight is, harmlessly: a run removed before the crash is
//! [`Removal::Gone`] the second time and is not counted again.
//!
//! What stays, whatever the policy: unfinished runs; runs whose parent or a child is
//! unfinished; runs whose idempotency key still answers starts; failed runs while a bulk
//! retry or resume submitted after them is open (it may be about to reopen them).
//!
//! [`RetentionStore::ended_runs`]: crate::store::RetentionStore::ended_runs
//! [`RetentionStore::remove_runs`]: crate::store::RetentionStore::remove_runs

use std::sync::{Arc, Weak};

use serde::{Deserialize, Serialize};

use super::authoring::context::WorkflowContext;
use super::authoring::definitions::{workflow, Workflow};
use super::authoring::errors::{StepError, WorkflowError};
use super::bulk::{BulkAction, BulkInput, BULK_WORKFLOW};
use super::Engine;
use crate::clock::Millis;
use crate::config::{RetentionConfig, RetentionVerdict};
use crate::error::WorldError;
use crate::model::{ResolveData, WorkflowQueryFilter};
use crate::status::RunStatus;
use crate::store::{EndedCursor, EndedRun, Removal, RemoveRun};

/// The name of the built-in workflow that runs retention sweeps (registered in every world).
pub const PRUNE_WORKFLOW: &str = "worlds.prune";
/// Finished runs looked at per step.
pub(crate) const PAGE_SIZE: usize = 200;
/// Runs a sweep asks the store to remove in one call.
const REMOVAL_BATCH: usize = 25;

/// What a sweep did, or (for a preview) would do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReport {
    /// The sweep's run id; `None` for a preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// True for a preview: nothing was removed.
    pub dry_run: bool,
    /// The time the policy judged by (ms since the Unix epoch).
    pub at: Millis,
    /// The sweep's run status; `None` for a preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    /// Finished runs looked at.
    pub looked_at: u64,
    /// Runs removed (a preview: that would be removed).
    pub removed: u64,
    /// Events of their histories.
    pub events: u64,
    /// A preview only: the bytes those events take, as stored (before compression and
    /// encryption overhead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Runs the policy keeps for now (or for ever).
    pub kept_by_policy: u64,
    /// Runs the policy lets go but that are still in use: a parent or child unfinished, or
    /// reopened since they were listed.
    pub kept_in_use: u64,
    /// Failed runs kept while a bulk retry or resume that may reopen them is open.
    pub kept_for_bulk: u64,
    /// Runs already removed when the sweep came to them (a sweep resumed after a crash).
    pub already_gone: u64,
    /// Runs written to the archive before their removal (when the policy has an
    /// `archive_dir`).
    #[serde(default)]
    pub archived: u64,
    /// The earliest time a run the policy kept may go, if any was kept for a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_due: Option<Millis>,
    /// True once every page is done.
    pub done: bool,
}

impl PruneReport {
    pub(crate) fn add(&mut self, page: &PrunePage) {
        self.looked_at += page.looked_at;
        self.removed += page.removed;
        self.events += page.events;
        if let Some(bytes) = page.bytes {
            self.bytes = Some(self.bytes.unwrap_or(0) + bytes);
        }
        self.kept_by_policy += page.kept_by_policy;
        self.kept_in_use += page.kept_in_use;
        self.kept_for_bulk += page.kept_for_bulk;
        self.already_gone += page.already_gone;
        self.archived += page.archived;
        self.next_due = match (self.next_due, page.next_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// What one step of a sweep did: its page of finished runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PrunePage {
    pub(crate) looked_at: u64,
    pub(crate) removed: u64,
    pub(crate) events: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bytes: Option<u64>,
    pub(crate) kept_by_policy: u64,
    pub(crate) kept_in_use: u64,
    pub(crate) kept_for_bulk: u64,
    pub(crate) already_gone: u64,
    #[serde(default)]
    pub(crate) archived: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) next_due: Option<Millis>,
    /// Where the next page starts; `None` after the last.
    pub(crate) next: Option<EndedCursor>,
}

/// A sweep's input: the policy and the time it judges by.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PruneInput {
    pub(crate) policy: RetentionConfig,
    pub(crate) now: Millis,
    /// How long an idempotency key answers starts.
    pub(crate) idempotency_ttl: crate::duration::Dur,
}

/// The built-in workflow that runs retention sweeps over `engine`'s runs.
pub(crate) fn prune_workflow(engine: Weak<Engine>) -> Workflow<PruneInput, PruneReport> {
    workflow(
        PRUNE_WORKFLOW,
        move |ctx: WorkflowContext, input: PruneInput| {
            let engine = engine.clone();
            async move {
                let input = Arc::new(input);
                let mut report = PruneReport {
                    id: Some(ctx.run_id().to_owned()),
                    at: input.now,
                    ..PruneReport::default()
                };
                let mut cursor: Option<EndedCursor> = None;
                for page in 0u64.. {
                    let (engine, input, from) = (engine.clone(), input.clone(), cursor.clone());
                    let done: PrunePage = ctx
                        .step(format!("page {page}"), move || {
                            let (engine, input, from) =
                                (engine.clone(), input.clone(), from.clone());
                            async move {
                                let engine = engine
                                    .upgrade()
                                    .ok_or_else(|| StepError::msg("the world is shutting down"))?;
                                engine
                                    .prune_page(&input, from, false)
                                    .await
                                    .map_err(|e| StepError::msg(e.to_string()))
                            }
                        })
                        .await?;
                    report.add(&done);
                    match done.next {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                report.done = true;
                report.status = Some(RunStatus::Completed);
                Ok::<_, WorkflowError>(report)
            }
        },
    )
}

use crate::clock::duration_ms as ms;

impl Engine {
    /// The input of a sweep judging by `policy` (the world's when `None`) at the current time.
    pub(crate) fn prune_input(&self, policy: Option<RetentionConfig>) -> PruneInput {
        let config = self.config();
        PruneInput {
            policy: policy.unwrap_or_else(|| config.retention.clone()),
            now: self.now_ms(),
            idempotency_ttl: config.idempotency_ttl,
        }
    }

    /// Looks at one page of finished runs from `cursor` and removes those `input`'s policy
    /// lets go (with `dry_run`, only counts them, and the bytes their histories take).
    pub(crate) async fn prune_page(
        &self,
        input: &PruneInput,
        cursor: Option<EndedCursor>,
        dry_run: bool,
    ) -> Result<PrunePage, WorldError> {
        let mut page = PrunePage::default();
        let Some(horizon) = input.policy.horizon() else {
            return Ok(page);
        };
        // A run that ended after `now - horizon` is kept by every rule.
        let before = input.now.saturating_sub(ms(horizon)).saturating_add(1);
        let runs = self
            .store
            .ended_runs(before, cursor.as_ref(), PAGE_SIZE)
            .await?;
        if runs.len() == PAGE_SIZE {
            page.next = runs.last().map(EndedRun::cursor);
        }
        if dry_run {
            page.bytes = Some(0);
        }
        let bulk_bound = self.open_bulk_reopen_bound().await?;
        let ttl = input.idempotency_ttl.0;
        let mut removable = Vec::new();
        // How long past its due time the oldest run this page removes is: a sweep that has
        // fallen behind takes a larger share (`clock::pace::catch_up`).
        let mut overdue: Millis = 0;
        for run in &runs {
            page.looked_at += 1;
            let ended_before = match input.policy.verdict(run, input.now, ttl) {
                RetentionVerdict::Remove { ended_before, due } => {
                    overdue = overdue.max(input.now.saturating_sub(due));
                    ended_before
                }
                RetentionVerdict::KeepUntil { at } => {
                    page.kept_by_policy += 1;
                    page.next_due = Some(page.next_due.map_or(at, |due| due.min(at)));
                    continue;
                }
                RetentionVerdict::KeepForever => {
                    page.kept_by_policy += 1;
                    continue;
                }
            };
            let may_reopen = matches!(run.status, RunStatus::Failed | RunStatus::Compensated);
            if may_reopen && bulk_bound.is_some_and(|bound| run.created_at <= bound) {
                page.kept_for_bulk += 1;
                continue;
            }
            removable.push(RemoveRun::new(run.run_id.clone(), ended_before));
        }
        if dry_run {
            for run in removable {
                let history = self.store.history(&run.run_id, 0).await?;
                page.removed += 1;
                page.events += history.len() as u64;
                let bytes: usize = history
                    .iter()
                    .map(|event| serde_json::to_vec(&**event).map_or(0, |v| v.len() + 1))
                    .sum();
                page.bytes = Some(page.bytes.unwrap_or(0) + bytes as u64);
            }
            return Ok(page);
        }
        if let Some(dir) = &input.policy.archive_dir {
            page.archived = self.archive(dir, input.now, &removable).await?;
        }
        let tried: Vec<String> = removable.iter().map(|run| run.run_id.clone()).collect();
        // A batch per store call (one transaction on PostgreSQL, one synced write on the
        // hybrid store), one call at a time: a sweep shares the store with the runs it
        // leaves, and never holds more than one of its connections or writes.
        let interval = ms(input.policy.sweep_interval.0);
        let pace = crate::clock::Pace::new(crate::clock::pace::catch_up(
            input.policy.sweep_share,
            overdue,
            interval,
        ));
        for batch in removable.chunks(REMOVAL_BATCH) {
            let started = pace.start();
            let removals = self.store.remove_runs(batch).await?;
            for (run, removal) in batch.iter().zip(removals) {
                match removal {
                    Removal::Removed { events } => {
                        page.removed += 1;
                        page.events += events;
                        self.metrics().run_removed(events);
                        self.forget_removed_run(&run.run_id);
                    }
                    Removal::Gone => page.already_gone += 1,
                    Removal::Kept(_) => page.kept_in_use += 1,
                }
            }
            pace.after(started).await;
        }
        // Schedules whose last run went stop linking to it (a retry would not list these runs
        // again, so a failure here is reported, not retried).
        if let Err(e) = self.schedules.unlink_removed_runs(&tried).await {
            tracing::warn!(error = %e, "could not unlink removed runs from their schedules");
        }
        Ok(page)
    }

    /// Writes the runs about to be removed, each with its history, to the archive in `dir`
    /// (synced before any of them is removed). A run already gone is left out. Returns how
    /// many were written.
    async fn archive(
        &self,
        dir: &std::path::Path,
        at: Millis,
        removable: &[RemoveRun],
    ) -> Result<u64, WorldError> {
        let mut runs = Vec::with_capacity(removable.len());
        for RemoveRun { run_id, .. } in removable {
            let mut state = match self.store.get_run(run_id, ResolveData::All).await {
                Ok(state) => state,
                Err(WorldError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            state.history = self
                .store
                .history(run_id, 0)
                .await?
                .iter()
                .map(|event| (**event).clone())
                .collect();
            runs.push(state);
        }
        if runs.is_empty() {
            return Ok(0);
        }
        let count = runs.len() as u64;
        let (dir, keys) = (dir.to_path_buf(), self.config().encryption_keys.clone());
        tokio::task::spawn_blocking(move || {
            crate::store::archive::append_runs(&dir, at, &runs, keys.as_ref())
        })
        .await
        .map_err(|e| WorldError::Internal(format!("the archive writer stopped: {e}")))??;
        Ok(count)
    }

    /// The latest submission time of an open bulk retry or resume, if one is open: failed runs
    /// created before it may be about to be reopened.
    async fn open_bulk_reopen_bound(&self) -> Result<Option<Millis>, WorldError> {
        let filter = WorkflowQueryFilter::new()
            .workflow_name(BULK_WORKFLOW)
            .resolve_data(ResolveData::All);
        let mut bound: Option<Millis> = None;
        for status in [RunStatus::Pending, RunStatus::Running] {
            let mut filter = filter.clone().status(status);
            loop {
                let page = self.store.list_runs(&filter).await?;
                for op in &page.data {
                    let Some(Ok(input)) = op.input.as_ref().map(|i| i.decode::<BulkInput>()) else {
                        // An operation whose input this build cannot read: keep every failed
                        // run rather than guess.
                        bound = Some(Millis::MAX);
                        continue;
                    };
                    if input.request.action != BulkAction::Cancel {
                        bound = Some(bound.map_or(input.before, |b| b.max(input.before)));
                    }
                }
                match (page.has_more, page.cursor) {
                    (true, Some(cursor)) => filter.cursor = Some(cursor),
                    _ => break,
                }
            }
        }
        Ok(bound)
    }

    /// Starts the world's sweep `id` with its own policy, unless a run with that id exists.
    async fn start_sweep(&self, id: &str) -> Result<(), WorldError> {
        let input = crate::payload::Payload::encode(&self.prune_input(None))
            .map_err(|e| WorldError::invalid("retention", e.to_string()))?;
        let options = crate::model::WorkflowOptions::default()
            .workflow_id(id)
            .on_conflict(crate::model::OnConflict::UseExisting);
        self.create_run(PRUNE_WORKFLOW, input, options, None, None)
            .await
            .map(|_| ())
    }

    /// True if a sweep of this world is unfinished (a store that cannot answer: false, and
    /// the loop starts its sweep as it would have).
    async fn sweep_in_flight(&self) -> bool {
        for status in [RunStatus::Running, RunStatus::Pending] {
            let filter = WorkflowQueryFilter::new()
                .workflow_name(PRUNE_WORKFLOW)
                .status(status)
                .limit(1);
            if let Ok(page) = self.store.list_runs(&filter).await {
                if !page.data.is_empty() {
                    return true;
                }
            }
        }
        false
    }

    /// Writes back a run's history read from an archive (see `Journal::import`).
    pub(crate) async fn import_run(
        &self,
        history: Vec<crate::model::Event>,
    ) -> Result<(), WorldError> {
        self.journal.import(history).await
    }

    /// Drops what this process remembers of a run the store removed.
    fn forget_removed_run(&self, run_id: &str) {
        self.external.forget(run_id);
    }

    /// Starts sweeps while the policy removes anything: one per `sweep_interval`, named by
    /// its interval (`worlds.prune.{n}`), so that of several processes on one store only one
    /// starts each.
    pub(crate) async fn retention_loop(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let policy = self.config().retention.clone();
        if !policy.is_enabled() {
            return;
        }
        let interval = ms(policy.sweep_interval.0).max(1);
        loop {
            let now = self.now_ms();
            let slot = now / interval;
            let id = format!("{PRUNE_WORKFLOW}.{slot}");
            // A paced sweep that outlasts its interval goes on; a second would only double
            // the load, and find the same runs to remove.
            if !self.sweep_in_flight().await {
                if let Err(e) = self.start_sweep(&id).await {
                    if !matches!(e, WorldError::Conflict { .. }) {
                        tracing::warn!(error = %e, sweep = %id, "could not start a retention sweep");
                    }
                }
            }
            let next = (slot + 1).saturating_mul(interval);
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.clock.sleep_until_background(next) => {}
            }
        }
    }
}
