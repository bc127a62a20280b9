//! Schedules of the memory store: a map behind one lock.

use std::collections::BTreeMap;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::error::WorldError;
use crate::model::schedule::ScheduleConfig;
use crate::store::MemoryStore;

use super::{apply, ScheduleStore, ScheduleUpdate};

/// Every schedule, by id.
#[derive(Debug, Default)]
pub(crate) struct MemorySchedules {
    by_id: Mutex<BTreeMap<String, ScheduleConfig>>,
}

#[async_trait]
impl ScheduleStore for MemoryStore {
    async fn list_schedules(&self) -> Result<Vec<ScheduleConfig>, WorldError> {
        Ok(self.schedules.by_id.lock().values().cloned().collect())
    }

    async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleConfig>, WorldError> {
        Ok(self.schedules.by_id.lock().get(id).cloned())
    }

    async fn update_schedule(
        &self,
        id: &str,
        change: &mut ScheduleUpdate<'_>,
    ) -> Result<Option<ScheduleConfig>, WorldError> {
        let mut by_id = self.schedules.by_id.lock();
        let (after, changed) = apply(id, by_id.get(id).cloned(), change)?;
        if changed {
            match &after {
                Some(record) => by_id.insert(id.to_owned(), record.clone()),
                None => by_id.remove(id),
            };
        }
        Ok(after)
    }
}
