//! Appends accepted when they are made: checked against the state this store holds of the run
//! in memory, given their `seq` and queued for the writer, which writes them exactly as they
//! were accepted.
//!
//! For a run this store holds, whose state it has cached and which nobody else is known to
//! have written since, the state in memory is the run's state: the append is checked there,
//! applied there (the cache's state and tail become the run's *tip*, ahead of the database by
//! what the writer has not written yet), and the caller goes on at once
//! ([`EventStore::append_nowait`]) or once the write is committed. Only the waits differ; the
//! round trips do not depend on them, so a workflow's commands and a step's result no longer
//! each wait for a commit before the next thing happens.
//!
//! The writer writes such appends only where the run's row still has the `next_seq` and lease
//! they were accepted on. If it has moved (another process wrote to the run meanwhile, or took
//! it over) or the write's fate is unknown (the connection failed), the accepted appends that
//! did not land cannot be placed elsewhere: the engine was told their `seq`. The run is then
//! *poisoned*: what this store cached of it is forgotten, and its reads of its own records
//! (`history_tip`) and every later append answer `Unavailable` until the run's whole history
//! is read back from the database — which is what the engine does on that answer. A run taken
//! over is not poisoned: its appends answer `LeaseLost` and the store forgets the lease, so
//! what follows is checked as a non-holder's.
//!
//! [`EventStore::append_nowait`]: worlds_engine::store::EventStore::append_nowait

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use sqlx::{PgConnection, Row};
use tokio::sync::oneshot;
use worlds_engine::store::Appended;
use worlds_engine::{Event, RunStatus, WorkflowState, WorldError};

use super::rows::{Rows, RunRow};
use super::{hook_position, snapshot_due, Level, Pending};
use crate::db::{to_json, unsigned};
use crate::{PostgresStore, TAIL_LIMIT};

/// An append accepted at call time, as the writer writes it.
pub(crate) struct Accepted {
    pub(super) run_id: String,
    /// `next_seq` the run's row must have: where the append was accepted.
    base_seq: i64,
    /// The lease epoch it was accepted under.
    epoch: i64,
    events: Vec<Arc<Event>>,
    correlation: Vec<Option<String>>,
    /// The run's status after it, whether it was quarantined, and when it ended.
    status: RunStatus,
    quarantined: bool,
    ended_at: Option<i64>,
    /// The run's state after it, serialized, when a snapshot was due.
    snapshot: Option<String>,
    /// The caller waiting for the commit, if it waits.
    waiter: Option<Waiter>,
    /// The caller needs the commit flushed.
    pub(super) synced: bool,
}

/// A caller waiting for its accepted append to be committed, and the answer it gets then.
struct Waiter {
    reply: oneshot::Sender<Result<Appended, WorldError>>,
    appended: Appended,
}

impl Accepted {
    fn next_seq(&self) -> i64 {
        self.base_seq + self.events.len() as i64
    }

    /// Answers the waiting caller, if any, with `error`, without counting the append as
    /// settled (for a writer that is gone).
    pub(super) fn refuse(self, error: WorldError) {
        if let Some(waiter) = self.waiter {
            let _ = waiter.reply.send(Err(error));
        }
    }
}

/// What became of an attempt to accept an append at call time.
pub(crate) enum Acceptance {
    /// Accepted and queued; the receiver answers once committed (if a reply was asked for).
    Queued(
        Appended,
        Option<oneshot::Receiver<Result<Appended, WorldError>>>,
    ),
    /// Not for this path (run not held or not cached, an append that changes hooks, one the
    /// cached state refuses): the writer checks it. The events are handed back.
    Declined(Vec<Event>),
    /// The run is poisoned: an earlier accepted write did not land.
    Refused(WorldError),
}

