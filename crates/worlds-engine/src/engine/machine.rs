//! The replay machine: matches the commands a workflow issues against its recorded history.
//!
//! A run's workflow function issues *commands* (run a step, start a timer, start a child, record a
//! value). Each command gets a position the moment it is issued — in program order, not poll
//! order — so `join!`, `select!` and `FuturesUnordered` give the same positions on every replay.
//!
//! History is consumed through [`RunCore::ingest`], whether it is being replayed after a restart
//! or read back live: scheduling records fill `recorded[position]`, and results queue up in
//! `deliveries` in the order they were recorded. The executor hands them to the workflow **one at
//! a time**, polling the workflow between two deliveries, so a `select!` between two steps sees the
//! same winner on replay as it did the first time.
//!
//! When the code issues a command at a position that history already holds, the two must agree
//! (same kind, same name); if not, the run has diverged and fails with [`NonDeterminism`]. A
//! live run is simply a replay whose history ends where the code is: new commands go to
//! `new_commands` for the executor to record.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Waker;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::clock::{Clock, Millis};
use crate::error::{NonDeterminism, StructuredError};
use crate::ids::IdGenerator;
use crate::model::{Event, EventKind, ValueKind};
use crate::payload::Payload;

use super::authoring::driver::{CommandDesc, CompensationFn, NewCommand, Resolution, RunInfo};
use super::authoring::errors::ContextError;

/// A stream operation issued by workflow code, handed to the store after the workflow yields.
#[derive(Debug)]
pub(crate) enum StreamOp {
    /// Append a chunk, once per key.
    Write {
        name: Arc<str>,
        key: String,
        data: Bytes,
    },
    /// Close the stream.
    Close { name: Arc<str> },
}

/// A command the history holds at some position.
#[derive(Debug, Clone)]
struct Recorded {
    desc: CommandDesc,
    /// The recorded value, for `ctx.now()`/`random()`/`uuid()`.
    value: Option<Payload>,
}

struct Slot {
    desc: CommandDesc,
    result: Option<Resolution>,
    waker: Option<Waker>,
}

#[derive(Default)]
struct Machine {
    next_position: u32,
    recorded: Vec<Option<Recorded>>,
    slots: Vec<Slot>,
    deliveries: VecDeque<(u32, Resolution)>,
    new_commands: Vec<NewCommand>,
    nondeterminism: Option<NonDeterminism>,
    /// Commands issued whose result has not been delivered yet.
    open: usize,
    /// How many of those are timers.
    open_timers: usize,
    /// Open timers this machine issued itself (not replayed), with when each is due.
    new_timers: Vec<(u32, Millis)>,
    /// The first position of this attempt; earlier positions belong to failed attempts.
    base: u32,
    /// Compensations registered so far, in registration order.
    compensations: Vec<(String, CompensationFn)>,
    /// History says compensation has begun.
    compensating: bool,
    /// Stream writes and closes issued since the executor last took them.
    stream_ops: Vec<StreamOp>,
    /// Stream writes issued in this attempt: the rank that keys the next one.
    stream_writes: u64,
    /// Largest stream chunk, once the executor has set it.
    stream_limit: Option<usize>,
    /// Streams the store refused a queued chunk of, with the first refusal: later writes to
    /// them fail with it rather than appear to succeed.
    stream_refusals: Vec<(Arc<str>, String)>,
}

impl Machine {
    /// Index of a position in this attempt's vectors.
    fn index(&self, position: u32) -> Option<usize> {
        position.checked_sub(self.base).map(|i| i as usize)
    }

    fn record(&mut self, position: u32, recorded: Recorded) {
        let Some(i) = self.index(position) else {
            return;
        };
        if self.recorded.len() <= i {
            self.recorded.resize(i + 1, None);
        }
        self.recorded[i] = Some(recorded);
    }

    fn recorded(&self, position: u32) -> Option<&Recorded> {
        let i = self.index(position)?;
        self.recorded.get(i).and_then(Option::as_ref)
    }

    fn slot_mut_ref(&self, position: u32) -> Option<&Slot> {
        let i = self.index(position)?;
        self.slots.get(i)
    }

