//! Sleeping until a deadline and waking well within a millisecond of it.
//!
//! tokio's timer counts whole milliseconds. A sleep ends on the first tick at or after its
//! deadline, and a runtime with nothing else to do parks until then with a timeout that is also
//! rounded up to a millisecond: an idle world woke its timer loop 0.8–2.0 ms after the deadline
//! (1.4 ms on average on the 2-core machines the benchmarks run on). For durable timers that
//! delay is what users see: a run that sleeps two seconds resumes late by it, and every run of a
//! burst of timers is pushed back by it.
//!
//! [`sleep_until`] keeps tokio's timer for the bulk of the wait and hands the last
//! [`HANDOVER`] to one thread per process, which waits on a condition variable with the earliest
//! deadline as its timeout. The kernel keeps such timeouts with its high-resolution timers, so
//! the thread wakes the sleeper tens of microseconds after its deadline. A sleep dropped before
//! its last stretch (an activity timeout that did not expire, most of them) never reaches the
//! thread; the thread is started by the first sleep that does.
//!
//! A sleep never ends before its deadline: it is ready only once [`Instant::now`] has reached it.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How long before its deadline a sleep leaves tokio's timer for the waking thread: more than
/// tokio's own lateness when the runtime is idle (under 2 ms).
const HANDOVER: Duration = Duration::from_millis(3);

/// Sleepers in their last stretch, and the thread that wakes them.
struct Waking {
    sleepers: Mutex<Sleepers>,
    /// Signalled when a sleeper due before every other one arrives.
    earlier: Condvar,
    /// The thread has been started (or could not be, see [`Waking::start`]).
    started: AtomicBool,
}

struct Sleepers {
    /// Wakers by deadline, then by arrival.
    due: BTreeMap<(Instant, u64), Waker>,
    next_id: u64,
    /// The thread could not be started: sleepers fall back to tokio's timer.
    unavailable: bool,
}

static WAKING: Waking = Waking {
    sleepers: Mutex::new(Sleepers {
        due: BTreeMap::new(),
        next_id: 0,
        unavailable: false,
    }),
    earlier: Condvar::new(),
    started: AtomicBool::new(false),
};

impl Waking {
    /// Starts the waking thread once per process.
    fn start(&'static self) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("worlds-timer".into())
            .spawn(move || self.run());
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start the timer thread; timers wake on tokio's millisecond ticks");
            let mut sleepers = self.sleepers.lock();
            sleepers.unavailable = true;
            // Whoever waits gets polled again and sleeps on tokio's timer instead.
            for (_, waker) in std::mem::take(&mut sleepers.due) {
                waker.wake();
            }
        }
    }

    /// The waking thread: wakes every sleeper whose deadline has passed, then waits for the
    /// next deadline or for an earlier sleeper.
    fn run(&self) {
        let mut sleepers = self.sleepers.lock();
        let mut due = Vec::new();
        loop {
            let now = Instant::now();
            while let Some(first) = sleepers.due.first_entry() {
                if first.key().0 > now {
                    break;
                }
                due.push(first.remove());
            }
            if !due.is_empty() {
                // Woken outside the lock: a waker may run its task's poll right away.
                drop(sleepers);
                for waker in due.drain(..) {
                    waker.wake();
                }
                sleepers = self.sleepers.lock();
                continue;
            }
            match sleepers.due.first_key_value().map(|((at, _), _)| *at) {
                Some(at) => {
                    self.earlier.wait_until(&mut sleepers, at);
                }
                None => self.earlier.wait(&mut sleepers),
            }
        }
    }
}

/// Completes at `deadline`, to well under a millisecond (see the module docs); never before.
pub(crate) async fn sleep_until(deadline: Instant) {
    if let Some(handover) = deadline.checked_sub(HANDOVER) {
        if handover > Instant::now() {
            tokio::time::sleep_until(handover.into()).await;
        }
    }
    if (LastStretch {
        deadline,
        key: None,
    })
    .await
    {
        // No waking thread: tokio's timer, rounded up to its tick, is the best there is.
        tokio::time::sleep_until(deadline.into()).await;
    }
}

/// The last stretch of a sleep, woken by the waking thread. Resolves to `true` if that thread
/// is unavailable.
struct LastStretch {
    deadline: Instant,
    /// The sleeper's place in [`Sleepers::due`], while it has one.
    key: Option<(Instant, u64)>,
}

impl Future for LastStretch {
    type Output = bool;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        if Instant::now() >= self.deadline {
            self.leave();
            return Poll::Ready(false);
        }
        let waking = &WAKING;
        waking.start();
        let mut sleepers = waking.sleepers.lock();
        if sleepers.unavailable {
            drop(sleepers);
            self.key = None;
            return Poll::Ready(true);
        }
        let key = match self.key {
            Some(key) => key,
            None => {
                let key = (self.deadline, sleepers.next_id);
                sleepers.next_id += 1;
                self.key = Some(key);
                key
            }
        };
        let first = sleepers
            .due
            .first_key_value()
            .is_none_or(|(earliest, _)| key <= *earliest);
        sleepers.due.insert(key, cx.waker().clone());
        drop(sleepers);
        if first {
            waking.earlier.notify_one();
        }
        Poll::Pending
    }
}

impl LastStretch {
    /// Gives up the sleeper's place, if it has one.
    fn leave(&mut self) {
        if let Some(key) = self.key.take() {
            WAKING.sleepers.lock().due.remove(&key);
        }
    }
}

impl Drop for LastStretch {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(key: (Instant, u64)) -> bool {
        WAKING.sleepers.lock().due.contains_key(&key)
    }

    #[tokio::test]
    async fn a_sleep_never_ends_before_its_deadline() {
        for ms in [0, 1, 2, 4] {
            let deadline = Instant::now() + Duration::from_millis(ms);
            sleep_until(deadline).await;
            assert!(Instant::now() >= deadline, "woke before a {ms} ms deadline");
        }
    }

    #[tokio::test]
    async fn sleepers_wake_in_deadline_order_whatever_order_they_came_in() {
        let now = Instant::now();
        let order = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sleeps: Vec<_> = [3u64, 1, 2]
            .into_iter()
            .map(|ms| {
                let order = order.clone();
                tokio::spawn(async move {
                    sleep_until(now + Duration::from_millis(ms)).await;
                    order.lock().push(ms);
                })
            })
            .collect();
        for sleep in sleeps {
            sleep.await.unwrap();
        }
        assert_eq!(*order.lock(), vec![1, 2, 3]);
    }

    #[tokio::test]
    async fn a_dropped_sleep_leaves_the_waking_thread() {
        let mut stretch = Box::pin(LastStretch {
            deadline: Instant::now() + Duration::from_secs(60),
            key: None,
        });
        let waker = futures::task::noop_waker();
        assert!(stretch
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        let key = stretch.key.expect("a sleeper waiting has a place");
        assert!(waiting(key));
        drop(stretch);
        assert!(
            !waiting(key),
            "a dropped sleep must not stay with the thread"
        );
    }

    #[tokio::test]
    async fn a_sleep_polled_again_keeps_one_place() {
        let mut stretch = Box::pin(LastStretch {
            deadline: Instant::now() + Duration::from_secs(60),
            key: None,
        });
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let _ = stretch.as_mut().poll(&mut cx);
        let key = stretch.key.expect("waiting");
        let _ = stretch.as_mut().poll(&mut cx);
        assert_eq!(stretch.key, Some(key));
        let places = WAKING
            .sleepers
            .lock()
            .due
            .keys()
            .filter(|k| k.0 == key.0)
            .count();
        assert_eq!(places, 1);
    }
}
