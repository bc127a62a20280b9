//! The replay machine as the authoring side sees it: [`RunCore`] implements [`RunDriver`], the
//! trait through which a [`WorkflowContext`](crate::WorkflowContext), its command futures, hooks
//! and stream writers reach their run, by the machine's own methods.

use std::sync::Arc;
use std::task::Waker;

use bytes::Bytes;

use crate::clock::Clock;
use crate::hooks::HookKit;
use crate::ids::IdGenerator;
use crate::model::ValueKind;
use crate::payload::Payload;
use crate::telemetry::logs::Logs;

use super::authoring::activity::ActivityFn;
use super::authoring::driver::{
    CommandDesc, CompensationFn, NewCommand, NewHookFn, Resolution, RunDriver, RunInfo,
};
use super::authoring::errors::ContextError;
use super::machine::RunCore;

/// What the workflow's handles ask of the run: the machine's own methods.
impl RunDriver for RunCore {
    fn info(&self) -> &RunInfo {
        &self.info
    }

    fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    fn ids(&self) -> &Arc<IdGenerator> {
        &self.ids
    }

    fn hooks(&self) -> &Arc<HookKit> {
        &self.hooks
    }

    fn logs(&self) -> &Arc<Logs> {
        &self.logs
    }

    fn is_cancelled(&self) -> bool {
        RunCore::is_cancelled(self)
    }

    fn is_replaying(&self) -> bool {
        RunCore::is_replaying(self)
    }

    fn issue(&self, desc: CommandDesc, new: Box<dyn FnOnce(u32) -> NewCommand + '_>) -> u32 {
        RunCore::issue(self, desc, new)
    }

    fn issue_unrecorded(&self, desc: CommandDesc) -> u32 {
        RunCore::issue_unrecorded(self, desc)
    }

    fn issue_value(&self, kind: ValueKind, fresh: Box<dyn FnOnce() -> Payload + '_>) -> Payload {
        RunCore::issue_value(self, kind, fresh)
    }

    fn issue_hook(
        &self,
        fresh_id: Box<dyn FnOnce() -> String + '_>,
        new: NewHookFn<'_>,
    ) -> (u32, String) {
        RunCore::issue_hook(self, fresh_id, new)
    }

    fn patch(&self, id: &str) -> bool {
        RunCore::patch(self, id)
    }

    fn has_result(&self, position: u32) -> bool {
        RunCore::has_result(self, position)
    }

    fn resolve_now(&self, position: u32, resolution: Resolution) {
        RunCore::resolve_now(self, position, resolution)
    }

    fn poll_slot(&self, position: u32, waker: &Waker) -> Option<Resolution> {
        RunCore::poll_slot(self, position, waker)
    }

    fn register_step(&self, position: u32, step: ActivityFn) {
        self.steps.register(&self.info.run_id, position, step);
    }

    fn add_compensation(&self, compensation: CompensationFn) {
        RunCore::add_compensation(self, compensation)
    }

    fn push_stream_write(&self, name: Arc<str>, data: Bytes) -> Result<(), ContextError> {
        RunCore::push_stream_write(self, name, data)
    }

    fn push_stream_close(&self, name: Arc<str>) {
        RunCore::push_stream_close(self, name)
    }
}