    fn slot_mut(&mut self, position: u32) -> Option<&mut Slot> {
        let i = self.index(position)?;
        self.slots.get_mut(i)
    }

    /// Takes the next position and its slot, past any patch markers history holds there that
    /// the code did not ask about (the marker of a patch whose `ctx.patched` / `deprecate_patch`
    /// call was removed once no run needed it).
    fn take_position(&mut self, desc: CommandDesc) -> u32 {
        while self.pass_marker() {}
        self.take_exactly(desc)
    }

    /// Takes the next position if history holds a patch marker there; true if it did.
    fn pass_marker(&mut self) -> bool {
        match self.recorded(self.next_position).map(|r| r.desc.clone()) {
            Some(marker @ CommandDesc::Patch { .. }) => {
                self.take_exactly(marker);
                true
            }
            _ => false,
        }
    }

    /// Takes the next position and its slot as they are.
    fn take_exactly(&mut self, desc: CommandDesc) -> u32 {
        let position = self.next_position;
        self.next_position += 1;
        self.slots.push(Slot {
            desc,
            result: None,
            waker: None,
        });
        position
    }

    fn diverged(&mut self, position: u32, recorded: String, issued: String) {
        if self.nondeterminism.is_none() {
            self.nondeterminism = Some(NonDeterminism {
                position,
                recorded,
                issued,
            });
        }
    }

    fn desc_at(&self, position: u32) -> Option<&CommandDesc> {
        self.index(position)
            .and_then(|i| self.slots.get(i))
            .map(|s| &s.desc)
            .or_else(|| self.recorded(position).map(|r| &r.desc))
    }
}

/// The shared core of one live run: read by its [`WorkflowContext`](crate::WorkflowContext)
/// (through [`RunDriver`](super::authoring::driver::RunDriver), see `run_driver.rs`), driven by the executor.
pub(crate) struct RunCore {
    pub(crate) info: RunInfo,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<IdGenerator>,
    pub(crate) hooks: Arc<crate::hooks::HookKit>,
    pub(crate) steps: Arc<super::steps::LocalSteps>,
    /// The world's logs, for the lines workflow code logs through its context.
    pub(crate) logs: Arc<crate::telemetry::logs::Logs>,
    cancelled: AtomicBool,
    machine: Mutex<Machine>,
}

impl RunCore {
    /// A fresh machine for an attempt whose commands start at position `base`.
    pub(crate) fn new(
        info: RunInfo,
        clock: Arc<dyn Clock>,
        ids: Arc<IdGenerator>,
        hooks: Arc<crate::hooks::HookKit>,
        steps: Arc<super::steps::LocalSteps>,
        logs: Arc<crate::telemetry::logs::Logs>,
        base: u32,
    ) -> Self {
        Self {
            info,
            clock,
            ids,
            hooks,
            steps,
            logs,
            cancelled: AtomicBool::new(false),
            machine: Mutex::new(Machine {
                next_position: base,
                base,
                ..Machine::default()
            }),
        }
    }

