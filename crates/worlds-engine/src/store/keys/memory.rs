//! Key records of the memory store: a map behind one lock.

use std::collections::BTreeMap;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::error::WorldError;
use crate::model::keys::{check_key_id, ApiKeyRecord};
use crate::store::MemoryStore;

use super::KeyStore;

/// Every key record, by id.
#[derive(Debug, Default)]
pub(crate) struct MemoryKeys {
    by_id: Mutex<BTreeMap<String, ApiKeyRecord>>,
}

#[async_trait]
impl KeyStore for MemoryStore {
    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>, WorldError> {
        Ok(self.keys.by_id.lock().values().cloned().collect())
    }

    async fn save_key(&self, record: &ApiKeyRecord) -> Result<(), WorldError> {
        check_key_id(&record.id)?;
        self.keys
            .by_id
            .lock()
            .insert(record.id.clone(), record.clone());
        Ok(())
    }
}
