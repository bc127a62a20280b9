//! Which hook holds which token: token digest → (run, position), kept by the memory store (and
//! so by every store built on it) from the hook events it stores.

use rustc_hash::FxHashMap;

use crate::error::WorldError;
use crate::model::{Event, EventKind, WorkflowState};

/// Where a token's hook is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRef {
    /// The run that created the hook.
    pub run_id: String,
    /// The hook's command position.
    pub position: u32,
}

#[derive(Debug, Clone)]
struct Holder {
    at: HookRef,
    /// Still waiting for its payload: nobody else may take the token.
    live: bool,
}

/// Token digests of hooks whose runs have not finished.
#[derive(Debug, Default)]
pub(super) struct HookIndex {
    by_digest: FxHashMap<String, Holder>,
}

/// True if applying these events touches the index.
pub(super) fn touches_hooks(events: &[Event]) -> bool {
    events.iter().any(|e| {
        matches!(
            e.kind,
            EventKind::HookCreated { .. }
                | EventKind::HookReceived { .. }
                | EventKind::HookExpired { .. }
                | EventKind::HookDisposed { .. }
        ) || e.kind.is_terminal()
    })
}

impl HookIndex {
    /// Refuses a `hook_created` whose token a live hook of another run or position holds.
    pub(super) fn check(&self, run_id: &str, events: &[Event]) -> Result<(), WorldError> {
        for event in events {
            if let EventKind::HookCreated {
                position,
                token_digest,
                ..
            } = &event.kind
            {
                if let Some(holder) = self.by_digest.get(token_digest) {
                    let same = holder.at.run_id == run_id && holder.at.position == *position;
                    if holder.live && !same {
                        return Err(WorldError::conflict(format!(
                            "hook token is held by the waiting hook #{} of run {}",
                            holder.at.position, holder.at.run_id
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Records what stored events did to the run's hooks; `state` is the run after them.
    /// Files the run's hooks again from `state` alone, dropping whatever the index held for
    /// the run: after events it had applied were taken back (a write that failed).
    pub(super) fn rebuild_run(&mut self, run_id: &str, state: &WorkflowState) {
        self.by_digest
            .retain(|_, holder| holder.at.run_id != run_id);
        if state.status.is_terminal() {
            return;
        }
        for hook in &state.hooks {
            let held_elsewhere = self
                .by_digest
                .get(&hook.token_digest)
                .is_some_and(|holder| holder.live);
            if !held_elsewhere {
                self.by_digest.insert(
                    hook.token_digest.clone(),
                    Holder {
                        at: HookRef {
                            run_id: run_id.to_owned(),
                            position: hook.position,
                        },
                        live: hook.is_live(),
                    },
                );
            }
        }
    }

    /// Drops whatever the index holds for the run: it was removed.
    pub(super) fn forget_run(&mut self, run_id: &str) {
        self.by_digest
            .retain(|_, holder| holder.at.run_id != run_id);
    }

    pub(super) fn apply(&mut self, run_id: &str, events: &[Event], state: &WorkflowState) {
        for event in events {
            match &event.kind {
                EventKind::HookCreated {
                    position,
                    token_digest,
                    ..
                } => {
                    self.by_digest.insert(
                        token_digest.clone(),
                        Holder {
                            at: HookRef {
                                run_id: run_id.to_owned(),
                                position: *position,
                            },
                            live: true,
                        },
                    );
                }
                EventKind::HookReceived { position, .. }
                | EventKind::HookExpired { position, .. }
                | EventKind::HookDisposed { position, .. } => {
                    if let Some(hook) = state.hook(*position) {
                        if let Some(holder) = self.by_digest.get_mut(&hook.token_digest) {
                            if holder.at.run_id == run_id && holder.at.position == *position {
                                // A hook of a run driven from outside keeps waiting after a
                                // payload: it holds its token until it is disposed.
                                holder.live = hook.is_live();
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if state.status.is_terminal() {
            // The run is over: its tokens are free, and unknown from now on.
            for hook in &state.hooks {
                let ours = self
                    .by_digest
                    .get(&hook.token_digest)
                    .is_some_and(|h| h.at.run_id == run_id);
                if ours {
                    self.by_digest.remove(&hook.token_digest);
                }
            }
        }
    }

    /// Every hook whose token the index holds as waiting (as of the latest accepted events).
    pub(super) fn live(&self) -> Vec<HookRef> {
        self.by_digest
            .values()
            .filter(|h| h.live)
            .map(|h| h.at.clone())
            .collect()
    }

    /// The hook a token digest belongs to, if its run has not finished.
    pub(super) fn find(&self, token_digest: &str) -> Option<HookRef> {
        self.by_digest.get(token_digest).map(|h| h.at.clone())
    }
}