    /// True while the code is re-issuing commands history already holds: history has a command
    /// at or after the position the code will issue next. The code reached this point before,
    /// so whatever it did here that is not a command (a log line) was done already.
    pub(crate) fn is_replaying(&self) -> bool {
        let m = self.machine.lock();
        // `recorded` only grows, and its last entry is always filled.
        m.index(m.next_position)
            .is_some_and(|next| m.recorded.len() > next)
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    pub(crate) fn mark_cancelled(&self) {
        self.cancelled.store(true, Ordering::Release);
    }

    /// Issues a command that resolves later; returns its position.
    pub(crate) fn issue(&self, desc: CommandDesc, new: impl FnOnce(u32) -> NewCommand) -> u32 {
        let mut m = self.machine.lock();
        let position = m.take_position(desc.clone());
        m.open += 1;
        if desc == CommandDesc::Timer {
            m.open_timers += 1;
        }
        match m.recorded(position).map(|r| r.desc.clone()) {
            Some(recorded) if recorded != desc => {
                m.diverged(position, recorded.to_string(), desc.to_string());
            }
            Some(_) => {}
            None => {
                let command = new(position);
                if let NewCommand::Timer { position, fire_at } = command {
                    m.new_timers.push((position, fire_at));
                }
                m.new_commands.push(command);
            }
        }
        position
    }

    /// Takes a position for a command that is refused before it is recorded (its argument was
    /// invalid). The refusal is deterministic, so replay takes the same position the same way.
    pub(crate) fn issue_unrecorded(&self, desc: CommandDesc) -> u32 {
        let mut m = self.machine.lock();
        let position = m.take_position(desc.clone());
        if let Some(recorded) = m.recorded(position).map(|r| r.desc.to_string()) {
            m.diverged(
                position,
                recorded,
                format!("{desc} with an invalid argument"),
            );
        }
        position
    }

    /// Issues a command that resolves at once to a value read from the outside world: the
    /// recorded value on replay, `fresh()` the first time.
    pub(crate) fn issue_value(&self, kind: ValueKind, fresh: impl FnOnce() -> Payload) -> Payload {
        let desc = CommandDesc::Value(kind);
        let mut m = self.machine.lock();
        let position = m.take_position(desc.clone());
        match m.recorded(position).cloned() {
            Some(Recorded {
                desc: recorded,
                value: Some(value),
            }) if recorded == desc => value,
            Some(other) => {
                m.diverged(position, other.desc.to_string(), desc.to_string());
                fresh()
            }
            None => {
                let value = fresh();
                m.record(
                    position,
                    Recorded {
                        desc,
                        value: Some(value.clone()),
                    },
                );
                m.new_commands.push(NewCommand::Value {
                    position,
                    kind,
                    value: value.clone(),
                });
                value
            }
        }
    }

    /// Issues a hook: resolves when its payload arrives. Returns its position and hook id, the
    /// recorded id on replay, `fresh_id()` the first time; `new` builds the command to record.
    pub(crate) fn issue_hook(
        &self,
        fresh_id: impl FnOnce() -> String,
        new: impl FnOnce(u32, &str) -> crate::hooks::NewHook,
    ) -> (u32, String) {
        let desc = CommandDesc::Hook;
        let mut m = self.machine.lock();
        let position = m.take_position(desc.clone());
        m.open += 1;
        match m.recorded(position).cloned() {
            Some(Recorded {
                desc: CommandDesc::Hook,
                value,
            }) => {
                let id = value
                    .and_then(|v| v.decode::<String>().ok())
                    .unwrap_or_default();
                (position, id)
            }
            Some(other) => {
                m.diverged(position, other.desc.to_string(), desc.to_string());
                (position, fresh_id())
            }
            None => {
                let id = fresh_id();
                let command = new(position, &id);
                m.new_commands.push(NewCommand::Hook(command));
                (position, id)
            }
        }
    }

    /// `ctx.patched(id)`: true where the code takes its new branch, false where history was
    /// recorded by code without it. At the live edge (history holds nothing at this point)
    /// the marker is recorded and the answer is true; on replay a marker with this id is
    /// consumed (true); history holding another command here means the run got this far on
    /// older code, so the answer is false and no position is taken (the old branch's
    /// commands line up with history as before). Markers of other patches in the way are
    /// passed over. `deprecate_patch` is the same call, its answer ignored.
    pub(crate) fn patch(&self, id: &str) -> bool {
        let mut m = self.machine.lock();
        let mut ahead = m.next_position;
        let mine = loop {
            match m.recorded(ahead).map(|r| &r.desc) {
                Some(CommandDesc::Patch { id: other }) if other == id => break Some(ahead),
                Some(CommandDesc::Patch { .. }) => ahead += 1,
                Some(_) => return false,
                None => break None,
            }
        };
        // Markers of other patches before this one (or before the live edge) are passed.
        while m.next_position < mine.unwrap_or(ahead) && m.pass_marker() {}
        let desc = CommandDesc::Patch { id: id.to_owned() };
        let position = m.take_exactly(desc.clone());
        if mine.is_none() {
            m.record(position, Recorded { desc, value: None });
            m.new_commands.push(NewCommand::Patch {
                position,
                patch_id: id.to_owned(),
            });
        }
        true
    }

    /// True if history holds the result of the command at `position` (it is queued for
    /// delivery or already delivered).
    pub(crate) fn has_result(&self, position: u32) -> bool {
        let m = self.machine.lock();
        m.deliveries.iter().any(|(p, _)| *p == position)
            || m.slot_mut_ref(position).is_some_and(|s| s.result.is_some())
    }

    /// Resolves a command without history (an argument was rejected before recording).
    pub(crate) fn resolve_now(&self, position: u32, resolution: Resolution) {
        let mut m = self.machine.lock();
        if let Some(slot) = m.slot_mut(position) {
            slot.result = Some(resolution);
        }
    }

    /// Takes the resolution of `position` if it has arrived, else registers `waker`.
    pub(crate) fn poll_slot(&self, position: u32, waker: &Waker) -> Option<Resolution> {
        let mut m = self.machine.lock();
        let slot = m.slot_mut(position)?;
        match slot.result.take() {
            Some(result) => Some(result),
            None => {
                if !slot.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
                    slot.waker = Some(waker.clone());
                }
                None
            }
        }
    }

