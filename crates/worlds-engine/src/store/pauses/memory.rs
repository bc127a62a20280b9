//! Pauses of the memory store: a map behind one lock.

use std::collections::BTreeMap;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::error::WorldError;
use crate::model::{Pause, PauseTarget};
use crate::store::MemoryStore;

use super::PauseStore;

/// Every pause in force, by target.
#[derive(Debug, Default)]
pub(crate) struct MemoryPauses {
    by_target: Mutex<BTreeMap<PauseTarget, Pause>>,
}

#[async_trait]
impl PauseStore for MemoryStore {
    async fn list_pauses(&self) -> Result<Vec<Pause>, WorldError> {
        Ok(self.pauses.by_target.lock().values().cloned().collect())
    }

    async fn save_pause(&self, pause: &Pause) -> Result<(), WorldError> {
        pause.check()?;
        self.pauses
            .by_target
            .lock()
            .insert(pause.target.clone(), pause.clone());
        Ok(())
    }

    async fn remove_pause(&self, target: &PauseTarget) -> Result<Option<Pause>, WorldError> {
        Ok(self.pauses.by_target.lock().remove(target))
    }
}
