//! The heartbeats of one step attempt, recorded in history in the order they were sent.
//!
//! `ActivityContext::heartbeat` is called from synchronous step code, so it cannot wait for the
//! store. Each beat worth recording is handed to a [`BeatLog`], whose one background task appends
//! beats in order (those that queue up while an append is in flight go together in the next
//! one). Before the attempt's result is recorded, the runner [`flush`](BeatLog::flush)es the log:
//! every beat sent before the step returned is in history before its completion, and the last
//! message a step reports is the one its run shows. Beats sent after the flush (a context kept
//! past the attempt's end) are dropped.

use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use crate::model::EventKind;

use super::authoring::activity::BeatSink;
use super::journal::Journal;

enum Message {
    Beat(Option<String>),
    /// Acknowledged once every beat sent before it is recorded; nothing after it is recorded.
    Flush(oneshot::Sender<()>),
}

/// The ordered heartbeat recorder of one attempt. Its task starts with the first beat, so a
/// step that never beats costs nothing.
pub(crate) struct BeatLog {
    journal: Weak<Journal>,
    run_id: Arc<str>,
    position: u32,
    attempt: u32,
    state: Mutex<State>,
}

enum State {
    /// No beat yet.
    Idle,
    /// The recorder task runs.
    Recording(mpsc::UnboundedSender<Message>),
    /// Flushed: later beats are dropped.
    Closed,
}

impl BeatLog {
    /// A recorder for attempt `attempt` of the step at `position` of run `run_id`.
    pub(crate) fn new(
        journal: Weak<Journal>,
        run_id: Arc<str>,
        position: u32,
        attempt: u32,
    ) -> Self {
        BeatLog {
            journal,
            run_id,
            position,
            attempt,
            state: Mutex::new(State::Idle),
        }
    }

    /// Queues a beat (with its message, if any) to be recorded.
    pub(crate) fn record(&self, message: Option<String>) {
        let mut state = self.state.lock();
        if matches!(*state, State::Idle) {
            *state = State::Recording(self.spawn());
        }
        if let State::Recording(tx) = &*state {
            let _ = tx.send(Message::Beat(message));
        }
    }

    /// Waits until every beat queued so far is recorded, and stops recording.
    pub(crate) async fn flush(&self) {
        let state = std::mem::replace(&mut *self.state.lock(), State::Closed);
        if let State::Recording(tx) = state {
            let (ack, done) = oneshot::channel();
            if tx.send(Message::Flush(ack)).is_ok() {
                let _ = done.await;
            }
        }
    }

    fn spawn(&self) -> mpsc::UnboundedSender<Message> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (journal, run_id) = (self.journal.clone(), self.run_id.clone());
        let (position, attempt) = (self.position, self.attempt);
        tokio::spawn(async move {
            let mut batch = Vec::new();
            while let Some(message) = rx.recv().await {
                let mut flush = None;
                let mut next = Some(message);
                while let Some(message) = next.take() {
                    match message {
                        Message::Beat(message) => {
                            batch.push(EventKind::ActivityHeartbeat {
                                position,
                                attempt,
                                message,
                            });
                            next = rx.try_recv().ok();
                        }
                        Message::Flush(ack) => flush = Some(ack),
                    }
                }
                if !batch.is_empty() {
                    let Some(journal) = journal.upgrade() else {
                        return;
                    };
                    // Refused only if the run ended meanwhile (a cancellation): nothing to keep.
                    let _ = journal.append(&run_id, std::mem::take(&mut batch)).await;
                }
                if let Some(ack) = flush {
                    let _ = ack.send(());
                    return;
                }
            }
        });
        tx
    }
}

/// The step's context records its beats here.
impl BeatSink for BeatLog {
    fn record(&self, message: Option<String>) {
        BeatLog::record(self, message);
    }

    fn flush(&self) -> BoxFuture<'_, ()> {
        Box::pin(BeatLog::flush(self))
    }
}
