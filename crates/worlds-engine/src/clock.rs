//! Time, injectable.
//!
//! Every piece of the engine that needs "now" or needs to wait goes through a [`Clock`]. Production
//! worlds use [`SystemClock`]; tests use [`VirtualClock`], whose time only moves when the test says
//! so, which lets a thirty-day sleep finish in microseconds.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use parking_lot::Mutex;

/// Milliseconds since the Unix epoch, the engine's unit of wall time.
pub type Millis = i64;

/// A source of time that the engine reads and waits on.
///
/// Implementations must be cheap to call: the engine reads the clock on every event it records.
pub trait Clock: Send + Sync + 'static {
    /// The current time, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> Millis;

    /// A future that completes once [`Clock::now_ms`] has reached `deadline`.
    fn sleep_until(&self, deadline: Millis) -> BoxFuture<'static, ()>;

    /// A future that completes after `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        let deadline = self.now_ms().saturating_add(duration_ms(duration));
        self.sleep_until(deadline)
    }
}

/// Converts a [`Duration`] to whole milliseconds, saturating at `i64::MAX`.
pub fn duration_ms(duration: Duration) -> Millis {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The real clock: wall time from the operating system, waits on tokio's timer.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        // The one place in the engine that reads the system clock.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(duration_ms)
            .unwrap_or(0)
    }

    fn sleep_until(&self, deadline: Millis) -> BoxFuture<'static, ()> {
        let wait = deadline.saturating_sub(self.now_ms()).max(0);
        Box::pin(tokio::time::sleep(Duration::from_millis(wait as u64)))
    }
}

/// A clock whose time moves only when [`VirtualClock::advance`] or [`VirtualClock::set`] is called.
///
/// Sleepers are woken, in deadline order, as soon as time reaches their deadline.
///
/// ```
/// use worlds_engine::clock::{Clock, VirtualClock};
/// let clock = VirtualClock::new(1_000);
/// clock.advance(std::time::Duration::from_secs(2));
/// assert_eq!(clock.now_ms(), 3_000);
/// ```
#[derive(Clone)]
pub struct VirtualClock {
    inner: Arc<VirtualInner>,
}

struct VirtualInner {
    now: AtomicI64,
    next_id: AtomicU64,
    sleepers: Mutex<BTreeMap<(Millis, u64), Waker>>,
}

impl VirtualClock {
    /// A virtual clock that starts at `start_ms` (milliseconds since the Unix epoch).
    pub fn new(start_ms: Millis) -> Self {
        Self {
            inner: Arc::new(VirtualInner {
                now: AtomicI64::new(start_ms),
                next_id: AtomicU64::new(0),
                sleepers: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// Moves time forward by `by` and wakes every sleeper whose deadline has passed.
    pub fn advance(&self, by: Duration) {
        self.set(self.now_ms().saturating_add(duration_ms(by)));
    }

    /// Sets the time to `to`, if it is later than now, and wakes due sleepers. Time never goes back.
    pub fn set(&self, to: Millis) {
        self.inner.now.fetch_max(to, Ordering::SeqCst);
        let now = self.now_ms();
        let due: Vec<Waker> = {
            let mut sleepers = self.inner.sleepers.lock();
            let later = sleepers.split_off(&(now.saturating_add(1), 0));
            std::mem::replace(&mut *sleepers, later)
                .into_values()
                .collect()
        };
        for waker in due {
            waker.wake();
        }
    }

    /// The earliest deadline anyone is sleeping until, if any.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.inner.sleepers.lock().keys().next().map(|(at, _)| *at)
    }
}

impl std::fmt::Debug for VirtualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtualClock")
            .field("now_ms", &self.now_ms())
            .finish()
    }
}

impl Clock for VirtualClock {
    fn now_ms(&self) -> Millis {
        self.inner.now.load(Ordering::SeqCst)
    }

    fn sleep_until(&self, deadline: Millis) -> BoxFuture<'static, ()> {
        Box::pin(VirtualSleep {
            inner: self.inner.clone(),
            deadline,
            id: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
        })
    }
}

struct VirtualSleep {
    inner: Arc<VirtualInner>,
    deadline: Millis,
    id: u64,
}

impl Future for VirtualSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut sleepers = self.inner.sleepers.lock();
        if self.inner.now.load(Ordering::SeqCst) >= self.deadline {
            sleepers.remove(&(self.deadline, self.id));
            return Poll::Ready(());
        }
        sleepers.insert((self.deadline, self.id), cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for VirtualSleep {
    fn drop(&mut self) {
        self.inner.sleepers.lock().remove(&(self.deadline, self.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn virtual_sleep_wakes_when_time_reaches_deadline() {
        let clock = VirtualClock::new(0);
        let sleeper = tokio::spawn(clock.sleep_until(500));
        tokio::task::yield_now().await;
        assert_eq!(clock.next_deadline(), Some(500));
        clock.advance(Duration::from_millis(499));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(Duration::from_millis(1));
        sleeper.await.unwrap();
        assert_eq!(clock.next_deadline(), None);
    }

    #[test]
    fn virtual_time_never_goes_back() {
        let clock = VirtualClock::new(100);
        clock.set(50);
        assert_eq!(clock.now_ms(), 100);
    }

    #[tokio::test]
    async fn dropped_sleep_unregisters() {
        let clock = VirtualClock::new(0);
        let mut fut = clock.sleep_until(10);
        assert!(futures::poll!(&mut fut).is_pending());
        drop(fut);
        assert_eq!(clock.next_deadline(), None);
    }
}