impl PostgresStore {
    /// Accepts an append at call time if this store holds the run and has its current state
    /// (see the module documentation); a `level` other than `Queued` asks for an answer
    /// once it is committed (and flushed, for `Synced`).
    pub(crate) fn accept(&self, run_id: &str, mut events: Vec<Event>, level: Level) -> Acceptance {
        if let Some(error) = self.inner.accepted.lock().poison(run_id) {
            return Acceptance::Refused(error);
        }
        if events.is_empty() || events.iter().any(|e| hook_position(&e.kind).is_some()) {
            return Acceptance::Declined(events);
        }
        let Some(held) = self.inner.held.lock().get(run_id).copied() else {
            return Acceptance::Declined(events);
        };
        let mut cache = self.inner.cache.lock();
        let Some(cached) = cache.get_mut(run_id) else {
            return Acceptance::Declined(events);
        };
        if cached.next_seq < held.seen_seq
            || unsigned(cached.next_seq) + events.len() as u64 > u64::from(u32::MAX)
        {
            return Acceptance::Declined(events);
        }
        let Some(state) = cached.state.as_mut() else {
            return Acceptance::Declined(events);
        };
        let base_status = state.status;
        let base_seq = cached.next_seq;
        // Checked on a copy when there are several, so a refusal leaves the state as it was;
        // a single event is checked first and applied in place (a copy of a long run's state
        // would cost more than the append).
        let single = events.len() == 1;
        if single {
            if state.check(&events[0].kind).is_err() {
                return Acceptance::Declined(events);
            }
        } else {
            let mut trial = WorkflowState::clone(state);
            for (i, event) in events.iter_mut().enumerate() {
                if trial.check(&event.kind).is_err() {
                    return Acceptance::Declined(events);
                }
                event.seq = unsigned(base_seq) + i as u64;
                trial.apply(event);
            }
            *state = Arc::new(trial);
        }
        let state = Arc::make_mut(state);
        let mut correlation = Vec::with_capacity(events.len());
        let mut stored = Vec::with_capacity(events.len());
        for (i, mut event) in events.into_iter().enumerate() {
            event.seq = unsigned(base_seq) + i as u64;
            event.run_id = run_id.to_owned();
            if single {
                state.apply(&event);
            }
            correlation.push(state.correlation_id(&event.kind).map(str::to_owned));
            stored.push(Arc::new(event));
        }
        let next_seq = base_seq + stored.len() as i64;
        // A snapshot that cannot be serialized is skipped: readers apply the events since the
        // last one.
        let snapshot = snapshot_due(base_status, state, next_seq, cached.state_seq)
            .then(|| to_json("run state", &*state).ok())
            .flatten();
        let status = state.status;
        let quarantined = state.quarantine.is_some();
        let ended_at = state.completed_at;
        if snapshot.is_some() {
            cached.state_seq = next_seq;
        }
        let ended = if status.is_terminal() {
            cached.state.clone()
        } else {
            None
        };
        cached.next_seq = next_seq;
        cached.tail.extend(stored.iter().cloned());
        while cached.tail.len() > TAIL_LIMIT {
            cached.tail.pop_front();
        }
        let appended = Appended {
            events: stored.clone(),
            status,
            ended,
        };
        let (waiter, answer) = if level != Level::Queued {
            let (reply, answer) = oneshot::channel();
            let waiter = Waiter {
                reply,
                appended: appended.clone(),
            };
            (Some(waiter), Some(answer))
        } else {
            (None, None)
        };
        let write = Accepted {
            run_id: run_id.to_owned(),
            base_seq,
            epoch: held.epoch,
            events: stored,
            correlation,
            status,
            quarantined,
            ended_at,
            snapshot,
            waiter,
            synced: level == Level::Synced,
        };
        // Queued under the cache lock, so the writer receives accepted appends in the order
        // their `seq` numbers were given.
        self.inner.accepted.lock().queued(run_id);
        if self.inner.writer.send(Pending::Accepted(write)).is_err() {
            cache.remove(run_id);
            self.inner.accepted.lock().settled(run_id, 1);
            return Acceptance::Refused(super::closed());
        }
        Acceptance::Queued(appended, answer)
    }
}

/// What this store tracks of the appends it accepted at call time, per run.
#[derive(Default)]
pub(crate) struct AcceptedRuns {
    /// Accepted appends the writer has not dealt with yet.
    in_flight: FxHashMap<String, u32>,
    /// Runs an accepted append of which did not land, with the error later appends get.
    poisoned: FxHashMap<String, WorldError>,
}

impl AcceptedRuns {
    fn queued(&mut self, run_id: &str) {
        *self.in_flight.entry(run_id.to_owned()).or_default() += 1;
    }

