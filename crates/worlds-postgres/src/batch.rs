//! Group commit: one writer task per store takes every pending append (from any number of
//! concurrent callers and runs) and commits them together in one transaction, answering each
//! caller only after `COMMIT`.
//!
//! A batch costs the same round trips whatever its size: `BEGIN`; one `SELECT … FOR UPDATE`
//! locking the batch's runs (in run id order, so two writers never deadlock); one read of the
//! histories of runs whose state is not cached at the locked `next_seq`; one look-up of hook
//! tokens if an append creates a hook; one statement inserting every event and step and
//! updating every run; one upsert of the hooks if any changed; two statements if a run
//! finished; `COMMIT`. Each append is checked on its own (lease epoch, the run's state rules,
//! hook tokens) against the state left by the appends before it, so a refused append is
//! answered with its error and the others commit. If the database fails the batch as a whole,
//! each append is retried as a batch of its own, so one bad append fails alone — unless the
//! connection failed: then the batch may have committed without its answer arriving, and every
//! caller gets the `Unavailable` error, which tells the engine to read the run back.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use rustc_hash::FxHashMap;
use sqlx::{PgConnection, Row};
use tokio::sync::{mpsc, oneshot};
use worlds_engine::store::Appended;
use worlds_engine::{Event, EventKind, HookStatus, RunStatus, WorkflowState, WorldError};

use crate::db::{big, from_json, to_json, unsigned};
use crate::notify::Change;
use crate::{Inner, PostgresStore};

/// Most appends one transaction commits.
const MAX_BATCH: usize = 512;

/// A run's stored state is written again once it is this many events behind (and on every
/// status change): serializing a long run's whole state on every append made each step cost
/// more as the run grew. Readers apply the events since ([`PostgresStore::fresh_state`]).
const SNAPSHOT_EVERY: i64 = 64;

/// An append waiting for the writer.
pub(crate) struct Pending {
    run_id: String,
    events: Vec<Event>,
    reply: oneshot::Sender<Result<Appended, WorldError>>,
}

/// The sending side kept by the store; the writer ends when every sender is gone.
pub(crate) type Writer = mpsc::UnboundedSender<Pending>;

/// Starts the writer task of a store.
pub(crate) fn spawn_writer(inner: Weak<Inner>, mut rx: mpsc::UnboundedReceiver<Pending>) {
    tokio::spawn(async move {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
            let items = std::mem::take(&mut batch);
            let Some(inner) = inner.upgrade() else {
                for item in items {
                    let _ = item.reply.send(Err(closed()));
                }
                return;
            };
            PostgresStore { inner }.commit_batch(items).await;
        }
    });
}

fn closed() -> WorldError {
    WorldError::Unavailable("the PostgreSQL store was closed; connect it again".into())
}

/// A run of the batch as its row was locked, and as the batch's accepted appends leave it.
struct Working {
    /// `next_seq` when locked.
    base_seq: i64,
    owner: Option<String>,
    epoch: i64,
    /// `next_seq` after the accepted appends.
    next_seq: i64,
    /// `next_seq` when the stored state was written.
    state_seq: i64,
    /// The run's status when locked.
    base_status: RunStatus,
    state: Arc<WorkflowState>,
    /// The accepted events, in order.
    events: Vec<Event>,
    correlation: Vec<Option<String>>,
    /// Positions of hooks the accepted events changed.
    hooks: Vec<u32>,
}

/// The hook positions an event changes in the `hooks` table.
fn hook_position(kind: &EventKind) -> Option<u32> {
    match kind {
        EventKind::HookCreated { position, .. }
        | EventKind::HookConflict { position, .. }
        | EventKind::HookReceived { position, .. }
        | EventKind::HookExpired { position, .. }
        | EventKind::HookDisposed { position, .. } => Some(*position),
        _ => None,
    }
}

