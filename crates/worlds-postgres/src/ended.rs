//! The runs this store recently ended.
//!
//! The statement that records a run's end also deletes its timers and closes its streams, in
//! the same commit. The engine then asks for both again (it does so on every backend); for a
//! run ended here those calls find nothing to do, and answering them from this list saves two
//! round trips per finished run.

use std::collections::VecDeque;

use rustc_hash::FxHashSet;

/// How many ended runs are remembered; an older one costs its clean-up statements again,
/// which find nothing to do.
const LIMIT: usize = 4096;

/// The ids of the runs whose end this store committed, the most recent [`LIMIT`].
#[derive(Default)]
pub(crate) struct RecentlyEnded {
    order: VecDeque<String>,
    ids: FxHashSet<String>,
}

impl RecentlyEnded {
    /// Notes that this store committed the end of `run_id`, with its timers and streams.
    pub(crate) fn note(&mut self, run_id: &str) {
        if !self.ids.insert(run_id.to_owned()) {
            return;
        }
        self.order.push_back(run_id.to_owned());
        if self.order.len() > LIMIT {
            if let Some(oldest) = self.order.pop_front() {
                self.ids.remove(&oldest);
            }
        }
    }

    /// True if this store committed the end of `run_id` lately.
    pub(crate) fn contains(&self, run_id: &str) -> bool {
        self.ids.contains(run_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_most_recent_runs_only() {
        let mut ended = RecentlyEnded::default();
        for i in 0..LIMIT + 10 {
            ended.note(&format!("wrun_{i}"));
        }
        ended.note("wrun_20"); // noted again: not a new entry
        assert!(!ended.contains("wrun_0"));
        assert!(!ended.contains("wrun_9"));
        assert!(ended.contains("wrun_10"));
        assert!(ended.contains(&format!("wrun_{}", LIMIT + 9)));
        assert_eq!(ended.order.len(), LIMIT);
        assert_eq!(ended.ids.len(), LIMIT);
    }
}
