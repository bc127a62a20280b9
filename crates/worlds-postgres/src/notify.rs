//! Wake-ups between processes with LISTEN/NOTIFY.
//!
//! Each store sends and listens on one channel per schema. Notifications are hints: a missed
//! one only delays the work until the engine's next poll.
//!
//! - **Sending** never happens inside a write's transaction (a `NOTIFY` takes a cluster-wide
//!   lock held through commit). After a commit the store queues a payload; a notifier task
//!   collects the queue, drops duplicates and sends them all in one statement, then waits a few
//!   milliseconds so that a burst of writes costs one round trip.
//! - **Listening** uses one dedicated connection per store (its own one-connection pool, never
//!   the store's pool), pinged every few seconds so a half-open socket is noticed. After every
//!   (re)connect the channel is listened to again and the store's change signal is raised, so
//!   a notification missed while disconnected is made up by the scan that follows.
//!
//! A payload is `{sender member} {kind} {run id}`; kinds: `r` a run to claim (created, or
//! released by its holder), `w` a write to a run (its holder, if another process, reads it
//! back), `s` a stream of the run got a chunk or was closed.

use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::PgPool;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use crate::{Inner, PostgresStore};

/// How long the notifier waits after a flush, collecting the next burst.
const COALESCE: Duration = Duration::from_millis(5);
/// How often the listener connection is pinged when no notification arrives.
const PING_EVERY: Duration = Duration::from_secs(5);
/// How long a ping may take before the connection is taken for dead.
const PING_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a notification says happened to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// A run to claim: created, or released by its holder.
    Claimable,
    /// A write to a run.
    Written,
    /// A stream chunk was written or a stream closed.
    Stream,
}

impl Change {
    fn tag(self) -> &'static str {
        match self {
            Change::Claimable => "r",
            Change::Written => "w",
            Change::Stream => "s",
        }
    }
}

/// The channel of a schema: at most 63 bytes (longer names are cut as PostgreSQL cuts
/// identifiers, so sender and listener agree). Schema names are ASCII.
pub(crate) fn channel(schema: &str) -> String {
    let mut name = format!("worlds_{schema}");
    name.truncate(63);
    name
}

/// The payload of a change.
pub(crate) fn payload(sender: &str, change: Change, run_id: &str) -> String {
    format!("{sender} {} {run_id}", change.tag())
}

/// A payload read back: sender, change, run id.
fn parse(payload: &str) -> Option<(&str, Change, &str)> {
    let mut parts = payload.splitn(3, ' ');
    let sender = parts.next()?;
    let change = match parts.next()? {
        "r" => Change::Claimable,
        "w" => Change::Written,
        "s" => Change::Stream,
        _ => return None,
    };
    Some((sender, change, parts.next()?))
}

/// Starts the notifier task: sends every queued payload on `channel`, coalesced. Ends when
/// every sender is gone.
pub(crate) fn spawn_notifier(
    pool: PgPool,
    channel: String,
    mut rx: mpsc::UnboundedReceiver<String>,
) {
    tokio::spawn(async move {
        let mut queued = Vec::new();
        while rx.recv_many(&mut queued, 4096).await > 0 {
            queued.sort_unstable();
            queued.dedup();
            let sent = sqlx::query("SELECT pg_notify($1, p) FROM UNNEST($2::text[]) AS p")
                .bind(&channel)
                .bind(&queued)
                .execute(&pool)
                .await;
            if let Err(e) = sent {
                // A lost hint: the pollers find the change at their next interval.
                tracing::debug!("could not send {} notifications: {e}", queued.len());
            }
            queued.clear();
            tokio::time::sleep(COALESCE).await;
        }
    });
}

/// Starts the listener task of a store, until `stop` is cancelled or the store is dropped.
pub(crate) fn spawn_listener(
    inner: Weak<Inner>,
    connect: PgConnectOptions,
    channel: String,
    changes: Arc<Notify>,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(50);
        loop {
            let connected = tokio::select! {
                () = stop.cancelled() => return,
                l = listen(&connect, &channel) => l,
            };
            let mut listener = match connected {
                Ok(listener) => listener,
                Err(e) => {
                    tracing::debug!("could not listen on {channel}: {e}; retrying");
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            backoff = Duration::from_millis(50);
            // Whatever happened while not listening is found by the scan this raises.
            changes.notify_one();
            loop {
                let next = tokio::select! {
                    () = stop.cancelled() => return,
                    n = tokio::time::timeout(PING_EVERY, listener.try_recv()) => n,
                };
                match next {
                    Ok(Ok(Some(notification))) => {
                        let Some(inner) = inner.upgrade() else { return };
                        PostgresStore { inner }.on_notification(notification.payload(), &changes);
                    }
                    // Reconnected (and listening again) after a lost connection.
                    Ok(Ok(None)) => changes.notify_one(),
                    Ok(Err(e)) => {
                        tracing::debug!("the listener connection failed: {e}; reconnecting");
                        break;
                    }
                    Err(_) => {
                        let ping = sqlx::query("SELECT 1").execute(&mut listener);
                        if !matches!(tokio::time::timeout(PING_TIMEOUT, ping).await, Ok(Ok(_))) {
                            tracing::debug!(
                                "the listener connection does not answer; reconnecting"
                            );
                            break;
                        }
                    }
                }
                if inner.strong_count() == 0 {
                    return;
                }
            }
        }
    });
}

/// A listener on `channel` over a connection of its own (a fresh one-connection pool, so a
/// dead connection is never handed back).
async fn listen(connect: &PgConnectOptions, channel: &str) -> Result<PgListener, sqlx::Error> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy_with(connect.clone());
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.ignore_pool_close_event(true);
    listener.listen(channel).await?;
    Ok(listener)
}

impl PostgresStore {
    /// Queues a notification, sent by the notifier task after the write committed.
    pub(crate) fn announce(&self, change: Change, run_id: &str) {
        let _ = self
            .inner
            .notifier
            .send(payload(&self.inner.member_id, change, run_id));
    }

    /// Acts on a notification from another process.
    fn on_notification(&self, payload: &str, changes: &Notify) {
        let Some((sender, change, run_id)) = parse(payload) else {
            return;
        };
        if sender == self.inner.member_id {
            return;
        }
        match change {
            Change::Claimable => changes.notify_one(),
            Change::Written => {
                if self.inner.held.lock().contains_key(run_id) {
                    changes.notify_one();
                }
            }
            Change::Stream => self.bump(run_id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_read_back_and_channels_fit_an_identifier() {
        let p = payload("mbr_1", Change::Written, "wrun_2");
        assert_eq!(parse(&p), Some(("mbr_1", Change::Written, "wrun_2")));
        assert_eq!(parse("mbr_1 x wrun_2"), None);
        assert_eq!(parse("garbage"), None);
        assert_eq!(channel("worlds"), "worlds_worlds");
        assert_eq!(channel(&"a".repeat(63)).len(), 63);
    }
}
