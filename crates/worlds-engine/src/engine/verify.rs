//! Replaying a recorded history against the workflow code registered now, without running
//! anything: no step, timer, child or hook is started and nothing is recorded. What it
//! answers: would this run go on under the current code, or would it fail with
//! non-determinism (and where, with both commands)?
//!
//! The replay feeds the history to a fresh [`RunCore`] and polls the workflow function the way
//! the executor does (results handed over one at a time, a poll after each), but the commands
//! the code issues past the end of history are dropped instead of recorded: at that point the
//! run would simply go on. Only the current attempt's main code is replayed; a run already in
//! its compensations is judged by the code that led there.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};

use crate::error::{NonDeterminism, WorldError};
use crate::model::{Event, EventKind, WorkflowState};
use crate::payload::Payload;

use super::authoring::context::WorkflowContext;
use super::authoring::driver::RunInfo;
use super::machine::RunCore;
use super::Engine;

/// What replaying one history found ([`World::verify_history`](crate::World::verify_history)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "result")]
pub enum HistoryVerdict {
    /// The registered code issues what the history holds, to its end.
    Clean,
    /// It does not, from this position on.
    Diverged {
        /// The command position where they part.
        position: u32,
        /// What history holds there.
        recorded: String,
        /// What the code issues there now.
        issued: String,
    },
    /// No workflow of the history's name is registered.
    NotRegistered {
        /// The history's workflow name.
        name: String,
    },
}

impl From<NonDeterminism> for HistoryVerdict {
    fn from(d: NonDeterminism) -> Self {
        HistoryVerdict::Diverged {
            position: d.position,
            recorded: d.recorded,
            issued: d.issued,
        }
    }
}

impl Engine {
    /// What the workflow code sees of a run.
    pub(super) fn run_info(&self, state: &WorkflowState) -> RunInfo {
        RunInfo {
            run_id: state.id.clone(),
            workflow_id: state.workflow_id.clone(),
            name: state.name.clone(),
            parent_id: state.parent_id.clone(),
            created_at: state.created_at,
            started_at: state.started_at.unwrap_or(state.created_at),
            attempt: state.attempt.max(1),
            failure_strategy: state
                .failure_strategy
                .unwrap_or(self.config.failure_strategy),
            max_retries: state.max_retries.unwrap_or(super::DEFAULT_MAX_RETRIES),
        }
    }

    /// Replays `history` (a whole run's, from its first event) against the registered code.
    pub(crate) fn replay_check<E: std::borrow::Borrow<Event>>(
        &self,
        history: &[E],
    ) -> Result<HistoryVerdict, WorldError> {
        let state = WorkflowState::from_history(history)?;
        let Some(def) = self.registry.workflow(&state.name) else {
            return Ok(HistoryVerdict::NotRegistered { name: state.name });
        };
        let attempt = crate::model::attempt_view(history);
        let core = Arc::new(RunCore::new(
            self.run_info(&state),
            self.clock.clone(),
            self.ids.clone(),
            self.hook_kit.clone(),
            // Inline steps the code hands over are kept here, never run.
            Arc::default(),
            self.logs.clone(),
            attempt.base,
        ));
        for event in attempt.events(history) {
            core.ingest(event);
        }
        let input = state.input.clone().unwrap_or_else(Payload::null);
        let ctx = WorkflowContext::new(core.clone());
        let mut future = Box::pin(super::ambient::in_workflow(
            ctx.clone(),
            (def.handler)(ctx, input),
        ));
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        loop {
            let poll = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                future.as_mut().poll(&mut cx)
            }));
            // New commands past the end of history: the run would go on here.
            drop(core.take_new_commands());
            drop(core.take_stream_ops());
            if let Some(divergence) = core.nondeterminism() {
                return Ok(divergence.into());
            }
            match poll {
                Ok(Poll::Ready(_)) => {
                    // Results still queued belong to commands the code never issued.
                    while core.deliver_next() {}
                    return Ok(match core.check_finished() {
                        Ok(()) => HistoryVerdict::Clean,
                        Err(divergence) => divergence.into(),
                    });
                }
                // A panic is the code's failure, not a divergence: the run would fail the
                // same way when it ran.
                Err(_) => return Ok(HistoryVerdict::Clean),
                Ok(Poll::Pending) => {}
            }
            if !core.deliver_next() {
                return Ok(match core.nondeterminism() {
                    Some(divergence) => divergence.into(),
                    None => HistoryVerdict::Clean,
                });
            }
        }
    }
}

impl Engine {
    /// Replays the stored history of `run_id` against the registered code; returns its
    /// workflow name with what was found.
    pub(crate) async fn verify_run(
        &self,
        run_id: &str,
    ) -> Result<(String, HistoryVerdict), WorldError> {
        let history = self.store.history(run_id, 0).await?;
        let name = match history.first().map(|e| &e.kind) {
            Some(EventKind::WorkflowQueued(queued)) => queued.name.clone(),
            _ => String::new(),
        };
        Ok((name, self.replay_check(&history)?))
    }

    /// The runs `verify` looks at: every unfinished run, and the quarantined ones if asked.
    pub(crate) async fn runs_to_verify(
        &self,
        quarantined: bool,
    ) -> Result<Vec<String>, WorldError> {
        let mut ids = self.store.unfinished_runs().await?;
        if quarantined {
            let mut cursor = None;
            loop {
                let mut filter =
                    crate::model::WorkflowQueryFilter::new().limit(crate::model::DEFAULT_PAGE_SIZE);
                filter.quarantined = Some(true);
                filter.cursor = cursor.take();
                let page = self.store.list_runs(&filter).await?;
                ids.extend(page.data.into_iter().map(|run| run.id));
                match page.cursor.filter(|_| page.has_more) {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        ids.sort();
        ids.dedup();
        Ok(ids)
    }
}
