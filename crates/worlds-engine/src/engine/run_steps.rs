//! The step attempts of one run in motion in this process: the token that cancels them, and
//! how many of them are recording their start.
//!
//! A run's steps are let go (their token cancelled) when the run ends, when its workflow
//! attempt fails, and when the run is read back from its history after a store call for it
//! failed (`resync`). The last case needs more than a cancel. Recovery plans from what the
//! history holds: a step scheduled but not started is queued again as the same attempt, a
//! started one counts as lost. An attempt that was admitted before the let-go and whose start
//! lands after recovery's read breaks that plan: the queued copy is refused (the attempt is
//! running already), and the attempt that did start is cancelled, so nobody ever ends it and
//! the run waits forever.
//!
//! So an attempt takes a [`StartPermit`] before it records its start: the token is checked
//! and the count raised under the lock that lets go, and the count falls when the permit is
//! dropped, once the start is recorded or refused. Whoever let go of the steps waits for
//! [`RunSteps::settled`] before reading the history, and every start this process made for
//! the run is in it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The steps of one run: their cancellation token and their starts in flight.
#[derive(Default)]
pub(crate) struct RunSteps {
    token: CancellationToken,
    /// Permits not yet dropped.
    starting: AtomicU32,
    /// Told when `starting` falls to zero.
    settled: Notify,
}

impl RunSteps {
    /// Cancels the steps (cooperatively: each sees its context's `is_cancelled()`).
    pub(crate) fn cancel(&self) {
        self.token.cancel();
    }

    /// A permit to record a start, or `None` if the steps are cancelled. The caller holds the
    /// lock under which the steps are let go, so no permit is given after that.
    pub(crate) fn permit(self: &Arc<Self>) -> Option<StartPermit> {
        if self.token.is_cancelled() {
            return None;
        }
        self.starting.fetch_add(1, Ordering::AcqRel);
        Some(StartPermit(self.clone()))
    }

    /// Resolves once every permit given is dropped: every start in flight is recorded or
    /// refused.
    pub(crate) async fn settled(&self) {
        loop {
            let notified = self.settled.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the count is read, so a drop in between is not missed.
            notified.as_mut().enable();
            if self.starting.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Leave for one attempt to record its start; see the [module documentation](self).
pub(crate) struct StartPermit(Arc<RunSteps>);

impl StartPermit {
    /// The token of the run's steps.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.0.token
    }
}

impl Drop for StartPermit {
    fn drop(&mut self) {
        if self.0.starting.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn cancelled_steps_give_no_permit() {
        let steps = Arc::new(RunSteps::default());
        assert!(steps.permit().is_some());
        steps.cancel();
        assert!(steps.permit().is_none());
    }

    #[tokio::test]
    async fn settled_waits_for_every_permit() {
        let steps = Arc::new(RunSteps::default());
        // Nothing in flight: settled at once.
        assert!(steps.settled().now_or_never().is_some());

        let first = steps.permit().unwrap();
        let second = steps.permit().unwrap();
        steps.cancel();
        let mut settled = std::pin::pin!(steps.settled());
        assert!(settled.as_mut().now_or_never().is_none());
        drop(first);
        assert!(settled.as_mut().now_or_never().is_none());
        drop(second);
        assert!(settled.now_or_never().is_some());
    }
}