    /// Takes the commands issued since the last call that history does not hold yet.
    pub(crate) fn take_new_commands(&self) -> Vec<NewCommand> {
        std::mem::take(&mut self.machine.lock().new_commands)
    }

    /// Reads one history event into the machine.
    pub(crate) fn ingest(&self, event: &Event) {
        let mut m = self.machine.lock();
        if event.kind.position().is_some_and(|p| p < m.base) {
            // A command of an earlier, failed attempt.
            return;
        }
        match &event.kind {
            EventKind::WorkflowCompensating {} => m.compensating = true,
            EventKind::CompensationAdded { position, .. } => m.record(
                *position,
                Recorded {
                    desc: CommandDesc::Compensation,
                    value: None,
                },
            ),
            EventKind::CompensationExecuted { position, .. }
            | EventKind::CompensationFailed { position, .. } => m.record(
                *position,
                Recorded {
                    desc: CommandDesc::CompensationOutcome,
                    value: None,
                },
            ),
            EventKind::ActivityScheduled { position, name, .. } => m.record(
                *position,
                Recorded {
                    desc: CommandDesc::Activity { name: name.clone() },
                    value: None,
                },
            ),
            EventKind::TimerScheduled { position, .. } => m.record(
                *position,
                Recorded {
                    desc: CommandDesc::Timer,
                    value: None,
                },
            ),
            EventKind::ChildWorkflowStarted { position, name, .. } => m.record(
                *position,
                Recorded {
                    desc: CommandDesc::Child { name: name.clone() },
                    value: None,
                },
            ),
            EventKind::HookCreated {
                position, hook_id, ..
            }
            | EventKind::HookConflict {
                position, hook_id, ..
            } => {
                m.record(
                    *position,
                    Recorded {
                        desc: CommandDesc::Hook,
                        value: Payload::encode(hook_id).ok(),
                    },
                );
                if let EventKind::HookConflict { hook_id, .. } = &event.kind {
                    let failure = ContextError::HookConflict {
                        hook_id: hook_id.clone(),
                    };
                    m.deliveries
                        .push_back((*position, Resolution::Error(failure)));
                }
            }
            EventKind::HookReceived {
                position, payload, ..
            } => m
                .deliveries
                .push_back((*position, Resolution::Value(payload.clone()))),
            EventKind::HookExpired { position, hook_id } => {
                let failure = ContextError::HookExpired {
                    hook_id: hook_id.clone(),
                };
                m.deliveries
                    .push_back((*position, Resolution::Error(failure)));
            }
            EventKind::PatchRecorded { position, patch_id } => m.record(
                *position,
                Recorded {
                    desc: CommandDesc::Patch {
                        id: patch_id.clone(),
                    },
                    value: None,
                },
            ),
            EventKind::ValueRecorded {
                position,
                kind,
                value,
            } => m.record(
                *position,
                Recorded {
                    desc: CommandDesc::Value(*kind),
                    value: Some(value.clone()),
                },
            ),
            EventKind::ActivityCompleted {
                position, output, ..
            }
            | EventKind::ChildWorkflowCompleted {
                position, output, ..
            } => m
                .deliveries
                .push_back((*position, Resolution::Value(output.clone()))),
            EventKind::TimerFired { position } => m
                .deliveries
                .push_back((*position, Resolution::Value(Payload::null()))),
            EventKind::ActivityFailed {
                position,
                attempt,
                error,
                retrying: false,
            } => {
                let name = match m.desc_at(*position) {
                    Some(CommandDesc::Activity { name }) => name.clone(),
                    _ => String::from("?"),
                };
                let failure = ContextError::ActivityFailed {
                    name,
                    position: *position,
                    attempts: *attempt,
                    error: error.clone(),
                };
                m.deliveries
                    .push_back((*position, Resolution::Error(failure)));
            }
            EventKind::ChildWorkflowFailed {
                position,
                child_id,
                error,
            } => {
                let name = match m.desc_at(*position) {
                    Some(CommandDesc::Child { name }) => name.clone(),
                    _ => String::from("?"),
                };
                let failure = ContextError::ChildFailed {
                    name,
                    child_id: child_id.clone(),
                    error: error.clone(),
                };
                m.deliveries
                    .push_back((*position, Resolution::Error(failure)));
            }
            _ => {}
        }
    }