    /// The writer dealt with `n` accepted appends of the run (written or failed).
    fn settled(&mut self, run_id: &str, n: u32) {
        if let Some(count) = self.in_flight.get_mut(run_id) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                self.in_flight.remove(run_id);
            }
        }
    }

    /// True if accepted appends of the run wait for the writer: the database is behind what
    /// this store cached of it.
    pub(crate) fn in_flight(&self, run_id: &str) -> bool {
        self.in_flight.contains_key(run_id)
    }

    /// The error later appends to the run get, if it is poisoned.
    pub(crate) fn poison(&self, run_id: &str) -> Option<WorldError> {
        self.poisoned.get(run_id).map(again)
    }

    fn set_poison(&mut self, run_id: &str, error: WorldError) {
        self.poisoned.entry(run_id.to_owned()).or_insert(error);
    }

    /// The run's whole history was read back from the database: later appends are checked
    /// against what it holds, unless accepted appends from before are still to be dealt with
    /// (they would land after the read).
    pub(crate) fn read_back(&mut self, run_id: &str) {
        if !self.in_flight.contains_key(run_id) {
            self.poisoned.remove(run_id);
        }
    }
}

impl PostgresStore {
    /// Writes the batch's accepted appends (in the order they were accepted) with one
    /// statement, and answers their waiting callers. A run's appends that did not land poison
    /// it. Returns true if the connection failed.
    pub(super) async fn write_accepted(
        &self,
        conn: &mut PgConnection,
        items: Vec<Accepted>,
        flush: bool,
    ) -> bool {
        let me = self.inner.member_id.clone();
        // Per run, in order; a poisoned run's appends fail at once.
        let mut runs: BTreeMap<String, Vec<Accepted>> = BTreeMap::new();
        for item in items {
            let poison = self.inner.accepted.lock().poison(&item.run_id);
            match poison {
                Some(error) => self.settle(item, Some(error)),
                None => runs.entry(item.run_id.clone()).or_default().push(item),
            }
        }
        for (run_id, group) in &mut runs {
            let contiguous = group.windows(2).all(|w| w[0].next_seq() == w[1].base_seq);
            if !contiguous {
                let error = WorldError::Unavailable(format!(
                    "appends accepted for run {run_id} do not follow one another (its cached state was replaced meanwhile); it is read back from the database"
                ));
                self.poison(run_id, again(&error));
                for item in std::mem::take(group) {
                    self.settle(item, Some(again(&error)));
                }
            }
        }
        runs.retain(|_, group| !group.is_empty());
        if runs.is_empty() {
            return false;
        }
        let written = match Rows::of_accepted(&runs) {
            Ok(rows) => self.write_held(conn, &me, &rows, flush).await,
            Err(e) => Err(e),
        };
        let broken = matches!(written, Err(WorldError::Unavailable(_)));
        let written: FxHashMap<String, bool> = match written {
            Ok(written) => written.into_iter().collect(),
            Err(e) => {
                // Nothing written, or (the connection failed) unknown: every run is read back.
                let error = match e {
                    WorldError::Unavailable(_) => e,
                    other => WorldError::Unavailable(format!(
                        "writing appends accepted for {} runs failed ({other}); they are read back from the database",
                        runs.len()
                    )),
                };
                for (run_id, group) in runs {
                    self.poison(&run_id, again(&error));
                    for item in group {
                        self.settle(item, Some(again(&error)));
                    }
                }
                return broken;
            }
        };
        let mut missed = Vec::new();
        for (run_id, group) in runs {
            match written.get(&run_id) {
                Some(&closed_streams) => self.landed(&run_id, group, closed_streams),
                None => missed.push((run_id, group)),
            }
        }
        if !missed.is_empty() {
            self.refuse_missed(conn, &me, missed).await;
        }
        false
    }

