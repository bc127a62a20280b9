//! The [`PauseStore`] contract: the pauses in force, one record per target, read all at once
//! and set or lifted one at a time.
//!
//! Pauses are few and change rarely (an operator's act), so the contract is small: the engine
//! keeps them in memory and reads them again when it changes one, and every few seconds to see
//! those another process sharing the store set or lifted.

mod files;
mod memory;

use async_trait::async_trait;

use crate::error::WorldError;
use crate::model::{Pause, PauseTarget};

pub use files::PauseFiles;
pub(crate) use memory::MemoryPauses;

/// The pauses in force, by target.
#[async_trait]
pub trait PauseStore: Send + Sync {
    /// Every pause in force, ordered by target (workflows first, then task queues, each by
    /// name).
    async fn list_pauses(&self) -> Result<Vec<Pause>, WorldError>;

    /// Sets a pause, replacing the one on the same target if there is one (its `by`, `reason`
    /// and `since` are the new pause's). Durable stores make it durable before returning.
    async fn save_pause(&self, pause: &Pause) -> Result<(), WorldError>;

    /// Lifts the pause on `target`; returns it, or `None` if there was none. Durable stores
    /// make it durable before returning.
    async fn remove_pause(&self, target: &PauseTarget) -> Result<Option<Pause>, WorldError>;
}