impl PostgresStore {
    /// Hands an append to the writer and waits until it is committed (or refused).
    pub(crate) async fn append_events(
        &self,
        run_id: &str,
        events: Vec<Event>,
    ) -> Result<Appended, WorldError> {
        let (reply, answer) = oneshot::channel();
        self.inner
            .writer
            .send(Pending {
                run_id: run_id.to_owned(),
                events,
                reply,
            })
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    /// Commits a batch and answers its callers; on a failure of the whole transaction,
    /// retries each append alone.
    async fn commit_batch(&self, mut items: Vec<Pending>) {
        let work: Vec<(String, Vec<Event>)> = items
            .iter_mut()
            .map(|p| (p.run_id.clone(), std::mem::take(&mut p.events)))
            .collect();
        let single = work.len() == 1;
        match self.try_batch(&work).await {
            Ok(results) => {
                for (item, result) in items.into_iter().zip(results) {
                    let _ = item.reply.send(result);
                }
            }
            Err(e) if single => {
                if let Some(item) = items.pop() {
                    let _ = item.reply.send(Err(e));
                }
            }
            // The connection failed: the batch may or may not have committed (a COMMIT whose
            // answer was lost), so retrying could find its own writes and mistake them for
            // another's. Every caller hears the passing error and reads the run back.
            Err(WorldError::Unavailable(message)) => {
                for item in items {
                    let _ = item
                        .reply
                        .send(Err(WorldError::Unavailable(message.clone())));
                }
            }
            Err(e) => {
                tracing::debug!(
                    "a batch of {} appends failed ({e}); retrying each",
                    work.len()
                );
                for (item, one) in items.into_iter().zip(work) {
                    let result = match self.try_batch(std::slice::from_ref(&one)).await {
                        Ok(mut results) => results.pop().unwrap_or_else(|| Err(closed())),
                        Err(e) => Err(e),
                    };
                    let _ = item.reply.send(result);
                }
            }
        }
    }

    /// One transaction for the batch: `Ok` holds each append's own result; `Err` means the
    /// transaction failed: nothing was written, except that after a connection failure
    /// (`Unavailable`) the commit may have landed.
    async fn try_batch(
        &self,
        work: &[(String, Vec<Event>)],
    ) -> Result<Vec<Result<Appended, WorldError>>, WorldError> {
        let me = self.inner.member_id.clone();
        let mut tx = self
            .inner
            .pool
            .begin()
            .await
            .map_err(|e| self.err("starting an append", e))?;
        let mut run_ids: Vec<&str> = work.iter().map(|(r, _)| r.as_str()).collect();
        run_ids.sort_unstable();
        run_ids.dedup();
        let rows = sqlx::query(
            "SELECT run_id, next_seq, owner, epoch, state_seq FROM runs WHERE run_id = ANY($1)
             ORDER BY run_id FOR UPDATE",
        )
        .bind(&run_ids)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| self.err("locking runs for an append", e))?;
        let mut locked = Vec::with_capacity(rows.len());
        let mut misses = Vec::new();
        for row in rows {
            let run_id: String = row.get(0);
            let next_seq: i64 = row.get(1);
            let state = self.cache_get(&run_id, next_seq);
            if state.is_none() {
                misses.push(run_id.clone());
            }
            locked.push((run_id, next_seq, row.get(2), row.get(3), row.get(4), state));
        }
        let mut replayed: FxHashMap<String, WorkflowState> = if misses.is_empty() {
            FxHashMap::default()
        } else {
            self.replay(&mut tx, &misses).await?.into_iter().collect()
        };
        let mut runs: BTreeMap<String, Working> = BTreeMap::new();
        for (run_id, next_seq, owner, epoch, state_seq, state) in locked {
            let state =
                match state {
                    Some(state) => state,
                    None => Arc::new(replayed.remove(&run_id).ok_or_else(|| {
                        WorldError::Internal(format!("run {run_id} has no events"))
                    })?),
                };
            runs.insert(
                run_id,
                Working {
                    base_seq: next_seq,
                    owner,
                    epoch,
                    next_seq,
                    state_seq,
                    base_status: state.status,
                    state,
                    events: Vec::new(),
                    correlation: Vec::new(),
                    hooks: Vec::new(),
                },
            );
        }
        let live_tokens = self.live_tokens(&mut tx, work).await?;

        let mut results = Vec::with_capacity(work.len());
        for (run_id, events) in work {
            results.push(self.check_one(&me, &mut runs, &live_tokens, run_id, events.clone()));
        }
        if runs.values().any(|w| !w.events.is_empty()) {
            self.write_runs(&mut tx, &me, &runs).await?;
            tx.commit()
                .await
                .map_err(|e| self.err("committing an append", e))?;
        } else {
            drop(tx);
        }

        let mut held = self.inner.held.lock();
        for (run_id, w) in &runs {
            if w.events.is_empty() {
                continue;
            }
            let finished = w.state.status.is_terminal();
            if finished {
                held.remove(run_id);
            } else if let Some(h) = held.get_mut(run_id) {
                // Another process's write in between stays unseen: external_changes reports it.
                if h.seen_seq == w.base_seq {
                    h.seen_seq = w.next_seq;
                }
            }
        }
        drop(held);
        for (run_id, w) in runs {
            if !w.events.is_empty() {
                // Its holder, if another process, reads the write back (a cancellation, a
                // child's result, a hook's payload).
                match w.owner.as_deref() {
                    Some(owner) if owner == me => {}
                    Some(_) => self.announce(Change::Written, &run_id),
                    None => self.announce(Change::Claimable, &run_id),
                }
                self.cache_put(&run_id, w.next_seq, w.state);
            }
        }
        Ok(results)
    }

