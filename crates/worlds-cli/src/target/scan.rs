//! Reading runs off a local world's store, whatever the store: pages of runs, one run with its
//! history and children, and the runs in flight whose waiting looks wrong (for the doctors).

use std::sync::Arc;

use worlds_engine::clock::Millis;
use worlds_engine::store::{EventStore, RetentionStore, RunStore};
use worlds_engine::{Event, ResolveData, RunStatus, WorkflowQueryFilter, WorkflowState};

use super::{Shown, Target};
use crate::escape::escaped;

/// Runs asked of the store per page.
const PAGE: usize = 100;

/// Up to `limit` runs matching `filter`, newest first, paging through the store.
pub(crate) async fn collect_runs(
    store: &(impl RunStore + ?Sized),
    filter: WorkflowQueryFilter,
    limit: usize,
) -> anyhow::Result<(Vec<WorkflowState>, bool)> {
    let mut runs = Vec::new();
    let mut cursor = None;
    loop {
        let mut page_filter = filter.clone().limit(PAGE.min(limit - runs.len()));
        page_filter.cursor = cursor;
        let page = store.list_runs(&page_filter).await?;
        runs.extend(page.data);
        if !page.has_more {
            return Ok((runs, false));
        }
        if runs.len() >= limit {
            return Ok((runs, true));
        }
        cursor = page.cursor;
    }
}

/// A run's state (by run id or workflow id), its history, and its children's status; a run
/// not found says how to list the runs of `target`.
pub(crate) async fn load<S: RunStore + EventStore + worlds_engine::store::PauseStore + ?Sized>(
    store: &S,
    id: &str,
    target: &Target,
) -> anyhow::Result<Shown> {
    let state = store
        .get_run(id, ResolveData::All)
        .await
        .map_err(|e| target.not_found(e))?;
    let history: Vec<Arc<Event>> = store.history(&state.id, 0).await?;
    let children = children_of(store, &state).await;
    Ok(Shown {
        history: history.iter().map(|e| (**e).clone()).collect(),
        state,
        children,
        driver: None,
        pauses: store.list_pauses().await?,
    })
}

/// The status of each child run (children the store cannot read are left out).
async fn children_of<S: RunStore + ?Sized>(
    store: &S,
    state: &WorkflowState,
) -> Vec<(String, RunStatus)> {
    let mut children = Vec::new();
    for child in &state.children {
        if let Ok(run) = store.get_run(child, ResolveData::None).await {
            children.push((run.id, run.status));
        }
    }
    children
}

/// Most unfinished runs the doctor reads the histories of, looking for stuck ones.
pub(crate) const STUCK_SCAN: usize = 10_000;
/// Most stuck runs the doctor names.
const STUCK_SHOWN: usize = 20;

/// A run in flight whose waiting looks wrong, and why ([`worlds_engine::model::waits`]).
pub(crate) struct Stuck {
    pub(crate) run_id: String,
    pub(crate) workflow: String,
    pub(crate) concern: String,
}

/// The runs among `runs` (unfinished ones, at most [`STUCK_SCAN`]) whose waiting looks wrong
/// at `now`: a timer or retry long overdue, a step past its timeout or silent past its
/// heartbeat timeout, a hook past its expiry, work queued for minutes with no worker.
pub(crate) async fn stuck_runs(
    store: &(impl EventStore + ?Sized),
    runs: &[WorkflowState],
    now: Millis,
) -> anyhow::Result<Vec<Stuck>> {
    let mut stuck = Vec::new();
    let unfinished = runs
        .iter()
        .filter(|r| !r.status.is_terminal())
        .take(STUCK_SCAN);
    for run in unfinished {
        let history = store.history(&run.id, 0).await?;
        let events: Vec<&Event> = history.iter().map(|e| &**e).collect();
        let state = match WorkflowState::from_history(&events) {
            Ok(state) => state,
            Err(_) => continue,
        };
        for wait in worlds_engine::model::waits(&state, &events, now) {
            if let Some(concern) = wait.concern {
                stuck.push(Stuck {
                    run_id: run.id.clone(),
                    workflow: run.name.clone(),
                    concern,
                });
            }
        }
    }
    Ok(stuck)
}

/// The doctor's lines about stuck runs (nothing if there are none).
pub(crate) fn format_stuck(stuck: &[Stuck]) -> String {
    let mut text = String::new();
    if stuck.is_empty() {
        return text;
    }
    let runs: std::collections::BTreeSet<&str> = stuck.iter().map(|s| s.run_id.as_str()).collect();
    text.push_str(&format!(
        "stuck: {} run(s) wait on something that looks wrong (`worlds runs show ID` says more)\n",
        runs.len()
    ));
    for s in stuck.iter().take(STUCK_SHOWN) {
        text.push_str(&format!(
            "  {} ({}): {}\n",
            escaped(&s.run_id),
            escaped(&s.workflow),
            escaped(&s.concern)
        ));
    }
    if stuck.len() > STUCK_SHOWN {
        text.push_str(&format!("  … and {} more\n", stuck.len() - STUCK_SHOWN));
    }
    text
}

/// Finished runs older than this with no sweep ever run: the doctors say the store grows.
const OLD_FINISHED_MS: Millis = 30 * 86_400_000;
/// Old finished runs counted at most.
const OLD_FINISHED_CAP: usize = 10_000;

/// The doctors' retention line: the newest sweep, or, when none ever ran, how many finished
/// runs ended over 30 days ago (counted up to 10 000), as a `note:` with what to do. Empty when
/// there is nothing to say.
pub(crate) async fn retention_note(
    store: &(impl RunStore + RetentionStore + ?Sized),
    now: Millis,
) -> anyhow::Result<String> {
    let newest = store
        .list_runs(
            &WorkflowQueryFilter::new()
                .workflow_name(worlds_engine::PRUNE_WORKFLOW)
                .resolve_data(ResolveData::None)
                .limit(1),
        )
        .await?;
    if let Some(sweep) = newest.data.first() {
        return Ok(format!(
            "retention: last sweep {} started {} ({})\n",
            escaped(&sweep.id),
            super::super::text::timestamp(sweep.created_at),
            sweep.status
        ));
    }
    let old = store
        .ended_runs(now.saturating_sub(OLD_FINISHED_MS), None, OLD_FINISHED_CAP)
        .await?
        .len();
    if old == 0 {
        return Ok(String::new());
    }
    let count = if old >= OLD_FINISHED_CAP {
        format!("{OLD_FINISHED_CAP} or more")
    } else {
        old.to_string()
    };
    Ok(format!(
        "note: {count} finished run(s) ended over 30 days ago and no retention sweep ever ran here: the store grows without bound. Set a policy (WorldConfig::retention; `worlds serve --keep-completed 7d --keep-failed 30d`) or sweep with `worlds runs prune --keep-completed 7d --dry-run` first\n"
    ))
}
