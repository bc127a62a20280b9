//! The engine's side of hooks: recording new hooks, resuming them from outside, expiring them,
//! and releasing their tokens when the run ends.
//!
//! [`Hooks`] writes hook events through the journal and arms expiry timers; it does not
//! schedule runs. A method after which the run has something new to react to (a payload, an
//! expiry) says so, and the engine queues the run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::error::WorldError;
use crate::hooks::{token_digest, HookKit, HookResumed, NewHook, WebhookRequest};
use crate::model::{Event, EventKind, HookState, HookStatus, ResolveData, WorkflowState};
use crate::payload::Payload;
use crate::store::{EventStore, HookStore, RunStore, Store, Timer, TimerKind};

use super::journal::Journal;
use super::timers::Timers;

/// What a hook is resumed with: the payload and, for a signed webhook request, its delivery id
/// header and value (see [`Verified`](crate::hooks::Verified)).
pub(crate) struct Opened {
    pub(crate) payload: Payload,
    pub(crate) delivery: Option<(&'static str, String)>,
}

impl Opened {
    /// A payload that names no delivery.
    pub(crate) fn payload(payload: Payload) -> Self {
        Opened {
            payload,
            delivery: None,
        }
    }
}

/// The world's hooks.
pub(crate) struct Hooks {
    journal: Arc<Journal>,
    /// Finds a hook by its token, and reads the run that holds it.
    /// Hooks by token.
    hooks: Arc<dyn HookStore>,
    /// The runs that wait on them.
    runs: Arc<dyn RunStore>,
    /// Their histories, where the payload of a resumed hook is.
    events: Arc<dyn EventStore>,
    clock: Arc<dyn Clock>,
    timers: Arc<Timers>,
    /// Payload validators of typed hooks (and the token key).
    kit: Arc<HookKit>,
    /// The world takes work (it is started): payloads are refused while it does not.
    accepting: Arc<AtomicBool>,
    /// Cancelled when the world is dropped.
    closed: CancellationToken,
}

impl Hooks {
    pub(crate) fn new(
        journal: Arc<Journal>,
        store: &Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        timers: Arc<Timers>,
        kit: Arc<HookKit>,
        accepting: Arc<AtomicBool>,
        closed: CancellationToken,
    ) -> Self {
        Hooks {
            journal,
            hooks: store.clone(),
            runs: store.clone(),
            events: store.clone(),
            clock,
            timers,
            kit,
            accepting,
            closed,
        }
    }

    /// Records a hook the workflow created: `hook_created`, or `hook_conflict` if a live hook
    /// holds its (caller-chosen) token. Returns the recorded events, or `None` if the run
    /// finished meanwhile.
    pub(crate) async fn record(
        &self,
        run_id: &str,
        hook: NewHook,
    ) -> Result<Option<Vec<Arc<Event>>>, WorldError> {
        let conflict = EventKind::HookConflict {
            position: hook.position,
            hook_id: hook.hook_id.clone(),
            token_digest: hook.token_digest.clone(),
        };
        let held = hook.chosen
            && self
                .hooks
                .find_hook(&hook.token_digest)
                .await?
                .is_some_and(|h| !(h.run_id == run_id && h.position == hook.position));
        let held = held && self.hook_is_live(&hook.token_digest).await?;
        let created = EventKind::HookCreated {
            position: hook.position,
            hook_id: hook.hook_id.clone(),
            token_digest: hook.token_digest.clone(),
            expires_at: hook.expires_at,
            webhook: hook.webhook,
            methods: hook.methods.clone(),
            hook_type: hook.hook_type.clone(),
            signature: hook.signature.clone(),
            metadata: hook.metadata.clone(),
        };
        let first = if held { conflict.clone() } else { created };
        let appended = match self.journal.append(run_id, vec![first]).await {
            Ok(appended) => appended,
            // Taken between the look-up and the append.
            Err(WorldError::Conflict { .. }) if !held && self.run_is_active(run_id).await? => {
                self.journal.append(run_id, vec![conflict]).await?
            }
            Err(
                WorldError::Conflict { .. }
                | WorldError::InvalidTransition { .. }
                | WorldError::LeaseLost { .. },
            ) => return Ok(None),
            Err(e) => return Err(e),
        };
        let was_created = appended
            .events
            .iter()
            .any(|e| matches!(e.kind, EventKind::HookCreated { .. }));
        if let (true, Some(fire_at)) = (was_created, hook.expires_at) {
            self.timers
                .add(Timer {
                    fire_at,
                    run_id: run_id.to_owned(),
                    kind: TimerKind::HookExpiry {
                        position: hook.position,
                    },
                })
                .await?;
        }
        Ok(Some(appended.events))
    }

