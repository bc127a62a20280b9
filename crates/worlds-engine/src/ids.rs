//! Identifiers: prefixed, monotonic ULIDs.
//!
//! Every id the engine hands out is a ULID with a short prefix naming what it identifies
//! (`wrun_` for a run, `step_` for a step, `evnt_` for an event, `hook_`, `msg_`, `chnk_`). A ULID
//! starts with its creation time, so sorting ids sorts by time, and the time can be read back with
//! [`timestamp_ms`].

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use parking_lot::Mutex;
use ulid::{Generator, Ulid};

use crate::clock::{Clock, Millis};

/// Prefix of workflow run ids.
pub const RUN_PREFIX: &str = "wrun_";
/// Prefix of step (activity) ids.
pub const STEP_PREFIX: &str = "step_";
/// Prefix of event ids.
pub const EVENT_PREFIX: &str = "evnt_";
/// Prefix of hook ids.
pub const HOOK_PREFIX: &str = "hook_";
/// Prefix of queue message ids.
pub const MESSAGE_PREFIX: &str = "msg_";
/// Prefix of stream chunk ids.
pub const CHUNK_PREFIX: &str = "chnk_";

/// Makes prefixed ULIDs that never go backwards, even within one millisecond or if the clock does.
///
/// Time comes from the world's [`Clock`], so ids made under a virtual clock carry virtual time.
pub struct IdGenerator {
    clock: Arc<dyn Clock>,
    generator: Mutex<Generator>,
}

impl IdGenerator {
    /// A generator reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            generator: Mutex::new(Generator::new()),
        }
    }

    /// A fresh ULID, greater than every ULID this generator made before.
    pub fn ulid(&self) -> Ulid {
        self.ulid_at(self.clock.now_ms())
    }

    /// [`ulid`](Self::ulid) for the time `now` (ms since the Unix epoch) the caller already
    /// read from the clock.
    fn ulid_at(&self, now: Millis) -> Ulid {
        let at = UNIX_EPOCH + Duration::from_millis(now.max(0) as u64);
        let mut generator = self.generator.lock();
        match generator.generate_from_datetime(at) {
            Ok(id) => id,
            // 2^80 ids in one millisecond: borrow the next millisecond rather than fail.
            Err(overflow) => overflow.commit_overflow_increment(),
        }
    }

    /// A fresh id with the given prefix, e.g. `next("wrun_")` → `wrun_01J…`.
    pub fn next(&self, prefix: &str) -> String {
        self.next_at(prefix, self.clock.now_ms())
    }

    /// [`next`](Self::next) for the time `now` the caller already read from the clock: an
    /// event's id then carries the event's own timestamp.
    pub(crate) fn next_at(&self, prefix: &str, now: Millis) -> String {
        let mut text = [0; ulid::ULID_LEN];
        let mut id = String::with_capacity(prefix.len() + ulid::ULID_LEN);
        id.push_str(prefix);
        id.push_str(self.ulid_at(now).array_to_str(&mut text));
        id
    }

    /// A fresh run id (`wrun_…`).
    pub fn run_id(&self) -> String {
        self.next(RUN_PREFIX)
    }

    /// A fresh step id (`step_…`).
    pub fn step_id(&self) -> String {
        self.next(STEP_PREFIX)
    }

    /// A fresh hook id (`hook_…`).
    pub fn hook_id(&self) -> String {
        self.next(HOOK_PREFIX)
    }

    /// A fresh event id (`evnt_…`).
    pub fn event_id(&self) -> String {
        self.next(EVENT_PREFIX)
    }
}

impl std::fmt::Debug for IdGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdGenerator")
    }
}

/// Reads the creation time (ms since the Unix epoch) back from a prefixed id such as
/// `evnt_01HX7K8J4Q5R6S7T8U9V0W1X2Y`. Returns `None` if the part after the last `_` is not a ULID.
///
/// ```
/// use worlds_engine::ids::timestamp_ms;
/// assert_eq!(timestamp_ms("evnt_01ARZ3NDEKTSV4RRFFQ69G5FAV"), Some(1_469_922_850_259));
/// assert_eq!(timestamp_ms("evnt_not-a-ulid"), None);
/// ```
pub fn timestamp_ms(id: &str) -> Option<Millis> {
    let ulid = id.rsplit('_').next()?;
    Ulid::from_string(ulid)
        .ok()
        .map(|u| u.timestamp_ms() as Millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;

    #[test]
    fn ids_are_prefixed_monotonic_and_carry_clock_time() {
        let clock = VirtualClock::new(1_700_000_000_000);
        let ids = IdGenerator::new(Arc::new(clock.clone()));
        let a = ids.run_id();
        let b = ids.run_id();
        assert!(a.starts_with("wrun_") && b.starts_with("wrun_"));
        assert!(a < b, "same millisecond must still increase: {a} {b}");
        assert_eq!(timestamp_ms(&a), Some(1_700_000_000_000));
        clock.advance(Duration::from_millis(5));
        let c = ids.event_id();
        assert_eq!(timestamp_ms(&c), Some(1_700_000_000_005));
        // A time read by the caller is the one the id carries, and order still holds.
        let d = ids.next_at(EVENT_PREFIX, 1_700_000_000_009);
        assert_eq!(timestamp_ms(&d), Some(1_700_000_000_009));
        assert!(c < d);
    }

    #[test]
    fn many_ids_in_one_millisecond_stay_ordered() {
        let ids = IdGenerator::new(Arc::new(VirtualClock::new(42)));
        let all: Vec<String> = (0..10_000).map(|_| ids.step_id()).collect();
        assert!(all.windows(2).all(|w| w[0] < w[1]));
    }
}
