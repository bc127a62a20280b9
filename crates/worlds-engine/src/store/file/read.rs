//! The file store's steps and hooks duties: its memory store answers, after catching up with
//! what other processes wrote to the runs concerned.

use async_trait::async_trait;

use crate::error::WorldError;
use crate::model::{ActivityState, ListQuery, Page, ResolveData};
use crate::store::{HookRecord, HookRef, HookStore, StepRecord, StepStore};

use super::FileStore;

impl FileStore {
    /// Brings the run holding a step, hook or child id up to date; if no run known here holds
    /// it, loads and refreshes every run (another process may have recorded it).
    pub(super) async fn refresh_owner(&self, id: &str) -> Result<(), WorldError> {
        match self.memory.owner_of(id) {
            Some(run_id) => self.refresh(&run_id, true).await,
            None => self.refresh_all().await,
        }
    }
}

#[async_trait]
impl StepStore for FileStore {
    async fn get_activity(&self, run_id: &str, position: u32) -> Result<ActivityState, WorldError> {
        let run_id = self.resolve(run_id).await?;
        self.refresh(&run_id, true).await?;
        self.memory.get_activity(&run_id, position).await
    }

    async fn get_step(
        &self,
        step_id: &str,
        resolve: ResolveData,
    ) -> Result<StepRecord, WorldError> {
        self.refresh_owner(step_id).await?;
        self.memory.get_step(step_id, resolve).await
    }

    async fn list_steps(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<ActivityState>, WorldError> {
        let run_id = self.resolve(run_id).await?;
        self.refresh(&run_id, true).await?;
        self.memory.list_steps(&run_id, query).await
    }
}

#[async_trait]
impl HookStore for FileStore {
    async fn find_hook(&self, token_digest: &str) -> Result<Option<HookRef>, WorldError> {
        if let Some(found) = self.memory.find_hook(token_digest).await? {
            self.refresh(&found.run_id, true).await?;
            return self.memory.find_hook(token_digest).await;
        }
        // Another process may have created it.
        self.refresh_all().await?;
        self.memory.find_hook(token_digest).await
    }

    async fn get_hook(&self, hook_id: &str) -> Result<HookRecord, WorldError> {
        self.refresh_owner(hook_id).await?;
        self.memory.get_hook(hook_id).await
    }

    async fn list_run_hooks(
        &self,
        run_id: &str,
        query: &ListQuery,
    ) -> Result<Page<HookRecord>, WorldError> {
        let run_id = self.resolve(run_id).await?;
        self.refresh(&run_id, true).await?;
        self.memory.list_run_hooks(&run_id, query).await
    }

    async fn list_waiting_hooks(&self, query: &ListQuery) -> Result<Page<HookRecord>, WorldError> {
        self.refresh_all().await?;
        self.memory.list_waiting_hooks(query).await
    }
}