    /// Hands the next recorded result to the code. Returns false if there is none.
    pub(crate) fn deliver_next(&self) -> bool {
        let waker = {
            let mut m = self.machine.lock();
            let Some((position, resolution)) = m.deliveries.pop_front() else {
                return false;
            };
            match m.slot_mut(position) {
                Some(slot) => {
                    slot.result = Some(resolution);
                    let waker = slot.waker.take();
                    let timer = slot.desc == CommandDesc::Timer;
                    m.open = m.open.saturating_sub(1);
                    if timer {
                        m.open_timers = m.open_timers.saturating_sub(1);
                        m.new_timers.retain(|(p, _)| *p != position);
                    }
                    waker
                }
                None => {
                    let recorded = m
                        .recorded(position)
                        .map(|r| r.desc.to_string())
                        .unwrap_or_else(|| "a result".to_owned());
                    m.diverged(position, recorded, "nothing".to_owned());
                    None
                }
            }
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }

    /// Registers a compensation (a synchronous command: recorded once, replayed after).
    pub(crate) fn add_compensation(&self, f: CompensationFn) {
        let desc = CommandDesc::Compensation;
        let mut m = self.machine.lock();
        let position = m.take_position(desc.clone());
        let compensation_id = format!("cmp_{position}");
        match m.recorded(position).map(|r| r.desc.clone()) {
            Some(recorded) if recorded != desc => {
                m.diverged(position, recorded.to_string(), desc.to_string());
            }
            Some(_) => {}
            None => m.new_commands.push(NewCommand::CompensationAdded {
                position,
                compensation_id: compensation_id.clone(),
            }),
        }
        m.compensations.push((compensation_id, f));
    }

    /// Records how one compensation ended (a synchronous command).
    pub(crate) fn record_compensation_outcome(
        &self,
        compensation_id: String,
        error: Option<StructuredError>,
    ) {
        let desc = CommandDesc::CompensationOutcome;
        let mut m = self.machine.lock();
        let position = m.take_position(desc.clone());
        match m.recorded(position).map(|r| r.desc.clone()) {
            Some(recorded) if recorded != desc => {
                m.diverged(position, recorded.to_string(), desc.to_string());
            }
            Some(_) => {}
            None => m.new_commands.push(NewCommand::CompensationOutcome {
                position,
                compensation_id,
                error,
            }),
        }
    }

    /// Takes the registered compensations, in registration order.
    pub(crate) fn take_compensations(&self) -> Vec<(String, CompensationFn)> {
        std::mem::take(&mut self.machine.lock().compensations)
    }

    /// True if some compensation is registered.
    pub(crate) fn has_compensations(&self) -> bool {
        !self.machine.lock().compensations.is_empty()
    }

    /// True if history says compensation has begun.
    pub(crate) fn compensation_recorded(&self) -> bool {
        self.machine.lock().compensating
    }

    /// The position the next command would take.
    pub(crate) fn next_position(&self) -> u32 {
        self.machine.lock().next_position
    }

    /// When the run can next move, if it waits on timers and nothing else: `Some(None)` when
    /// some of those timers were replayed rather than issued here (their due time is in
    /// history, not in the machine), `None` when it waits on anything but timers.
    pub(crate) fn asleep_until(&self) -> Option<Option<Millis>> {
        let m = self.machine.lock();
        if m.open == 0 || m.open != m.open_timers {
            return None;
        }
        if m.new_timers.len() < m.open_timers {
            return Some(None);
        }
        Some(m.new_timers.iter().map(|(_, at)| *at).min())
    }

    /// True if some issued command still waits for its result. A workflow that is pending with
    /// no open command is awaiting something the engine cannot resume.
    pub(crate) fn has_open_commands(&self) -> bool {
        self.machine.lock().open > 0
    }

    /// The divergence found so far, if any.
    pub(crate) fn nondeterminism(&self) -> Option<NonDeterminism> {
        self.machine.lock().nondeterminism.clone()
    }

    /// Called when the workflow function returned: history must not hold commands it never issued.
    pub(crate) fn check_finished(&self) -> Result<(), NonDeterminism> {
        let mut m = self.machine.lock();
        if let Some(n) = m.nondeterminism.clone() {
            return Err(n);
        }
        let issued = (m.next_position - m.base) as usize;
        let base = m.base;
        let extra = m
            .recorded
            .iter()
            .enumerate()
            .skip(issued)
            .find_map(|(i, r)| r.as_ref().map(|r| (base + i as u32, r.desc.to_string())));
        if let Some((position, recorded)) = extra {
            m.diverged(
                position,
                recorded,
                "nothing (the workflow returned)".to_owned(),
            );
            return Err(m.nondeterminism.clone().unwrap_or(NonDeterminism {
                position,
                recorded: String::new(),
                issued: String::new(),
            }));
        }
        Ok(())
    }
}

/// Stream writes from workflow code: not commands (they take no position), but queued here in
/// program order for the executor, each keyed by its rank in the attempt so the store can drop
/// the copies replay makes.
impl RunCore {
    /// Sets the largest chunk a workflow may write.
    pub(crate) fn set_stream_limit(&self, limit: usize) {
        self.machine.lock().stream_limit = Some(limit);
    }