    /// Checks one append against its run's working state and, if accepted, applies it there.
    fn check_one(
        &self,
        me: &str,
        runs: &mut BTreeMap<String, Working>,
        live_tokens: &FxHashMap<String, (String, u32)>,
        run_id: &str,
        mut events: Vec<Event>,
    ) -> Result<Appended, WorldError> {
        let Some(w) = runs.get(run_id) else {
            return Err(WorldError::NotFound {
                what: "run",
                id: run_id.to_owned(),
            });
        };
        let held = self.inner.held.lock().get(run_id).copied();
        match held {
            Some(held) if w.owner.as_deref() != Some(me) || w.epoch != held.epoch => {
                self.inner.held.lock().remove(run_id);
                self.inner.cache.lock().remove(run_id);
                return Err(WorldError::LeaseLost {
                    run_id: run_id.to_owned(),
                });
            }
            Some(_) => {}
            // Only the holder drives a run; others may only deliver what comes from outside
            // it. Anything else from a process that does not hold the unfinished run is a late
            // write of one that lost it (its lease expired and it was forgotten here). A
            // finished run refuses it below, by its status.
            None if !w.state.status.is_terminal()
                && !events.iter().all(|e| e.kind.comes_from_outside()) =>
            {
                return Err(WorldError::LeaseLost {
                    run_id: run_id.to_owned(),
                });
            }
            None => {}
        }
        if events.is_empty() {
            return Ok(Appended {
                events: Vec::new(),
                status: w.state.status,
            });
        }
        if unsigned(w.next_seq) + events.len() as u64 > u64::from(u32::MAX) {
            return Err(WorldError::InvalidInput {
                field: "events".into(),
                message: format!(
                    "run {run_id} has {} events, the most one history can hold; continue the work in a new run",
                    w.next_seq
                ),
            });
        }
        let mut state = WorkflowState::clone(&w.state);
        let mut correlation = Vec::with_capacity(events.len());
        for (i, event) in events.iter_mut().enumerate() {
            state.check(&event.kind)?;
            event.seq = unsigned(w.next_seq) + i as u64;
            event.run_id = run_id.to_owned();
            state.apply(event);
            correlation.push(state.correlation_id(&event.kind).map(str::to_owned));
        }
        for event in &events {
            if let EventKind::HookCreated {
                position,
                token_digest,
                ..
            } = &event.kind
            {
                token_free(runs, live_tokens, run_id, *position, token_digest)?;
            }
        }
        let Some(w) = runs.get_mut(run_id) else {
            return Err(WorldError::Internal("a locked run went missing".into()));
        };
        w.next_seq += events.len() as i64;
        for event in &events {
            if let Some(position) = hook_position(&event.kind) {
                if !w.hooks.contains(&position) {
                    w.hooks.push(position);
                }
            }
        }
        w.state = Arc::new(state);
        w.correlation.extend(correlation);
        w.events.extend(events.iter().cloned());
        Ok(Appended {
            status: w.state.status,
            events: events.into_iter().map(Arc::new).collect(),
        })
    }