    async fn run_is_active(&self, run_id: &str) -> Result<bool, WorldError> {
        let state = self.runs.get_run(run_id, ResolveData::None).await?;
        Ok(!state.status.is_terminal())
    }

    /// True if the hook holding this token digest is waiting for its payload.
    async fn hook_is_live(&self, digest: &str) -> Result<bool, WorldError> {
        let Some(found) = self.hooks.find_hook(digest).await? else {
            return Ok(false);
        };
        let state = self.runs.get_run(&found.run_id, ResolveData::None).await?;
        Ok(state.hook(found.position).is_some_and(|h| h.is_live()))
    }

    /// Refuses payloads while the world is shut down: a run resumed then would wait for the
    /// next world, and a caller told `202` would believe it was handled.
    pub(crate) fn check_resumable(&self) -> Result<(), WorldError> {
        if self.closed.is_cancelled() {
            return Err(WorldError::Unavailable(
                "the world has been dropped and accepts no hook payloads; send it to a running world".into(),
            ));
        }
        if !self.accepting.load(Ordering::Acquire) {
            return Err(WorldError::Unavailable(
                "the world is shut down and accepts no hook payloads until it starts again; retry later".into(),
            ));
        }
        Ok(())
    }

    /// Refuses a payload `hook` would not take: too large, or not of its payload type (when
    /// this process knows the type's validator).
    pub(crate) fn check_payload(
        &self,
        hook: &HookState,
        payload: &Payload,
    ) -> Result<(), WorldError> {
        let hook_id = &hook.id;
        self.journal
            .check_payload(|| format!("payload of hook {hook_id}"), payload)?;
        if let Some(kind) = &hook.hook_type {
            if let Some(validate) = self.kit.validator(kind) {
                validate(payload).map_err(|e| {
                    WorldError::invalid(
                        "payload",
                        format!("does not match the payload type of hook {hook_id} ({kind}): {e}"),
                    )
                })?;
            }
        }
        Ok(())
    }

    /// Delivers a payload to the hook holding `token`. With `method` (a request to a webhook),
    /// the hook must accept that HTTP method. `open` is handed the hook and returns the
    /// payload (a webhook request checks its signature there, before anything is recorded).
    /// The caller queues the resumed run.
    pub(crate) async fn resume(
        &self,
        token: &str,
        method: Option<&str>,
        open: impl FnOnce(&HookState) -> Result<Opened, WorldError>,
    ) -> Result<HookResumed, WorldError> {
        self.resume_digest(token_digest(token), method, open).await
    }

