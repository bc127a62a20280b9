//! The world's API key records (see [`crate::model::keys`]): kept by its store, made and
//! checked by the HTTP server.

use crate::error::WorldError;
use crate::model::keys::ApiKeyRecord;

use super::World;

/// The records of the world's API keys, from [`World::keys`]. They hold digests, never keys:
/// `worlds-server` makes keys and checks them against these records.
#[derive(Debug, Clone, Copy)]
pub struct WorldKeys<'w> {
    world: &'w World,
}

impl World {
    /// The records of the world's API keys, kept by its store.
    pub fn keys(&self) -> WorldKeys<'_> {
        WorldKeys { world: self }
    }
}

impl WorldKeys<'_> {
    /// Every record, ordered by id.
    pub async fn list(&self) -> Result<Vec<ApiKeyRecord>, WorldError> {
        self.world.engine.list_keys().await
    }

    /// Saves a record: a new key, or a changed one (revoked) under its id.
    pub async fn save(&self, record: &ApiKeyRecord) -> Result<(), WorldError> {
        self.world.engine.save_key(record).await
    }
}
