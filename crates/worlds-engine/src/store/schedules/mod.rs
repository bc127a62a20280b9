//! The [`ScheduleStore`] contract: schedule records, read and changed one at a time.
//!
//! A change is a read-modify-write that the store makes atomic, also against other processes
//! sharing its directory: the engine claims a schedule's due firings and settles them through
//! it, so two worlds never claim one firing twice (see `schedule::plan`).

mod files;
mod memory;

use async_trait::async_trait;

use crate::error::WorldError;
use crate::model::schedule::ScheduleConfig;

pub(crate) use files::FileSchedules;
pub(crate) use memory::MemorySchedules;

/// What [`ScheduleStore::update_schedule`] does with a schedule.
// One value per update, consumed at once: boxing the record would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum ScheduleChange {
    /// Leave it as it is (or absent).
    Keep,
    /// Store this record under the id (creating or replacing it).
    Put(ScheduleConfig),
    /// Remove it.
    Delete,
}

/// The function a change is computed by: given the record as stored (`None` if there is none),
/// what to do. It runs under the store's lock and must not block or wait.
pub type ScheduleUpdate<'a> =
    dyn FnMut(Option<ScheduleConfig>) -> Result<ScheduleChange, WorldError> + Send + 'a;

/// Schedule records, by id.
#[async_trait]
pub trait ScheduleStore: Send + Sync {
    /// Every schedule, ordered by id.
    async fn list_schedules(&self) -> Result<Vec<ScheduleConfig>, WorldError>;

    /// The schedule with this id, if any.
    async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleConfig>, WorldError>;

    /// Reads the schedule `id`, computes a change with `change` and applies it, as one atomic
    /// step: no other update of the schedule (from this process or another one sharing the
    /// store) comes in between. An error from `change` is returned and nothing is changed.
    /// Returns the record as stored afterwards (`None` if there is none).
    ///
    /// Durable stores make the change durable before returning.
    async fn update_schedule(
        &self,
        id: &str,
        change: &mut ScheduleUpdate<'_>,
    ) -> Result<Option<ScheduleConfig>, WorldError>;
}

/// Applies a change to `current`: the record to store afterwards, or `None` to have none.
/// `Keep` returns `current`; a `Put` must carry the id it is stored under.
pub(crate) fn apply(
    id: &str,
    current: Option<ScheduleConfig>,
    change: &mut ScheduleUpdate<'_>,
) -> Result<(Option<ScheduleConfig>, bool), WorldError> {
    match change(current.clone())? {
        ScheduleChange::Keep => Ok((current, false)),
        ScheduleChange::Delete => Ok((None, current.is_some())),
        ScheduleChange::Put(record) if record.id != id => Err(WorldError::invalid(
            "schedule",
            format!(
                "a record with id '{}' cannot be stored as '{id}'",
                record.id
            ),
        )),
        ScheduleChange::Put(record) => Ok((Some(record), true)),
    }
}
