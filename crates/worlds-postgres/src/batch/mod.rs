//! Group commit: one writer task per store takes every pending append (from any number of
//! concurrent callers and runs) and commits them together, answering each caller only after
//! the commit. The writer keeps one connection while appends keep coming.
//!
//! A batch goes two ways, each costing the same round trips whatever its size:
//!
//! - **Fast** ([`fast`]): the appends to runs this store holds and whose state it cached at its
//!   own last write — nearly all appends, since a run's steps are recorded by its holder. They
//!   are checked here against the cached state and written by one statement that commits by
//!   itself (one round trip): it updates each run's row only where `next_seq` and the lease
//!   epoch are still as cached, and inserts the events and steps of exactly those runs. A run
//!   whose row moved (another process delivered to it, or took it over) writes nothing there
//!   and goes the locked way, as do appends that change hooks and any the cached state refuses.
//! - **Locked** ([`locked`]): `BEGIN`; one `SELECT … FOR UPDATE` locking the runs (in run id
//!   order, so two writers never deadlock); one read of the histories of runs whose state is
//!   not cached at the locked `next_seq`; one look-up of hook tokens if an append creates a
//!   hook; one statement inserting every event and step and updating every run ([`rows`]); one
//!   upsert of the hooks if any changed; two statements if a run finished; `COMMIT`.
//!
//! Each append is checked on its own (lease epoch, the run's state rules, hook tokens) against
//! the state left by the appends before it, so a refused append is answered with its error and
//! the others commit. If the database fails a locked batch as a whole, each append is retried
//! as a batch of its own, so one bad append fails alone — unless the connection failed: then
//! the batch may have committed without its answer arriving, every caller gets the
//! `Unavailable` error, which tells the engine to read the run back, and the store forgets
//! what it cached of those runs.

use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};
use tokio::sync::{mpsc, oneshot};
use worlds_engine::store::Appended;
use worlds_engine::{Event, EventKind, RunStatus, WorkflowState, WorldError};

use crate::notify::Change;
use crate::{Inner, PostgresStore};

pub(crate) mod accept;
mod create;
mod fast;
mod locked;
mod rows;

/// How long the writer keeps its connection with no append to write.
const KEEP_CONNECTION_IDLE: Duration = Duration::from_millis(100);

/// Most appends one transaction commits.
const MAX_BATCH: usize = 512;

/// A run's stored state is written again once it is this many events behind (and on every
/// status change): serializing a long run's whole state on every append made each step cost
/// more as the run grew. Readers apply the events since ([`PostgresStore::fresh_state`]).
const SNAPSHOT_EVERY: i64 = 64;

/// …or, for a long run, once it is behind by this fraction of the run's events: the state is
/// as large as the history, so a fixed interval still made a step's share of the snapshot
/// grow with the run. A reader applies at most that many events, fewer than the snapshot it
/// reads holds.
const SNAPSHOT_FRACTION: i64 = 16;

/// What an append's caller is told it waits for (the levels of `EventStore`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// Nothing: the caller goes on at once where the append is accepted at call time.
    Queued,
    /// The commit, which the server need not have flushed to disk yet.
    Written,
    /// The commit, flushed as the server's `synchronous_commit` says.
    Synced,
}

/// What the writer is asked to do.
pub(crate) enum Pending {
    /// A run to create ([`create`]).
    Create(create::Create),
    /// An append to check and write.
    Check(Check),
    /// An append accepted at call time, to write as it is ([`accept`]).
    Accepted(accept::Accepted),
    /// Answered once everything queued before it was dealt with: `Err` if that poisoned the
    /// run named (see [`accept`]).
    Flush {
        run_id: Option<String>,
        reply: oneshot::Sender<Result<(), WorldError>>,
    },
}

impl Pending {
    /// Answers whoever waits on this item with `error`, without writing anything.
    fn refuse(self, error: WorldError) {
        match self {
            Pending::Create(create) => create.refuse(error),
            Pending::Check(check) => {
                let _ = check.reply.send(Err(error));
            }
            Pending::Accepted(accepted) => accepted.refuse(error),
            Pending::Flush { reply, .. } => {
                let _ = reply.send(Err(error));
            }
        }
    }
}