    /// Queues a chunk, keyed `w{attempt}.{rank}`. Refuses one over the limit.
    pub(crate) fn push_stream_write(
        &self,
        name: Arc<str>,
        data: Bytes,
    ) -> Result<(), ContextError> {
        let mut m = self.machine.lock();
        if let Some((_, message)) = m.stream_refusals.iter().find(|(n, _)| *n == name) {
            return Err(ContextError::StreamWriteFailed {
                stream: name.to_string(),
                message: message.clone(),
            });
        }
        if let Some(limit) = m.stream_limit.filter(|limit| data.len() > *limit) {
            return Err(ContextError::InvalidArgument {
                call: "stream.write",
                message: format!(
                    "a chunk of {} bytes is over the payload limit of {limit} bytes",
                    data.len()
                ),
            });
        }
        let key = format!("w{}.{}", self.info.attempt, m.stream_writes);
        m.stream_writes += 1;
        m.stream_ops.push(StreamOp::Write { name, key, data });
        Ok(())
    }

    /// Queues a close.
    pub(crate) fn push_stream_close(&self, name: Arc<str>) {
        let mut m = self.machine.lock();
        m.stream_ops.push(StreamOp::Close { name });
    }

    /// Notes that the store refused a queued chunk of stream `name` (the first refusal stays).
    pub(crate) fn refuse_stream_writes(&self, name: Arc<str>, message: String) {
        let mut m = self.machine.lock();
        if !m.stream_refusals.iter().any(|(n, _)| *n == name) {
            m.stream_refusals.push((name, message));
        }
    }

    /// Takes the stream operations queued since the last call, in program order.
    pub(crate) fn take_stream_ops(&self) -> Vec<StreamOp> {
        std::mem::take(&mut self.machine.lock().stream_ops)
    }
}