    /// [`resume`](Self::resume) for the hook whose token has this digest.
    pub(crate) async fn resume_digest(
        &self,
        digest: String,
        method: Option<&str>,
        open: impl FnOnce(&HookState) -> Result<Opened, WorldError>,
    ) -> Result<HookResumed, WorldError> {
        self.check_resumable()?;
        let unknown = || {
            WorldError::NotFound {
            what: "hook",
            id: format!(
                "no waiting hook has this token (digest {}…); it never existed, or its run has finished",
                &digest[..12]
            ),
        }
        };
        let found = self.hooks.find_hook(&digest).await?.ok_or_else(unknown)?;
        let state = self.runs.get_run(&found.run_id, ResolveData::None).await?;
        let hook = state
            .hook(found.position)
            .filter(|h| h.token_digest == digest)
            .ok_or_else(unknown)?;
        let hook_id = hook.id.clone();
        if matches!(hook.status, HookStatus::Conflict | HookStatus::Disposed) {
            return Err(unknown());
        }
        if let Some(method) = method {
            let allowed = hook.allowed_methods();
            if !allowed.iter().any(|m| m.eq_ignore_ascii_case(method)) {
                return Err(WorldError::MethodNotAllowed {
                    method: method.to_owned(),
                    allowed: allowed.iter().map(|m| (*m).to_owned()).collect(),
                });
            }
        }
        let Opened { payload, delivery } = open(hook)?;
        let resumed = || HookResumed {
            run_id: state.id.clone(),
            hook_id: hook_id.clone(),
        };
        match hook.status {
            HookStatus::Waiting => {}
            HookStatus::Received => {
                return match self.repeats(&state.id, found.position, &delivery).await? {
                    true => Ok(resumed()),
                    false => Err(Self::resumed_already(&hook_id, &state)),
                };
            }
            HookStatus::Expired => return Err(Self::expired(&hook_id, &state)),
            HookStatus::Conflict | HookStatus::Disposed => return Err(unknown()),
        }
        if hook.expires_at.is_some_and(|at| self.clock.now_ms() >= at) {
            return Err(Self::expired(&hook_id, &state));
        }
        self.check_payload(hook, &payload)?;
        let received = EventKind::HookReceived {
            position: found.position,
            hook_id: hook_id.clone(),
            payload,
        };
        match self.journal.append(&state.id, vec![received]).await {
            Ok(_) => Ok(resumed()),
            // Resumed, expired or finished in the meantime: say which.
            Err(WorldError::Conflict { .. } | WorldError::InvalidTransition { .. }) => {
                let now = self.runs.get_run(&state.id, ResolveData::None).await?;
                match now.hook(found.position).map(|h| h.status) {
                    Some(HookStatus::Expired) => Err(Self::expired(&hook_id, &now)),
                    Some(HookStatus::Received) => {
                        match self.repeats(&state.id, found.position, &delivery).await? {
                            true => Ok(resumed()),
                            false => Err(Self::resumed_already(&hook_id, &now)),
                        }
                    }
                    _ => Err(unknown()),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the payload recorded for the hook at `position` came from `delivery` (a signed
    /// webhook request's id header and value): a sender retrying a delivery that was
    /// recorded gets the first answer again.
    async fn repeats(
        &self,
        run_id: &str,
        position: u32,
        delivery: &Option<(&'static str, String)>,
    ) -> Result<bool, WorldError> {
        let Some((header, id)) = delivery else {
            return Ok(false);
        };
        let history = self.events.history(run_id, 0).await?;
        let recorded = history.iter().find_map(|event| match &event.kind {
            EventKind::HookReceived {
                position: p,
                payload,
                ..
            } if *p == position => payload.decode::<WebhookRequest>().ok(),
            _ => None,
        });
        Ok(recorded.is_some_and(|request| request.headers.get(*header) == Some(id)))
    }

    fn resumed_already(hook_id: &str, state: &WorkflowState) -> WorldError {
        WorldError::conflict(format!(
            "hook {hook_id} of run {} has already been resumed; a hook takes one payload",
            state.id
        ))
    }

    fn expired(hook_id: &str, state: &WorkflowState) -> WorldError {
        WorldError::Gone(format!(
            "hook {hook_id} of run {} expired; it no longer accepts payloads",
            state.id
        ))
    }

    /// A hook's expiry timer fired. Returns true if the hook expired now (the run is to be
    /// queued), false if it was no longer waiting.
    pub(crate) async fn expire(&self, run_id: &str, position: u32) -> Result<bool, WorldError> {
        let state = self.runs.get_run(run_id, ResolveData::None).await?;
        let Some(hook) = state.hook(position).filter(|h| h.is_live()) else {
            return Ok(false);
        };
        let expired = EventKind::HookExpired {
            position,
            hook_id: hook.id.clone(),
        };
        self.journal.append(run_id, vec![expired]).await?;
        Ok(true)
    }

    /// Records `hook_disposed` for every hook of a finished run still waiting. (The store
    /// releases their tokens with the run's final event; this writes it into history.)
    pub(crate) async fn dispose(&self, state: &WorkflowState) {
        let disposed: Vec<EventKind> = state
            .hooks
            .iter()
            .filter(|h| h.is_live())
            .map(|h| EventKind::HookDisposed {
                position: h.position,
                hook_id: h.id.clone(),
            })
            .collect();
        if disposed.is_empty() {
            return;
        }
        if let Err(e) = self.journal.append(&state.id, disposed).await {
            tracing::debug!(run_id = %state.id, error = %e, "could not record disposed hooks");
        }
    }

    /// Re-arms the expiry timers of a run's waiting hooks (on restart or takeover).
    pub(crate) async fn rearm_timers(&self, state: &WorkflowState) -> Result<usize, WorldError> {
        let mut armed = 0;
        for hook in state.hooks.iter().filter(|h| h.is_live()) {
            if let Some(fire_at) = hook.expires_at {
                self.timers
                    .rearm(Timer {
                        fire_at,
                        run_id: state.id.clone(),
                        kind: TimerKind::HookExpiry {
                            position: hook.position,
                        },
                    })
                    .await?;
                armed += 1;
            }
        }
        Ok(armed)
    }
}