    /// The states of runs rebuilt from their whole histories.
    async fn replay(
        &self,
        conn: &mut PgConnection,
        run_ids: &[String],
    ) -> Result<Vec<(String, WorkflowState)>, WorldError> {
        let rows = sqlx::query(
            "SELECT run_id, body FROM events WHERE run_id = ANY($1) ORDER BY run_id, seq",
        )
        .bind(run_ids)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| self.err("reading histories", e))?;
        let mut histories: BTreeMap<String, Vec<Event>> = BTreeMap::new();
        for row in rows {
            let body: String = row.get(1);
            histories
                .entry(row.get(0))
                .or_default()
                .push(from_json("event", &body)?);
        }
        histories
            .into_iter()
            .map(|(run_id, history)| Ok((run_id, WorkflowState::from_history(&history)?)))
            .collect()
    }

    /// The live hooks holding the tokens the batch's `hook_created` events ask for: digest →
    /// (run, position).
    async fn live_tokens(
        &self,
        conn: &mut PgConnection,
        work: &[(String, Vec<Event>)],
    ) -> Result<FxHashMap<String, (String, u32)>, WorldError> {
        let digests: Vec<&str> = work
            .iter()
            .flat_map(|(_, events)| events)
            .filter_map(|e| match &e.kind {
                EventKind::HookCreated { token_digest, .. } => Some(token_digest.as_str()),
                _ => None,
            })
            .collect();
        let mut live = FxHashMap::default();
        if digests.is_empty() {
            return Ok(live);
        }
        let rows = sqlx::query(
            "SELECT token_digest, run_id, position FROM hooks WHERE live AND token_digest = ANY($1)",
        )
        .bind(&digests)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| self.err("checking hook tokens", e))?;
        for row in rows {
            let position: i32 = row.get(2);
            live.insert(
                row.get(0),
                (row.get(1), u32::try_from(position).unwrap_or(0)),
            );
        }
        Ok(live)
    }

    /// Writes the accepted events of the batch: events, steps and runs in one statement, then
    /// hooks, then what a finished run frees.
    async fn write_runs(
        &self,
        conn: &mut PgConnection,
        me: &str,
        runs: &BTreeMap<String, Working>,
    ) -> Result<(), WorldError> {
        let mut ev_run = Vec::new();
        let mut ev_seq = Vec::new();
        let mut ev_corr = Vec::new();
        let mut ev_body = Vec::new();
        let mut st_id = Vec::new();
        let mut st_run = Vec::new();
        let mut st_pos = Vec::new();
        let mut r_id = Vec::new();
        let mut r_next = Vec::new();
        let mut r_status = Vec::new();
        let mut r_finished = Vec::new();
        let mut r_quarantined = Vec::new();
        let mut r_state = Vec::new();
        let mut h_id = Vec::new();
        let mut h_run = Vec::new();
        let mut h_pos = Vec::new();
        let mut h_digest = Vec::new();
        let mut h_live = Vec::new();
        let mut finished_runs = Vec::new();
        for (run_id, w) in runs.iter().filter(|(_, w)| !w.events.is_empty()) {
            for (event, corr) in w.events.iter().zip(&w.correlation) {
                ev_run.push(run_id.as_str());
                ev_seq.push(big(event.seq));
                ev_corr.push(corr.as_deref());
                ev_body.push(to_json("event", event)?);
                if let EventKind::ActivityScheduled {
                    activity_id,
                    position,
                    ..
                } = &event.kind
                {
                    st_id.push(activity_id.as_str());
                    st_run.push(run_id.as_str());
                    st_pos.push(i64::from(*position));
                }
            }
            let finished = w.state.status.is_terminal();
            r_id.push(run_id.as_str());
            r_next.push(w.next_seq);
            r_status.push(w.state.status.as_str());
            r_finished.push(finished);
            r_quarantined.push(w.state.quarantine.is_some());
            let snapshot = finished
                || w.state.status != w.base_status
                || w.next_seq - w.state_seq >= SNAPSHOT_EVERY;
            r_state.push(if snapshot {
                Some(to_json("run state", &*w.state)?)
            } else {
                None
            });
            for &position in &w.hooks {
                if let Some(hook) = w.state.hook(position) {
                    h_id.push(hook.id.as_str());
                    h_run.push(run_id.as_str());
                    h_pos.push(i64::from(position));
                    h_digest.push(hook.token_digest.as_str());
                    h_live.push(hook.status == HookStatus::Waiting && !finished);
                }
            }
            if finished {
                finished_runs.push(run_id.as_str());
            }
        }
        sqlx::query(
            "WITH ins AS (
                 INSERT INTO events (run_id, seq, correlation_id, body)
                 SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[])
             ), st AS (
                 INSERT INTO steps (step_id, run_id, position)
                 SELECT * FROM UNNEST($5::text[], $6::text[], $7::bigint[])
                 ON CONFLICT (step_id) DO NOTHING
             )
             UPDATE runs SET next_seq = u.n, status = u.s, finished = u.f, quarantined = u.q,
                 state = COALESCE(u.j, runs.state),
                 state_seq = CASE WHEN u.j IS NULL THEN runs.state_seq ELSE u.n END,
                 last_writer = $14
             FROM UNNEST($8::text[], $9::bigint[], $10::text[], $11::bool[], $12::bool[], $13::text[])
                 AS u(r, n, s, f, q, j)
             WHERE runs.run_id = u.r",
        )
        .bind(&ev_run)
        .bind(&ev_seq)
        .bind(&ev_corr)
        .bind(&ev_body)
        .bind(&st_id)
        .bind(&st_run)
        .bind(&st_pos)
        .bind(&r_id)
        .bind(&r_next)
        .bind(&r_status)
        .bind(&r_finished)
        .bind(&r_quarantined)
        .bind(&r_state)
        .bind(me)
        .execute(&mut *conn)
        .await
        .map_err(|e| self.err("appending events", e))?;
        if !h_id.is_empty() {
            sqlx::query(
                "INSERT INTO hooks (hook_id, run_id, position, token_digest, live)
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bool[])
                 ON CONFLICT (hook_id) DO UPDATE SET live = EXCLUDED.live
                 WHERE hooks.run_id = EXCLUDED.run_id",
            )
            .bind(&h_id)
            .bind(&h_run)
            .bind(&h_pos)
            .bind(&h_digest)
            .bind(&h_live)
            .execute(&mut *conn)
            .await
            .map_err(|e| match crate::db::unique_violation(&e) {
                Some(_) => WorldError::Conflict {
                    message: "hook token is held by another waiting hook".into(),
                },
                None => self.err("recording hooks", e),
            })?;
        }
        if !finished_runs.is_empty() {
            sqlx::query("UPDATE hooks SET live = false, run_over = true WHERE run_id = ANY($1)")
                .bind(&finished_runs)
                .execute(&mut *conn)
                .await
                .map_err(|e| self.err("freeing finished runs' hook tokens", e))?;
            sqlx::query("DELETE FROM timers WHERE run_id = ANY($1)")
                .bind(&finished_runs)
                .execute(&mut *conn)
                .await
                .map_err(|e| self.err("removing finished runs' timers", e))?;
        }
        Ok(())
    }
}