/// An append waiting for the writer to check it.
pub(crate) struct Check {
    run_id: String,
    events: Vec<Event>,
    /// The caller needs the commit flushed.
    synced: bool,
    reply: oneshot::Sender<Result<Appended, WorldError>>,
}

/// The sending side kept by the store; the writer ends when every sender is gone.
pub(crate) type Writer = mpsc::UnboundedSender<Pending>;

/// Starts the writer task of a store.
pub(crate) fn spawn_writer(inner: Weak<Inner>, mut rx: mpsc::UnboundedReceiver<Pending>) {
    tokio::spawn(async move {
        // The writer keeps its connection while appends keep coming: taking one from the pool
        // and giving it back costs a round trip each time (the pool checks it on return). Once
        // idle it gives it back, so the pool can close.
        let mut conn: Option<PoolConnection<Postgres>> = None;
        let mut batch = Vec::with_capacity(MAX_BATCH);
        loop {
            let received = if conn.is_some() {
                tokio::select! {
                    n = rx.recv_many(&mut batch, MAX_BATCH) => n,
                    () = tokio::time::sleep(KEEP_CONNECTION_IDLE) => {
                        // Flushed before the connection goes: its failure later would not
                        // be seen here.
                        if let Some(inner) = inner.upgrade() {
                            PostgresStore { inner }.flush_unflushed(&mut conn).await;
                        }
                        conn = None;
                        continue;
                    }
                }
            } else {
                rx.recv_many(&mut batch, MAX_BATCH).await
            };
            if received == 0 {
                return;
            }
            let items = std::mem::take(&mut batch);
            let Some(inner) = inner.upgrade() else {
                for item in items {
                    item.refuse(closed());
                }
                return;
            };
            if inner.pool.is_closed() {
                conn = None;
            }
            PostgresStore { inner }.commit_batch(&mut conn, items).await;
        }
    });
}

pub(crate) fn closed() -> WorldError {
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
    events: Vec<Arc<Event>>,
    correlation: Vec<Option<String>>,
    /// Positions of hooks the accepted events changed.
    hooks: Vec<u32>,
}

impl Working {
    /// A run as locked or cached: `next_seq` events, the stored snapshot as of `state_seq`,
    /// leased to `owner` at `epoch`; nothing accepted yet.
    fn new(
        (next_seq, state_seq): (i64, i64),
        owner: Option<String>,
        epoch: i64,
        state: Arc<WorkflowState>,
    ) -> Self {
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
        }
    }

    /// True if the append writes the run's state snapshot: on a status change, when the
    /// stored one is [`SNAPSHOT_EVERY`] events (or a [`SNAPSHOT_FRACTION`] of the run's)
    /// behind, and when the run finished.
    fn writes_snapshot(&self) -> bool {
        snapshot_due(self.base_status, &self.state, self.next_seq, self.state_seq)
    }

    /// `(next_seq, state_seq)` of the run's row once the append is written.
    fn stored_seqs(&self) -> (i64, i64) {
        let state_seq = if self.writes_snapshot() {
            self.next_seq
        } else {
            self.state_seq
        };
        (self.next_seq, state_seq)
    }
}

