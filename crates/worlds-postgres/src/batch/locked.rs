//! The locked path of the writer: one transaction that locks the batch's runs, checks every
//! append against their states as locked (replaying histories the cache does not hold, looking
//! up hook tokens) and writes what it accepted.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use sqlx::{PgConnection, Row};
use worlds_engine::store::Appended;
use worlds_engine::{Event, EventKind, HookStatus, WorkflowState, WorldError};

use super::{hook_position, Working};
use crate::db::{from_json, unsigned};
use crate::PostgresStore;

impl PostgresStore {
    /// One transaction for the batch: `Ok` holds each append's own result; `Err` means the
    /// transaction failed: nothing was written, except that after a connection failure
    /// (`Unavailable`) the commit may have landed.
    pub(super) async fn try_batch(
        &self,
        conn: &mut PgConnection,
        work: &[(String, Vec<Event>)],
    ) -> Result<Vec<Result<Appended, WorldError>>, WorldError> {
        let me = self.inner.member_id.clone();
        let mut tx = sqlx::Connection::begin(conn)
            .await
            .map_err(|e| self.err("starting an append", e))?;
        // Every way out of the transaction ends it here: a transaction merely dropped would
        // keep its row locks until the writer's connection is next used.
        let checked = match self.lock_and_check(&mut tx, &me, work).await {
            Ok(checked) => checked,
            Err(e) => {
                let _ = tx.rollback().await;
                return Err(e);
            }
        };
        let (runs, results) = checked;
        let mut closed_streams = Vec::new();
        if runs.values().any(|w| !w.events.is_empty()) {
            match self.write_runs(&mut tx, &me, &runs).await {
                Ok(closed) => closed_streams = closed,
                Err(e) => {
                    let _ = tx.rollback().await;
                    return Err(e);
                }
            }
            tx.commit()
                .await
                .map_err(|e| self.err("committing an append", e))?;
            // Committed at the session's level: flushed, with everything before it.
            self.inner.unflushed.lock().clear();
        } else {
            tx.rollback()
                .await
                .map_err(|e| self.err("ending an append that wrote nothing", e))?;
        }

        for (run_id, w) in runs {
            if !w.events.is_empty() {
                let closed = closed_streams.binary_search(&run_id).is_ok();
                self.committed(&me, &run_id, w, closed);
            }
        }
        Ok(results)
    }

    /// Locks the batch's runs (in run id order) and checks each append against its run's state
    /// as locked: the runs as the accepted appends leave them, and each append's answer.
    #[allow(clippy::type_complexity)]
    async fn lock_and_check(
        &self,
        conn: &mut PgConnection,
        me: &str,
        work: &[(String, Vec<Event>)],
    ) -> Result<(BTreeMap<String, Working>, Vec<Result<Appended, WorldError>>), WorldError> {
        let mut run_ids: Vec<&str> = work.iter().map(|(r, _)| r.as_str()).collect();
        run_ids.sort_unstable();
        run_ids.dedup();
        let rows = sqlx::query(
            "SELECT run_id, next_seq, owner, epoch, state_seq FROM runs WHERE run_id = ANY($1)
             ORDER BY run_id FOR UPDATE",
        )
        .bind(&run_ids)
        .fetch_all(&mut *conn)
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
            self.replay(&mut *conn, &misses)
                .await?
                .into_iter()
                .collect()
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
                Working::new((next_seq, state_seq), owner, epoch, state),
            );
        }
        let live_tokens = self.live_tokens(&mut *conn, work).await?;

        let mut results = Vec::with_capacity(work.len());
        for (run_id, events) in work {
            results.push(self.check_one(me, &mut runs, &live_tokens, run_id, events.clone()));
        }
        Ok((runs, results))
    }

    /// Checks one append against its run's working state and, if accepted, applies it there.
    pub(super) fn check_one(
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
            // A run driven from outside has no holder: any process may write it.
            None if !w.state.status.is_terminal()
                && !w.state.external
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
                ended: ended(&w.state),
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
        if events.len() == 1 && hook_position(&events[0].kind).is_none() {
            // The common append: one event, no hook. Checked, then applied to the state in
            // place (a copy of the state would cost more as the run's history grows; the
            // fast path holds the only reference, so none is made).
            w.state.check(&events[0].kind)?;
            let Some(w) = runs.get_mut(run_id) else {
                return Err(WorldError::Internal("a locked run went missing".into()));
            };
            let mut event = events
                .pop()
                .ok_or_else(|| WorldError::Internal("an append lost its event".into()))?;
            event.seq = unsigned(w.next_seq);
            event.run_id = run_id.to_owned();
            let state = Arc::make_mut(&mut w.state);
            state.apply(&event);
            w.correlation
                .push(state.correlation_id(&event.kind).map(str::to_owned));
            w.next_seq += 1;
            let event = Arc::new(event);
            w.events.push(event.clone());
            return Ok(Appended {
                status: w.state.status,
                events: vec![event],
                ended: ended(&w.state),
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
        let events: Vec<Arc<Event>> = events.into_iter().map(Arc::new).collect();
        w.events.extend(events.iter().cloned());
        Ok(Appended {
            status: w.state.status,
            events,
            ended: ended(&w.state),
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

/// The state to hand back with an append that leaves the run finished.
fn ended(state: &Arc<WorkflowState>) -> Option<Arc<WorkflowState>> {
    state.status.is_terminal().then(|| state.clone())
}
