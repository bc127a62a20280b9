//! The [`KeyStore`] contract: the records of the world's API keys (digests, never keys), read
//! all at once and saved one at a time.
//!
//! Keys are few and change rarely (created, revoked), so the contract is small: a server keeps
//! the records in memory and reads them again when it meets an id it does not know, or to
//! see revocations made by another process.

mod files;
mod memory;

use async_trait::async_trait;

use crate::error::WorldError;
use crate::model::keys::ApiKeyRecord;

pub use files::KeyFiles;
pub(crate) use memory::MemoryKeys;

/// API key records, by id.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Every key record, ordered by id.
    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>, WorldError>;

    /// Saves a record: a new key, or a changed one (revoked) under the same id. Durable stores
    /// make it durable before returning.
    async fn save_key(&self, record: &ApiKeyRecord) -> Result<(), WorldError>;
}
