//! What the world adds to hook definitions: resuming one from outside. It lives here, with the
//! world, so that `hooks/` (what workflows use) does not depend on the world above it.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::WorldError;
use crate::hooks::{HookDefinition, HookResumed};
use crate::model::{ListQuery, Page};
use crate::store::HookRecord;

use super::World;

impl<T: Serialize + DeserializeOwned + 'static> HookDefinition<T> {
    /// Resumes a hook of this type (see [`World::resume_hook`]).
    pub async fn resume(
        &self,
        world: &World,
        token: &str,
        payload: &T,
    ) -> Result<HookResumed, WorldError> {
        world.resume_hook(token, payload).await
    }
}

impl World {
    /// Resumes a waiting hook by its id instead of its token, with the same checks as
    /// [`resume_hook`](World::resume_hook) (a payload of the wrong type is refused, 400, and
    /// the hook keeps waiting). For operators who may act on every run — the dashboard uses it
    /// for callers with write scope — since the id, unlike the token, is not a secret.
    pub async fn resume_hook_by_id<P: Serialize + ?Sized>(
        &self,
        hook_id: &str,
        payload: &P,
    ) -> Result<HookResumed, WorldError> {
        let payload = crate::payload::Payload::encode(payload)
            .map_err(|e| WorldError::serde("payload of the hook", e))?;
        self.engine.resume_hook_by_id(hook_id, payload).await
    }

    /// Checks a payload for a waiting hook (by id) as [`resume_hook_by_id`] would — its size
    /// and its payload type — without delivering it: `Ok` means a resume with it would be
    /// accepted now. Forms use it to say what is wrong before anything is sent.
    ///
    /// [`resume_hook_by_id`]: World::resume_hook_by_id
    pub async fn check_hook_payload<P: Serialize + ?Sized>(
        &self,
        hook_id: &str,
        payload: &P,
    ) -> Result<(), WorldError> {
        let payload = crate::payload::Payload::encode(payload)
            .map_err(|e| WorldError::serde("payload of the hook", e))?;
        self.engine.check_hook_payload(hook_id, payload).await
    }

    /// A hook (by hook id) with the run that created it. Its token is not kept: only its
    /// digest is.
    pub async fn get_hook(&self, hook_id: &str) -> Result<HookRecord, WorldError> {
        self.engine.get_hook(hook_id).await
    }

    /// One page of a run's hooks (by run id), by position.
    pub async fn run_hooks(
        &self,
        run_id: &str,
        query: ListQuery,
    ) -> Result<Page<HookRecord>, WorldError> {
        self.engine.list_run_hooks(run_id, &query).await
    }

    /// One page of the hooks waiting for a payload now, in every run, by run and position.
    pub async fn waiting_hooks(&self, query: ListQuery) -> Result<Page<HookRecord>, WorldError> {
        self.engine.list_waiting_hooks(&query).await
    }
}
