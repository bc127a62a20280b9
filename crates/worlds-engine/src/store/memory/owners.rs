//! Which run recorded each step id, hook id and child run id, for the lookups by id. Split
//! into shards by the id's hash, so that runs recording steps on different threads (the hot
//! path) rarely wait on the same lock.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::{FxHashMap, FxHasher};

/// Shards; a power of two well above the number of threads that append at once.
const SHARDS: usize = 32;

/// One shard: id → the run that recorded it.
type Shard = Mutex<FxHashMap<Box<str>, Arc<str>>>;

pub(super) struct Owners {
    shards: Box<[Shard]>,
}

impl Default for Owners {
    fn default() -> Self {
        Owners {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl Owners {
    fn shard(&self, id: &str) -> &Shard {
        let mut hasher = FxHasher::default();
        id.hash(&mut hasher);
        &self.shards[hasher.finish() as usize % SHARDS]
    }

    /// Files `id` under `run`. Ids are unique (ULIDs); should one repeat, the first run to
    /// record it keeps it.
    pub(super) fn record(&self, id: &str, run: &Arc<str>) {
        self.shard(id)
            .lock()
            .entry(Box::from(id))
            .or_insert_with(|| run.clone());
    }

    /// Forgets `id` if `run` recorded it (the run was removed).
    pub(super) fn forget(&self, id: &str, run: &Arc<str>) {
        let mut shard = self.shard(id).lock();
        if shard.get(id).is_some_and(|owner| owner == run) {
            shard.remove(id);
        }
    }

    /// The run that recorded `id`.
    pub(super) fn get(&self, id: &str) -> Option<Arc<str>> {
        self.shard(id).lock().get(id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_run_to_record_an_id_keeps_it() {
        let owners = Owners::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("wrun_a"), Arc::from("wrun_b"));
        for i in 0..100 {
            owners.record(&format!("step_{i}"), &a);
        }
        owners.record("step_7", &b);
        assert_eq!(owners.get("step_7").as_deref(), Some("wrun_a"));
        assert_eq!(owners.get("step_99").as_deref(), Some("wrun_a"));
        assert_eq!(owners.get("step_100"), None);
    }
}
