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
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use parking_lot::Mutex;

pub(crate) mod pace;
mod precise;

pub(crate) use pace::Pace;

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

    /// Like [`Clock::sleep_until`], for the ticks of periodic housekeeping loops (autoscaler,
    /// worker heartbeats, liveness monitor).
    ///
    /// The difference only matters on clocks that are driven by a test: a background sleeper is
    /// woken when time passes its deadline, but does not count as "something is waiting on
    /// time", so a harness that jumps from deadline to deadline
    /// ([`VirtualClock::next_deadline`]) skips straight over these ticks instead of stopping at
    /// every one (a thirty-day sleep would otherwise take half a million jumps). A loop on
    /// such a tick should compute its next deadline from `now_ms()` when it wakes, not catch
    /// up on the ticks it missed.
    ///
    /// The default is [`Clock::sleep_until`].
    fn sleep_until_background(&self, deadline: Millis) -> BoxFuture<'static, ()> {
        self.sleep_until(deadline)
    }
}

/// Converts a [`Duration`] to whole milliseconds, saturating at `i64::MAX`.
pub fn duration_ms(duration: Duration) -> Millis {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The real clock: wall time from the operating system. Sleeps wake within a fraction of a
/// millisecond of their deadline (tokio's timer alone would round up to its next millisecond
/// tick, and later when the runtime is idle); housekeeping ticks wait on tokio's timer.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        // With `sleep_until` below, the only place in the engine that reads the system clock.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(duration_ms)
            .unwrap_or(0)
    }

    fn sleep_until(&self, deadline: Millis) -> BoxFuture<'static, ()> {
        // Timers, timeouts and polls: woken on time (see `precise`), not on tokio's next
        // millisecond tick.
        Box::pin(precise::sleep_until(Instant::now() + until(deadline)))
    }

    fn sleep_until_background(&self, deadline: Millis) -> BoxFuture<'static, ()> {
        // Housekeeping ticks: a millisecond late is nothing to them.
        Box::pin(tokio::time::sleep(until(deadline)))
    }
}

/// The time from now until `deadline` on the system clock, measured from the precise time,
/// not `now_ms`'s whole milliseconds (which would add up to a millisecond).
fn until(deadline: Millis) -> Duration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Duration::from_millis(u64::try_from(deadline).unwrap_or(0)).saturating_sub(now)
}

/// A clock whose time moves only when [`VirtualClock::advance`] or [`VirtualClock::set`] is called.
///
/// Sleepers are woken, in deadline order, as soon as time reaches their deadline. Background
/// sleepers ([`Clock::sleep_until_background`]) are woken the same way but kept apart: they are
/// not reported by [`VirtualClock::next_deadline`].
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
    /// Sleepers on background ticks: woken by `set`, invisible to `next_deadline`.
    background: Mutex<BTreeMap<(Millis, u64), Waker>>,
}

impl VirtualInner {
    fn sleepers(&self, background: bool) -> &Mutex<BTreeMap<(Millis, u64), Waker>> {
        if background {
            &self.background
        } else {
            &self.sleepers
        }
    }
}

impl VirtualClock {
    /// A virtual clock that starts at `start_ms` (milliseconds since the Unix epoch).
    pub fn new(start_ms: Millis) -> Self {
        Self {
            inner: Arc::new(VirtualInner {
                now: AtomicI64::new(start_ms),
                next_id: AtomicU64::new(0),
                sleepers: Mutex::new(BTreeMap::new()),
                background: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// Moves time forward by `by` and wakes every sleeper whose deadline has passed.
    pub fn advance(&self, by: Duration) {
        self.set(self.now_ms().saturating_add(duration_ms(by)));
    }

    /// Sets the time to `to`, if it is later than now, and wakes due sleepers (background ones
    /// included). Time never goes back.
    pub fn set(&self, to: Millis) {
        self.inner.now.fetch_max(to, Ordering::SeqCst);
        let now = self.now_ms();
        let take_due = |sleepers: &Mutex<BTreeMap<(Millis, u64), Waker>>| {
            let mut sleepers = sleepers.lock();
            let later = sleepers.split_off(&(now.saturating_add(1), 0));
            std::mem::replace(&mut *sleepers, later).into_values()
        };
        let due: Vec<Waker> = take_due(&self.inner.sleepers)
            .chain(take_due(&self.inner.background))
            .collect();
        for waker in due {
            waker.wake();
        }
    }

    /// The earliest deadline anyone is sleeping until, if any.
    ///
    /// Background sleepers ([`Clock::sleep_until_background`]) are not counted: they are
    /// periodic housekeeping, not work waiting on time.
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
            background: false,
        })
    }

    fn sleep_until_background(&self, deadline: Millis) -> BoxFuture<'static, ()> {
        Box::pin(VirtualSleep {
            inner: self.inner.clone(),
            deadline,
            id: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
            background: true,
        })
    }
}

struct VirtualSleep {
    inner: Arc<VirtualInner>,
    deadline: Millis,
    id: u64,
    background: bool,
}

impl Future for VirtualSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut sleepers = self.inner.sleepers(self.background).lock();
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
        self.inner
            .sleepers(self.background)
            .lock()
            .remove(&(self.deadline, self.id));
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
    async fn background_sleepers_wake_but_are_not_next_deadlines() {
        let clock = VirtualClock::new(0);
        let tick = tokio::spawn(clock.sleep_until_background(100));
        let work = tokio::spawn(clock.sleep_until(1_000));
        tokio::task::yield_now().await;
        assert_eq!(
            clock.next_deadline(),
            Some(1_000),
            "the tick is not reported"
        );
        clock.advance(Duration::from_millis(99));
        tokio::task::yield_now().await;
        assert!(!tick.is_finished());
        clock.set(150);
        tick.await.unwrap();
        assert!(!work.is_finished());
        clock.set(1_000);
        work.await.unwrap();
        assert_eq!(clock.next_deadline(), None);
    }

    #[tokio::test]
    async fn background_sleep_already_due_is_ready_and_drop_unregisters() {
        let clock = VirtualClock::new(500);
        clock.sleep_until_background(500).await;
        let mut fut = clock.sleep_until_background(600);
        assert!(futures::poll!(&mut fut).is_pending());
        assert_eq!(clock.inner.background.lock().len(), 1);
        drop(fut);
        assert!(clock.inner.background.lock().is_empty());
        assert_eq!(clock.next_deadline(), None);
    }

    #[tokio::test]
    async fn system_clock_sleeps_past_their_deadline_end_at_once() {
        let clock = SystemClock;
        let now = clock.now_ms();
        clock.sleep_until_background(now - 1).await;
        clock.sleep_until(now - 1).await;
    }

    #[tokio::test]
    async fn system_clock_sleep_ends_at_its_deadline_not_before() {
        let clock = SystemClock;
        let deadline = clock.now_ms() + 5;
        clock.sleep_until(deadline).await;
        assert!(clock.now_ms() >= deadline);
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
