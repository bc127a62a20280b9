//! The world's workers seen from outside: who runs, who died, their heartbeats.

use super::World;
use crate::worker::WorkerInfo;

/// The world's workers, from [`World::workers`].
#[derive(Debug, Clone, Copy)]
pub struct WorldWorkers<'w> {
    world: &'w World,
}

impl World {
    /// The world's workers: the running ones, the dead ones, their heartbeats.
    pub fn workers(&self) -> WorldWorkers<'_> {
        WorldWorkers { world: self }
    }
}

impl WorldWorkers<'_> {
    /// Snapshots of the workers: the running ones (grown and shrunk by the autoscaler), and
    /// after `shutdown` the stopped ones, until the next `start`. Workers declared dead by the
    /// liveness monitor are listed by [`dead`](Self::dead) instead.
    pub fn list(&self) -> Vec<WorkerInfo> {
        self.world.workers.infos()
    }

    /// Workers the liveness monitor declared dead (no heartbeat within `heartbeat_timeout`),
    /// oldest first, the most recent 64. Each was replaced and its task handed to another
    /// worker; `current_task` names that task.
    pub fn dead(&self) -> Vec<WorkerInfo> {
        self.world.workers.dead()
    }

    /// The last heartbeat of every live worker, of the workers declared dead, and of the
    /// activity attempts being executed, each marked `dead` if its silence exceeds its timeout.
    pub async fn heartbeats(&self) -> Vec<crate::telemetry::HeartbeatEntry> {
        self.world.workers.heartbeats(&self.world.engine).await
    }
}