    /// Bookkeeping for a run whose accepted appends committed: how far this store has seen
    /// it, its lease and cache once finished, its streams' readers; then the waiting callers.
    fn landed(&self, run_id: &str, group: Vec<Accepted>, closed_streams: bool) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            return;
        };
        let (base, next, finished) = (first.base_seq, last.next_seq(), last.status.is_terminal());
        {
            let mut held = self.inner.held.lock();
            if finished {
                held.remove(run_id);
            } else if let Some(h) = held.get_mut(run_id) {
                if h.seen_seq == base {
                    h.seen_seq = next;
                }
            }
        }
        if finished {
            self.inner.ended.lock().note(run_id);
        }
        if closed_streams {
            self.stream_changed(run_id);
        }
        for item in group {
            self.settle(item, None);
        }
        if finished && !self.inner.accepted.lock().in_flight(run_id) {
            self.inner.cache.lock().remove(run_id);
        }
    }

    /// Runs whose row had moved: taken over (`LeaseLost`: the lease is forgotten) or written
    /// by another process (`Unavailable`: the run is poisoned until it is read back).
    async fn refuse_missed(
        &self,
        conn: &mut PgConnection,
        me: &str,
        missed: Vec<(String, Vec<Accepted>)>,
    ) {
        let ids: Vec<&str> = missed.iter().map(|(r, _)| r.as_str()).collect();
        let rows = sqlx::query("SELECT run_id, owner, epoch FROM runs WHERE run_id = ANY($1)")
            .bind(&ids)
            .fetch_all(&mut *conn)
            .await
            .unwrap_or_default();
        let leases: FxHashMap<String, (Option<String>, i64)> = rows
            .iter()
            .map(|row| (row.get(0), (row.get(1), row.get(2))))
            .collect();
        for (run_id, group) in missed {
            let epoch = group.first().map_or(0, |a| a.epoch);
            let lost = match leases.get(&run_id) {
                Some((owner, e)) => owner.as_deref() != Some(me) || *e != epoch,
                None => false,
            };
            let error = if lost {
                // Forgotten here: later appends are this store's as a non-holder's, refused
                // unless they come from outside the run.
                self.inner.held.lock().remove(&run_id);
                self.inner.cache.lock().remove(&run_id);
                WorldError::LeaseLost {
                    run_id: run_id.clone(),
                }
            } else {
                let error = WorldError::Unavailable(format!(
                    "run {run_id} was written by another process while this one had appends for it in flight; it is read back from the database"
                ));
                self.poison(&run_id, again(&error));
                error
            };
            for item in group {
                self.settle(item, Some(again(&error)));
            }
        }
    }

    /// An accepted append that could not be written: its run is poisoned.
    pub(super) fn refuse_accepted(&self, item: Accepted, error: WorldError) {
        self.poison(&item.run_id, again(&error));
        self.settle(item, Some(error));
    }

    /// Poisons a run: later appends get `error` until its history is read back whole.
    pub(crate) fn poison(&self, run_id: &str, error: WorldError) {
        tracing::debug!(run_id, error = %error, "an accepted append did not land");
        self.inner.cache.lock().remove(run_id);
        self.inner.accepted.lock().set_poison(run_id, error);
    }

    /// One accepted append dealt with, written or (`failed`) not: counted, and its caller
    /// answered if it waits.
    fn settle(&self, item: Accepted, failed: Option<WorldError>) {
        self.inner.accepted.lock().settled(&item.run_id, 1);
        if let Some(waiter) = item.waiter {
            let _ = waiter.reply.send(match failed {
                Some(error) => Err(error),
                None => Ok(waiter.appended),
            });
        }
    }
}

impl<'a> Rows<'a> {
    /// The rows of accepted appends, one run row per run (its first append's base, its last
    /// append's status, its latest snapshot).
    pub(super) fn of_accepted(
        runs: &'a BTreeMap<String, Vec<Accepted>>,
    ) -> Result<Self, WorldError> {
        let mut rows = Rows::default();
        for (run_id, group) in runs {
            let (Some(first), Some(last)) = (group.first(), group.last()) else {
                continue;
            };
            for item in group {
                rows.push_events(run_id, &item.events, &item.correlation)?;
            }
            let snapshot = group
                .iter()
                .rev()
                .find_map(|a| a.snapshot.as_ref().map(|j| (j.clone(), a.next_seq())));
            rows.push_run(RunRow {
                run_id,
                next_seq: last.next_seq(),
                status: last.status,
                quarantined: last.quarantined,
                ended_at: last.ended_at,
                snapshot,
                base_seq: first.base_seq,
                epoch: first.epoch,
            });
        }
        Ok(rows)
    }
}

/// The same error again, for each of the appends and callers it answers (`WorldError` is not
/// `Clone`: it can hold a source).
pub(crate) fn again(error: &WorldError) -> WorldError {
    match error {
        WorldError::Unavailable(message) => WorldError::Unavailable(message.clone()),
        WorldError::LeaseLost { run_id } => WorldError::LeaseLost {
            run_id: run_id.clone(),
        },
        other => WorldError::Unavailable(other.to_string()),
    }
}
