//! What the world adds to hook definitions: resuming one from outside. It lives here, with the
//! world, so that `hooks/` (what workflows use) does not depend on the world above it.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::WorldError;
use crate::hooks::{HookDefinition, HookResumed};

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