/// True if a run whose status was `base_status` and whose stored snapshot is as of
/// `state_seq` gets its state written again once it is `state` at `next_seq`: on a status
/// change (a finished run's included), and when the stored one is [`SNAPSHOT_EVERY`] events
/// (or a [`SNAPSHOT_FRACTION`] of the run's) behind.
fn snapshot_due(
    base_status: RunStatus,
    state: &WorkflowState,
    next_seq: i64,
    state_seq: i64,
) -> bool {
    state.status.is_terminal()
        || state.status != base_status
        || next_seq - state_seq >= SNAPSHOT_EVERY.max(next_seq / SNAPSHOT_FRACTION)
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
    /// Appends events: accepted at once where this store holds the run's current state
    /// ([`accept`]), otherwise checked by the writer. `level` says what the caller waits
    /// for: nothing ([`EventStore::append_nowait`]; the writer still writes it before any
    /// later append to the run), the commit, or the commit flushed.
    ///
    /// [`EventStore::append_nowait`]: worlds_engine::store::EventStore::append_nowait
    pub(crate) async fn append_events(
        &self,
        run_id: &str,
        events: Vec<Event>,
        level: Level,
    ) -> Result<Appended, WorldError> {
        let events = match self.accept(run_id, events, level) {
            accept::Acceptance::Queued(appended, None) => return Ok(appended),
            accept::Acceptance::Queued(_, Some(answer)) => {
                return answer.await.map_err(|_| closed())?;
            }
            accept::Acceptance::Refused(error) => return Err(error),
            accept::Acceptance::Declined(events) => events,
        };
        let (reply, answer) = oneshot::channel();
        self.inner
            .writer
            .send(Pending::Check(Check {
                run_id: run_id.to_owned(),
                events,
                synced: level == Level::Synced,
                reply,
            }))
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    /// Waits until everything appended so far (to `run_id`, or to any run) was written; `Err`
    /// if an accepted append to the run did not land.
    pub(crate) async fn flush_writes(&self, run_id: Option<&str>) -> Result<(), WorldError> {
        let (reply, answer) = oneshot::channel();
        self.inner
            .writer
            .send(Pending::Flush {
                run_id: run_id.map(str::to_owned),
                reply,
            })
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    /// Commits a batch and answers its callers: first the appends accepted at call time
    /// ([`write_accepted`](Self::write_accepted)), then of the rest those the fast path
    /// settles (see [`try_fast`](Self::try_fast)), the others in one locked transaction; on a
    /// failure of that whole transaction, each append alone. Flushes are answered last.
    async fn commit_batch(&self, held: &mut Option<PoolConnection<Postgres>>, items: Vec<Pending>) {
        let mut creates = Vec::new();
        let mut accepted = Vec::new();
        let mut checks = Vec::new();
        let mut flushes = Vec::new();
        for item in items {
            match item {
                Pending::Create(c) => creates.push(c),
                Pending::Accepted(a) => accepted.push(a),
                Pending::Check(c) => checks.push(c),
                Pending::Flush { run_id, reply } => flushes.push((run_id, reply)),
            }
        }
        // The batch's commits are flushed if anyone in it waits for that; a flush waits for
        // everything before it.
        let flush = !flushes.is_empty()
            || accepted.iter().any(|a| a.synced)
            || checks.iter().any(|c| c.synced);
        if !creates.is_empty() {
            // First: nothing in the batch can be an append to a run it creates (a run is
            // appended to once its creation was answered).
            self.write_creations(held, creates).await;
        }
        if !accepted.is_empty() || !checks.is_empty() {
            self.write_batch(held, accepted, checks, flush).await;
        }
        if !flushes.is_empty() {
            self.flush_unflushed(held).await;
        }
        for (run_id, reply) in flushes {
            let poison = run_id.and_then(|r| self.inner.accepted.lock().poison(&r));
            let _ = reply.send(poison.map_or(Ok(()), Err));
        }
    }

    /// Writes a batch's appends on the writer's connection (taking one if it has none):
    /// the accepted ones, then the ones to check.
    async fn write_batch(
        &self,
        held: &mut Option<PoolConnection<Postgres>>,
        accepted: Vec<accept::Accepted>,
        checks: Vec<Check>,
        flush: bool,
    ) {
        let conn = match self
            .writer_connection(held, "connecting for an append")
            .await
        {
            Ok(conn) => conn,
            Err(error) => {
                self.fail_unwritten(accepted, checks, &error);
                return;
            }
        };
        let mut broken = !accepted.is_empty() && self.write_accepted(conn, accepted, flush).await;
        if broken {
            self.fail_unwritten(Vec::new(), checks, &self.connection_failed());
        } else if !checks.is_empty() {
            broken = self.commit_on(conn, checks, flush).await;
        }
        if broken {
            // Closed by the pool when it comes back (its check fails); the next batch takes
            // a fresh connection.
            *held = None;
            self.lose_unflushed();
        }
    }

    /// Makes sure every commit of the writer so far is flushed: if some were not (see
    /// [`Inner::unflushed`](crate::Inner::unflushed)), commits a transaction that has an id,
    /// which the server flushes with all the WAL before it.
    pub(super) async fn flush_unflushed(&self, held: &mut Option<PoolConnection<Postgres>>) {
        if self.inner.unflushed.lock().is_empty() {
            return;
        }
        let Some(conn) = held.as_mut() else {
            // The connection went away since (and with it the chance to know).
            self.lose_unflushed();
            return;
        };
        match sqlx::query("SELECT txid_current()")
            .execute(&mut **conn)
            .await
        {
            Ok(_) => self.inner.unflushed.lock().clear(),
            Err(e) => {
                tracing::debug!(error = %e, "flushing the writer's commits failed");
                *held = None;
                self.lose_unflushed();
            }
        }
    }

    /// The writer's connection failed while some of its commits may not have been flushed:
    /// if the server restarted, they are gone, so their runs are read back before anything
    /// more is appended to them.
    fn lose_unflushed(&self) {
        let runs = std::mem::take(&mut *self.inner.unflushed.lock());
        for run_id in runs {
            self.poison(
                &run_id,
                WorldError::Unavailable(format!(
                    "the connection to PostgreSQL on {} failed before the last appends to run {run_id} were flushed; it is read back from the database",
                    self.inner.server
                )),
            );
        }
    }

    /// The writer's connection, taking one from the pool if it has none; a failure to get one
    /// is `Unavailable` (the callers' writes did not happen).
    async fn writer_connection<'c>(
        &self,
        held: &'c mut Option<PoolConnection<Postgres>>,
        what: &str,
    ) -> Result<&'c mut PoolConnection<Postgres>, WorldError> {
        if held.is_none() {
            let conn = self
                .inner
                .pool
                .acquire()
                .await
                .map_err(|e| match self.err(what, e) {
                    e @ WorldError::Unavailable(_) => e,
                    other => WorldError::Unavailable(other.to_string()),
                })?;
            *held = Some(conn);
        }
        held.as_mut()
            .ok_or_else(|| WorldError::Unavailable(format!("{what}: no connection")))
    }

    /// Inserts the batch's new runs on the writer's connection (taking one if it has none). If
    /// that connection fails (a server restart ends every session, and the writer's may have
    /// been idle since), the runs are tried once more on a fresh one.
    async fn write_creations(
        &self,
        held: &mut Option<PoolConnection<Postgres>>,
        creates: Vec<create::Create>,
    ) {
        let mut runs = self.prepare_runs(creates);
        for again in [false, true] {
            let conn = match self
                .writer_connection(held, "connecting to create runs")
                .await
            {
                Ok(conn) => conn,
                Err(error) => {
                    for run in runs {
                        run.refuse(accept::again(&error));
                    }
                    return;
                }
            };
            match self.insert_runs(conn, runs, again).await {
                Ok(()) => return,
                Err(unknown) => {
                    *held = None;
                    self.lose_unflushed();
                    runs = unknown;
                }
            }
        }
        let error = WorldError::Unavailable(format!(
            "the connection to PostgreSQL on {} failed twice while creating runs; whether they were created is unknown: look them up",
            self.inner.server
        ));
        for run in runs {
            run.refuse(accept::again(&error));
        }
    }

    /// Answers appends of a batch that could not be written (no connection): accepted ones
    /// poison their runs.
    fn fail_unwritten(
        &self,
        accepted: Vec<accept::Accepted>,
        checks: Vec<Check>,
        error: &WorldError,
    ) {
        for item in accepted {
            self.refuse_accepted(item, accept::again(error));
        }
        for check in checks {
            self.answer(check, Err(accept::again(error)));
        }
    }

    /// Commits a batch of appends to check on `conn`; true if the connection failed.
    async fn commit_on(&self, conn: &mut PgConnection, checks: Vec<Check>, flush: bool) -> bool {
        // A poisoned run refuses every append until it is read back.
        let mut items = Vec::with_capacity(checks.len());
        for check in checks {
            let poison = self.inner.accepted.lock().poison(&check.run_id);
            match poison {
                Some(error) => self.answer(check, Err(error)),
                None => items.push(check),
            }
        }
        if items.is_empty() {
            return false;
        }
        let work: Vec<(String, Vec<Event>)> = items
            .iter_mut()
            .map(|p| (p.run_id.clone(), std::mem::take(&mut p.events)))
            .collect();
        let mut broken = false;
        let mut rest: Vec<Check> = Vec::with_capacity(items.len());
        let mut rest_work = Vec::with_capacity(items.len());
        let fast = self.try_fast(conn, &work, flush).await;
        for ((item, result), one) in items.into_iter().zip(fast).zip(work) {
            broken |= matches!(result, Some(Err(WorldError::Unavailable(_))));
            match result {
                Some(result) => self.answer(item, result),
                None => {
                    rest.push(item);
                    rest_work.push(one);
                }
            }
        }
        if rest.is_empty() || broken {
            for item in rest {
                self.answer(item, Err(self.connection_failed()));
            }
            return broken;
        }
        let (items, work) = (rest, rest_work);
        let single = work.len() == 1;
        match self.try_batch(conn, &work).await {
            Ok(results) => {
                for (item, result) in items.into_iter().zip(results) {
                    self.answer(item, result);
                }
            }
            Err(e) if single => {
                broken = matches!(e, WorldError::Unavailable(_));
                if let Some(item) = items.into_iter().next() {
                    self.answer(item, Err(e));
                }
            }
            // The connection failed: the batch may or may not have committed (a COMMIT whose
            // answer was lost), so retrying could find its own writes and mistake them for
            // another's. Every caller hears the passing error and reads the run back.
            Err(WorldError::Unavailable(message)) => {
                broken = true;
                for item in items {
                    self.answer(item, Err(WorldError::Unavailable(message.clone())));
                }
            }
            Err(e) => {
                tracing::debug!(
                    "a batch of {} appends failed ({e}); retrying each",
                    work.len()
                );
                for (item, one) in items.into_iter().zip(work) {
                    let result = if broken {
                        Err(self.connection_failed())
                    } else {
                        match self.try_batch(conn, std::slice::from_ref(&one)).await {
                            Ok(mut results) => results.pop().unwrap_or_else(|| Err(closed())),
                            Err(e) => Err(e),
                        }
                    };
                    broken |= matches!(result, Err(WorldError::Unavailable(_)));
                    self.answer(item, result);
                }
            }
        }
        broken
    }

    /// What a committed write to a run leaves this store knowing: the lease it holds (gone
    /// with a finished run), how far it has seen the run (not past another process's write in
    /// between: `external_changes` reports that one), the run's cached state and tail; and,
    /// when another process holds the run or nobody does, a wake-up for them (a cancellation,
    /// a child's result, a hook's payload to read back, or a run to claim). A run this write
    /// ended is noted with its timers and streams gone, and readers of the streams it closed
    /// (`closed_streams`) are woken.
    fn committed(&self, me: &str, run_id: &str, w: Working, closed_streams: bool) {
        if w.state.status.is_terminal() && !w.base_status.is_terminal() {
            self.inner.ended.lock().note(run_id);
        }
        if closed_streams {
            self.stream_changed(run_id);
        }
        {
            let mut held = self.inner.held.lock();
            if w.state.status.is_terminal() {
                held.remove(run_id);
            } else if let Some(h) = held.get_mut(run_id) {
                if h.seen_seq == w.base_seq {
                    h.seen_seq = w.next_seq;
                }
            }
        }
        // Reopened by hand: its row has no owner now.
        let reopened = w.base_status.is_terminal() && !w.state.status.is_terminal();
        match w.owner.as_deref() {
            _ if reopened => self.announce(Change::Claimable, run_id),
            Some(owner) if owner == me => {}
            Some(_) => self.announce(Change::Written, run_id),
            None => self.announce(Change::Claimable, run_id),
        }
        self.cache_put(run_id, w.stored_seqs(), w.state, &w.events);
    }

    /// The answer to appends left when the writer's connection failed during their batch.
    fn connection_failed(&self) -> WorldError {
        WorldError::Unavailable(format!(
            "the connection to PostgreSQL on {} failed during an append",
            self.inner.server
        ))
    }

    /// Answers an append's caller. After a connection failure the append may or may not have
    /// landed, so what this store remembers of the run is forgotten: the next read and the
    /// next append go to the database.
    fn answer(&self, item: Check, result: Result<Appended, WorldError>) {
        if let Err(WorldError::Unavailable(_)) = &result {
            self.inner.cache.lock().remove(&item.run_id);
        }
        let _ = item.reply.send(result);
    }
}
