//! Failures injected at awkward moments, for tests of what a member does when the database
//! fails between two halves of one piece of work (feature `test-util`; without it every hook
//! here is a no-op the compiler removes).
//!
//! ```no_run
//! # async fn demo(store: worlds_postgres::PostgresStore) {
//! // The next claim that takes runs commits, then its first two reads of them fail.
//! store.faults().fail_reads_after_next_claim(2);
//! # }
//! ```

use worlds_engine::{Event, WorldError};

use crate::PostgresStore;

#[cfg(feature = "test-util")]
pub use imp::Faults;

#[cfg(feature = "test-util")]
mod imp {
    use std::sync::atomic::{AtomicU32, Ordering};

    use parking_lot::Mutex;

    type Hook = Box<dyn Fn() + Send + Sync>;

    /// The failures armed on a store ([`PostgresStore::faults`](crate::PostgresStore::faults)).
    #[derive(Default)]
    pub struct Faults {
        /// Reads to fail after the next claim that takes runs.
        reads_after_claim: AtomicU32,
        /// Reads to fail now.
        reads: AtomicU32,
        /// Claims whose answer is lost after they commit.
        claim_answers: AtomicU32,
        /// Called once each time a step's start has been committed.
        after_step_start: Mutex<Option<Hook>>,
    }

    impl std::fmt::Debug for Faults {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Faults").finish_non_exhaustive()
        }
    }

    impl Faults {
        /// The next claim that takes runs commits, then the next `reads` reads of runs or
        /// histories fail with `Unavailable`, as when the connection breaks right after a
        /// claim.
        pub fn fail_reads_after_next_claim(&self, reads: u32) {
            self.reads_after_claim.store(reads, Ordering::SeqCst);
        }

        /// The next `claims` claims that take runs commit, then answer `Unavailable`, as when
        /// the connection breaks between the commit and its answer: the runs are leased to
        /// this member without its knowing.
        pub fn lose_next_claim_answers(&self, claims: u32) {
            self.claim_answers.store(claims, Ordering::SeqCst);
        }

        /// Calls `hook` each time the start of a step's attempt has been committed, before the
        /// store answers the engine (which then runs the step's code).
        pub fn after_step_start(&self, hook: impl Fn() + Send + Sync + 'static) {
            *self.after_step_start.lock() = Some(Box::new(hook));
        }

        /// Takes one from `counter` if it is above zero.
        fn take(counter: &AtomicU32) -> bool {
            counter
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        }

        pub(crate) fn claimed(&self) -> bool {
            let reads = self.reads_after_claim.swap(0, Ordering::SeqCst);
            if reads > 0 {
                self.reads.fetch_add(reads, Ordering::SeqCst);
            }
            Self::take(&self.claim_answers)
        }

        pub(crate) fn read(&self) -> bool {
            Self::take(&self.reads)
        }

        pub(crate) fn step_started(&self) {
            if let Some(hook) = &*self.after_step_start.lock() {
                hook();
            }
        }
    }
}

impl PostgresStore {
    /// The failures injected into this store's calls.
    #[cfg(feature = "test-util")]
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// A claim that took `claimed` runs committed.
    pub(crate) fn fault_after_claim(&self, claimed: usize) -> Result<(), WorldError> {
        #[cfg(feature = "test-util")]
        if claimed > 0 && self.inner.faults.claimed() {
            return Err(WorldError::Unavailable(format!(
                "injected: the answer of a claim of {claimed} run(s) on {} was lost after it committed",
                self.inner.server
            )));
        }
        let _ = claimed;
        Ok(())
    }

    /// A read of a run or its history begins.
    pub(crate) fn fault_read(&self) -> Result<(), WorldError> {
        #[cfg(feature = "test-util")]
        if self.inner.faults.read() {
            return Err(WorldError::Unavailable(format!(
                "injected: the connection to {} broke while reading a run",
                self.inner.server
            )));
        }
        Ok(())
    }

    /// True if `events`, about to be appended, start a step's attempt and a hook waits for
    /// that ([`Faults::after_step_start`]).
    pub(crate) fn fault_is_step_start(&self, events: &[Event]) -> bool {
        #[cfg(feature = "test-util")]
        return events
            .iter()
            .any(|e| matches!(e.kind, worlds_engine::EventKind::ActivityStarted { .. }));
        #[cfg(not(feature = "test-util"))]
        {
            let _ = events;
            false
        }
    }

    /// A step's start was committed.
    pub(crate) fn fault_after_step_start(&self) {
        #[cfg(feature = "test-util")]
        self.inner.faults.step_started();
    }
}
