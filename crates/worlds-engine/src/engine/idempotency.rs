//! De-duplication of starts by idempotency key, within one process.
//!
//! The store remembers which run each key started and when (it is in the run's
//! `workflow_queued`), so keys outlive a restart and, on a shared directory, other processes.
//! What the store cannot see is a start still in progress: this map holds each key from the
//! moment a start claims it until its run is created, so a concurrent start with the same key
//! waits for that run instead of creating a second one. It also remembers recent starts so a
//! repeat needs no store lookup.
//!
//! A key is never held while its run executes: holding it until the run finishes would block a
//! run that starts its own continuation with the same key behind itself. The wait covers only
//! the creation, which never waits on a run.

use std::collections::HashMap;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::clock::Millis;

/// Started keys kept beyond this many are swept for expired ones.
const SWEEP_ABOVE: usize = 1024;

/// A run a key started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyedRun {
    pub(crate) run_id: String,
    pub(crate) workflow_id: String,
    pub(crate) name: String,
    pub(crate) at: Millis,
}

enum KeyState {
    /// A start holds the key; its sender is dropped when that start ends, either way.
    Starting(watch::Receiver<()>),
    Started(KeyedRun),
}

/// What [`IdempotencyKeys::claim`] found.
pub(crate) enum Claim<'a> {
    /// The key started this run within the TTL.
    Started(KeyedRun),
    /// Another start holds the key: wait for it to end, then claim again.
    Wait(watch::Receiver<()>),
    /// This start holds the key now.
    Mine(KeyGuard<'a>),
}

/// Idempotency keys being started and recently started in this process.
#[derive(Default)]
pub(crate) struct IdempotencyKeys {
    keys: Mutex<HashMap<String, KeyState>>,
}

impl IdempotencyKeys {
    /// Claims `key` at `now`: a start within `ttl_ms` before is returned, a start in progress
    /// must be waited for, and otherwise the key is this caller's until its guard is dropped.
    pub(crate) fn claim(&self, key: &str, now: Millis, ttl_ms: i64) -> Claim<'_> {
        let mut keys = self.keys.lock();
        match keys.get(key) {
            Some(KeyState::Started(run)) if now - run.at < ttl_ms => {
                return Claim::Started(run.clone())
            }
            Some(KeyState::Starting(rx)) => return Claim::Wait(rx.clone()),
            _ => {}
        }
        if keys.len() > SWEEP_ABOVE {
            keys.retain(|_, state| match state {
                KeyState::Started(run) => now - run.at < ttl_ms,
                KeyState::Starting(_) => true,
            });
        }
        let (tx, rx) = watch::channel(());
        keys.insert(key.to_owned(), KeyState::Starting(rx));
        Claim::Mine(KeyGuard {
            keys: self,
            key: key.to_owned(),
            _done: tx,
            finished: false,
        })
    }

    /// How many keys are held or remembered (for tests of the sweep).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys.lock().len()
    }
}

/// A claimed key. [`finish`](Self::finish) records the run it started; dropping it unfinished
/// (the start failed or was abandoned) lets the key go. Either way, waiters wake.
pub(crate) struct KeyGuard<'a> {
    keys: &'a IdempotencyKeys,
    key: String,
    _done: watch::Sender<()>,
    finished: bool,
}

impl KeyGuard<'_> {
    /// Records that the key started `run`.
    pub(crate) fn finish(mut self, run: KeyedRun) {
        self.keys
            .keys
            .lock()
            .insert(self.key.clone(), KeyState::Started(run));
        self.finished = true;
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.keys.keys.lock().remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, at: Millis) -> KeyedRun {
        KeyedRun {
            run_id: id.into(),
            workflow_id: id.into(),
            name: "w".into(),
            at,
        }
    }

    #[test]
    fn a_start_is_returned_within_the_ttl_and_forgotten_after() {
        let keys = IdempotencyKeys::default();
        let Claim::Mine(guard) = keys.claim("k", 1000, 5000) else {
            panic!("first claim should be ours")
        };
        guard.finish(run("wrun_1", 1000));
        assert!(matches!(keys.claim("k", 5999, 5000), Claim::Started(r) if r.run_id == "wrun_1"));
        assert!(matches!(keys.claim("k", 6000, 5000), Claim::Mine(_)));
    }

    #[tokio::test]
    async fn a_second_start_waits_for_the_first_and_a_failed_start_lets_go() {
        let keys = IdempotencyKeys::default();
        let Claim::Mine(guard) = keys.claim("k", 0, 5000) else {
            panic!("first claim should be ours")
        };
        let Claim::Wait(mut rx) = keys.claim("k", 0, 5000) else {
            panic!("second claim should wait")
        };
        drop(guard);
        assert!(rx.changed().await.is_err(), "the waiter wakes");
        assert!(matches!(keys.claim("k", 0, 5000), Claim::Mine(_)));
    }

    #[test]
    fn expired_starts_are_swept() {
        let keys = IdempotencyKeys::default();
        for i in 0..=SWEEP_ABOVE {
            if let Claim::Mine(guard) = keys.claim(&format!("k{i}"), 0, 10) {
                guard.finish(run("wrun", 0));
            }
        }
        let late = keys.claim("late", 100, 10);
        assert!(matches!(late, Claim::Mine(_)));
        assert_eq!(keys.len(), 1, "only the new claim is left");
    }
}