/// Refuses a `hook_created` whose token a waiting hook of another run or position holds: one
/// live in the database (unless this batch already let it go), or one created earlier in the
/// batch.
fn token_free(
    runs: &BTreeMap<String, Working>,
    live_tokens: &FxHashMap<String, (String, u32)>,
    run_id: &str,
    position: u32,
    digest: &str,
) -> Result<(), WorldError> {
    let waiting_in = |w: &Working, p: u32| {
        !w.state.status.is_terminal()
            && w.state
                .hook(p)
                .is_some_and(|h| h.status == HookStatus::Waiting && h.token_digest == digest)
    };
    for (other_run, w) in runs {
        for &p in &w.hooks {
            if (other_run != run_id || p != position) && waiting_in(w, p) {
                return Err(conflict(other_run, p));
            }
        }
    }
    if let Some((holder_run, holder_position)) = live_tokens.get(digest) {
        let same = holder_run == run_id && *holder_position == position;
        // A holder this batch wrote to has its current state here.
        let still = runs
            .get(holder_run)
            .is_none_or(|w| waiting_in(w, *holder_position));
        if !same && still {
            return Err(conflict(holder_run, *holder_position));
        }
    }
    Ok(())
}

fn conflict(run_id: &str, position: u32) -> WorldError {
    WorldError::Conflict {
        message: format!(
            "hook token is held by the waiting hook #{position} of run {run_id}; a waiting hook's token must be unique"
        ),
    }
}
