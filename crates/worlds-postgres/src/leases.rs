//! [`LeaseStore`]: the member heartbeat, claiming runs no live member holds (bumping their
//! fencing epoch), and finding writes by other members to runs this store holds.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use rustc_hash::{FxHashMap, FxHashSet};
use sqlx::Row;
use tokio::time::Instant;
use worlds_engine::store::LeaseStore;
use worlds_engine::WorldError;

use crate::{Held, Inner, PostgresStore};

/// Most runs one claim takes.
const CLAIM_BATCH: i64 = 500;

/// Runs open to a claim by `$1` (this member), whose owners' heartbeats are older than their
/// own lease (`$2` seconds for a member that did not record its lease) by the database clock.
const CLAIMABLE: &str = "NOT r.finished AND (r.owner IS NULL OR (r.owner <> $1 AND NOT EXISTS (
    SELECT 1 FROM members m WHERE m.member_id = r.owner
    AND m.heartbeat_at > now() - coalesce(m.lease_ms * interval '1 millisecond',
                                          make_interval(secs => $2)))))";

/// What this member can tell about its own lease from its own (monotonic) clock: until when
/// its last renewal keeps it live, and whether its heartbeat ever lapsed, in which case other
/// members may have taken runs it still counts as its own.
#[derive(Debug, Default)]
pub(crate) struct LeaseClock {
    /// When the last renewal that succeeded was sent.
    last_sent: Option<Instant>,
    /// Until when that renewal keeps this member live, less a margin.
    valid_until: Option<Instant>,
    /// How many times the gap between two renewals exceeded the lease.
    pub(crate) lapses: u64,
    /// Runs held before the last lapse and not confirmed since (by a read of their rows or a
    /// [`confirm_lease`](LeaseStore::confirm_lease)): another member may hold them now.
    pub(crate) suspect: FxHashSet<String>,
}

/// The part of the lease this member does not count on: the renewal's round trip and clock
/// rates differing between this host and the database's.
fn margin(lease: Duration) -> Duration {
    lease / 5
}

/// Releases the leases of `member`'s unfinished runs and removes its member row, then tells
/// the other processes there are runs to claim. The epoch is left as it is: the claimer bumps
/// it.
pub(crate) async fn release(
    pool: &sqlx::PgPool,
    member: &str,
    channel: &str,
) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    let released: Vec<String> = sqlx::query_scalar(
        "UPDATE runs SET owner = NULL WHERE owner = $1 AND NOT finished RETURNING run_id",
    )
    .bind(member)
    .fetch_all(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM members WHERE member_id = $1")
        .bind(member)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    if let Some(run_id) = released.first() {
        // After the commit, outside it: one hint is enough, the claimers scan.
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(channel)
            .bind(crate::notify::payload(
                member,
                crate::notify::Change::Claimable,
                run_id,
            ))
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// Renews this member's heartbeat every `interval` until the store is dropped or
/// [`PostgresStore::stop_heartbeat`] is called.
pub(crate) fn spawn_heartbeat(inner: &Arc<Inner>, interval: Duration) {
    let weak: Weak<Inner> = Arc::downgrade(inner);
    let stop = inner.heartbeat.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            let Some(inner) = weak.upgrade() else { return };
            let store = PostgresStore { inner };
            // Bounded: a stalled call must not stop later renewals.
            match tokio::time::timeout(interval.max(Duration::from_secs(1)), store.heartbeat_once())
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(member = %store.member_id(), "heartbeat failed: {e}"),
                Err(_) => tracing::warn!(member = %store.member_id(), "heartbeat timed out"),
            }
        }
    });
}

impl PostgresStore {
    /// Writes this member's heartbeat (the database's `now()`).
    pub(crate) async fn heartbeat_once(&self) -> Result<(), WorldError> {
        if self.inner.heartbeat.is_cancelled() || self.is_away() {
            return Ok(());
        }
        let sent = Instant::now();
        sqlx::query(
            "INSERT INTO members (member_id, lease_ms) VALUES ($1, $2)
             ON CONFLICT (member_id) DO UPDATE SET heartbeat_at = now(), lease_ms = $2",
        )
        .bind(&self.inner.member_id)
        .bind(self.lease_ms())
        .execute(&self.inner.pool)
        .await
        .map_err(|e| self.err("renewing the member heartbeat", e))?;
        self.renewed(sent);
        self.forget_dead_members().await
    }

    /// Logs the members that look stopped but whose leases still hold runs: their runs wait
    /// until those leases end (what a process restarted after `kill -9` waits for).
    pub(crate) async fn log_lease_waits(&self) -> Result<(), WorldError> {
        let rows = sqlx::query(
            "SELECT m.member_id,
                    extract(epoch FROM now() - m.heartbeat_at)::float8 AS silent,
                    coalesce(m.lease_ms / 1000.0, $2)::float8 AS lease,
                    count(*) AS runs
             FROM members m JOIN runs r ON r.owner = m.member_id AND NOT r.finished
             WHERE m.member_id <> $1
               AND m.heartbeat_at <= now() - coalesce(m.lease_ms * interval '1 millisecond',
                                                      make_interval(secs => $2)) / 2
               AND m.heartbeat_at > now() - coalesce(m.lease_ms * interval '1 millisecond',
                                                     make_interval(secs => $2))
             GROUP BY m.member_id, m.heartbeat_at, m.lease_ms",
        )
        .bind(&self.inner.member_id)
        .bind(self.lease_secs())
        .fetch_all(&self.inner.pool)
        .await
        .map_err(|e| self.err("looking for members whose leases still hold runs", e))?;
        for row in rows {
            let member: String = row.get(0);
            let silent: f64 = row.get(1);
            let lease: f64 = row.get(2);
            let runs: i64 = row.get(3);
            tracing::info!(
                member = %member,
                runs,
                "member {member} has not renewed its heartbeat for {silent:.1} s and holds {runs} unfinished run(s): if it stopped without shutting down its world (kill -9, a crash), they are taken over when its lease of {lease:.1} s ends, in {:.1} s (DatabaseConfig::lease_duration sets the lease; a world that shuts down hands its runs over at once)",
                (lease - silent).max(0.0)
            );
        }
        Ok(())
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.inner.lease_duration.as_millis()).unwrap_or(i64::MAX)
    }

    fn is_away(&self) -> bool {
        self.inner.away.load(std::sync::atomic::Ordering::Acquire)
    }

    /// A renewal sent at `sent` succeeded. If it came more than a lease after the one before
    /// it, other members may have found this one dead meanwhile and taken its runs: every run
    /// it holds is suspect until confirmed.
    fn renewed(&self, sent: Instant) {
        let lease = self.inner.lease_duration;
        let keep = lease.saturating_sub(margin(lease));
        let mut clock = self.inner.lease_clock.lock();
        if clock.last_sent.is_some_and(|last| sent > last + keep) {
            let gap = sent - clock.last_sent.unwrap_or(sent);
            clock.lapses += 1;
            clock.suspect = self.inner.held.lock().keys().cloned().collect();
            tracing::warn!(
                member = %self.inner.member_id,
                gap_ms = gap.as_millis() as u64,
                lease_ms = lease.as_millis() as u64,
                runs = clock.suspect.len(),
                "this member's heartbeat lapsed for longer than its lease (was the process paused, or cut off from the database?): other members may have taken its runs, so each is checked against the database before a step of it starts"
            );
        }
        if clock.last_sent.is_none_or(|last| sent > last) {
            clock.last_sent = Some(sent);
            clock.valid_until = Some(sent + keep);
        }
    }

    /// Marks runs as confirmed held by a read of their rows whose query was sent when the
    /// lease clock had seen `lapses` lapses (no confirmation if it has seen more since).
    fn confirmed(&self, lapses: u64, runs: &[String]) {
        let mut clock = self.inner.lease_clock.lock();
        if clock.lapses != lapses || clock.suspect.is_empty() {
            return;
        }
        for run in runs {
            clock.suspect.remove(run);
        }
    }

    /// Deletes the rows of members whose heartbeat stopped longer ago than
    /// [`PostgresOptions::forget_dead_members_after`](crate::PostgresOptions). Their runs were
    /// claimable since their leases expired; a member that comes back writes its row again
    /// and finds its runs taken over.
    pub(crate) async fn forget_dead_members(&self) -> Result<(), WorldError> {
        let after = self
            .inner
            .forget_dead_members_after
            .max(self.inner.lease_duration);
        sqlx::query("DELETE FROM members WHERE heartbeat_at < now() - make_interval(secs => $1)")
            .bind(after.as_secs_f64())
            .execute(&self.inner.pool)
            .await
            .map_err(|e| self.err("forgetting dead members", e))?;
        Ok(())
    }

    fn lease_secs(&self) -> f64 {
        self.inner.lease_duration.as_secs_f64()
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    fn reports_takeovers(&self) -> bool {
        true
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        Some(self.inner.changes.clone())
    }

    async fn claim_runs(
        &self,
        can_run: &worlds_engine::store::CanRun<'_>,
    ) -> Result<Vec<String>, WorldError> {
        if !self.inner.joined || self.is_away() {
            // A visitor (or a member whose world is shut down) has no heartbeat: a run it took
            // would look abandoned at once.
            return Ok(Vec::new());
        }
        let me = &self.inner.member_id;
        let kinds: Vec<(Vec<u8>, Option<Vec<u8>>)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT DISTINCT r.name, r.code_version FROM runs r WHERE {CLAIMABLE}"
        )))
        .bind(me)
        .bind(self.lease_secs())
        .fetch_all(&self.inner.pool)
        .await
        .map_err(|e| self.err("finding runs to claim", e))?;
        let (names, versions): (Vec<Vec<u8>>, Vec<Option<Vec<u8>>>) = kinds
            .into_iter()
            .filter(|(name, version)| {
                let version = match version {
                    Some(v) => match std::str::from_utf8(v) {
                        Ok(v) => Some(v),
                        Err(_) => return false,
                    },
                    None => None,
                };
                std::str::from_utf8(name).is_ok_and(|name| can_run(name, version))
            })
            .unzip();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        // The locking select is a CTE: the planner cannot run it once per updated row.
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "WITH c AS (
                 SELECT r.run_id FROM runs r WHERE {CLAIMABLE} AND EXISTS (
                     SELECT 1 FROM UNNEST($3::bytea[], $5::bytea[]) AS k(name, version)
                     WHERE k.name = r.name AND k.version IS NOT DISTINCT FROM r.code_version)
                 ORDER BY r.run_id LIMIT $4 FOR UPDATE OF r SKIP LOCKED
             )
             UPDATE runs SET owner = $1, epoch = runs.epoch + 1
             FROM c WHERE runs.run_id = c.run_id
             RETURNING runs.run_id, runs.epoch, runs.next_seq"
        )))
        .bind(me)
        .bind(self.lease_secs())
        .bind(&names)
        .bind(CLAIM_BATCH)
        .bind(&versions)
        .fetch_all(&self.inner.pool)
        .await
        .map_err(|e| self.err("claiming runs", e))?;
        self.fault_after_claim(rows.len())?;
        let mut claimed = Vec::with_capacity(rows.len());
        let mut held = self.inner.held.lock();
        for row in rows {
            let run_id: String = row.get(0);
            held.insert(
                run_id.clone(),
                Held {
                    epoch: row.get(1),
                    seen_seq: row.get(2),
                },
            );
            claimed.push(run_id);
        }
        claimed.sort();
        Ok(claimed)
    }

    async fn owned_runs(&self) -> Result<Vec<String>, WorldError> {
        if !self.inner.joined || self.is_away() {
            return Ok(Vec::new());
        }
        let me = &self.inner.member_id;
        let owned: Vec<String> =
            sqlx::query_scalar("SELECT run_id FROM runs WHERE owner = $1 AND NOT finished")
                .bind(me)
                .fetch_all(&self.inner.pool)
                .await
                .map_err(|e| self.err("reading the runs leased to this member", e))?;
        let unknown: Vec<&String> = {
            let held = self.inner.held.lock();
            owned
                .iter()
                .filter(|run| !held.contains_key(*run))
                .collect()
        };
        if unknown.is_empty() {
            return Ok(owned);
        }
        // Leased to this member without its knowing: a claim whose answer was lost. Taken up
        // again under a new epoch, so that nothing written under the lost one can land.
        let rows = sqlx::query(
            "UPDATE runs SET epoch = epoch + 1
             WHERE run_id = ANY($2) AND owner = $1 AND NOT finished
             RETURNING run_id, epoch, next_seq",
        )
        .bind(me)
        .bind(&unknown)
        .fetch_all(&self.inner.pool)
        .await
        .map_err(|e| self.err("taking up runs leased to this member", e))?;
        tracing::warn!(
            member = %me,
            runs = rows.len(),
            "runs were leased to this member without its knowing (a claim whose answer was lost); taking them up"
        );
        let mut held = self.inner.held.lock();
        for row in rows {
            held.insert(
                row.get(0),
                Held {
                    epoch: row.get(1),
                    seen_seq: row.get(2),
                },
            );
        }
        Ok(owned)
    }

    fn lease_confirmed(&self, run_id: &str) -> bool {
        if !self.inner.joined {
            return true;
        }
        // A fresh heartbeat vouches only for runs this member still holds: one it heard was
        // taken over (while paused, before its first heartbeat after waking saw the lapse) is
        // not among the suspects, since it is no longer held.
        if !self.inner.held.lock().contains_key(run_id) {
            return false;
        }
        let clock = self.inner.lease_clock.lock();
        clock
            .valid_until
            .is_some_and(|until| Instant::now() < until)
            && !clock.suspect.contains(run_id)
    }

    async fn confirm_lease(&self, run_id: &str) -> Result<(), WorldError> {
        let Some(epoch) = self.held_epoch(run_id) else {
            return Err(WorldError::LeaseLost {
                run_id: run_id.to_owned(),
            });
        };
        if self.is_away() {
            return Err(WorldError::Unavailable(format!(
                "member {} has left the world (it was shut down); start the world again",
                self.inner.member_id
            )));
        }
        let lapses = self.inner.lease_clock.lock().lapses;
        let sent = Instant::now();
        // Renewing the heartbeat and reading the run under its row lock in one statement: a
        // claim cannot take the run between the two, and once this commits the member is live
        // for a whole lease again.
        let held: Option<bool> = sqlx::query_scalar(
            "WITH hb AS (
                 INSERT INTO members (member_id, lease_ms) VALUES ($1, $4)
                 ON CONFLICT (member_id) DO UPDATE SET heartbeat_at = now(), lease_ms = $4
                 RETURNING 1
             )
             SELECT r.owner = $1 AND r.epoch = $3 AND NOT r.finished
             FROM runs r, hb WHERE r.run_id = $2 FOR UPDATE OF r",
        )
        .bind(&self.inner.member_id)
        .bind(run_id)
        .bind(epoch)
        .bind(self.lease_ms())
        .fetch_optional(&self.inner.pool)
        .await
        .map_err(|e| self.err("confirming this member's lease on a run", e))?;
        self.renewed(sent);
        if held == Some(true) {
            self.confirmed(lapses, &[run_id.to_owned()]);
            return Ok(());
        }
        // `external_changes` finds the new holder and reports the run taken over.
        Err(WorldError::LeaseLost {
            run_id: run_id.to_owned(),
        })
    }

    async fn leave(&self) -> Result<(), WorldError> {
        if !self.inner.joined
            || self.inner.closed.load(std::sync::atomic::Ordering::Acquire)
            || self
                .inner
                .away
                .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return Ok(());
        }
        // Accepted appends are written while the leases they were accepted under hold.
        if let Err(e) = self.flush_writes(None).await {
            tracing::warn!(error = %e, "appends were still being written when the world stopped");
        }
        let released = release(
            &self.inner.pool,
            &self.inner.member_id,
            &crate::notify::channel(&self.inner.schema),
        )
        .await
        .map_err(|e| self.err("releasing this member's leases", e));
        self.inner.held.lock().clear();
        self.inner.cache.lock().clear();
        released
    }

    async fn rejoin(&self) -> Result<(), WorldError> {
        if !self
            .inner
            .away
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            return Ok(());
        }
        self.heartbeat_once().await
    }

    async fn external_changes(&self) -> Result<Vec<String>, WorldError> {
        let (ids, seen_before): (Vec<String>, Vec<(i64, i64)>) = self
            .inner
            .held
            .lock()
            .iter()
            .map(|(id, h)| (id.clone(), (h.seen_seq, h.epoch)))
            .unzip();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let seen_before: FxHashMap<&str, (i64, i64)> =
            ids.iter().map(String::as_str).zip(seen_before).collect();
        let lapses = self.inner.lease_clock.lock().lapses;
        let rows = sqlx::query(
            "SELECT run_id, next_seq, owner, epoch, finished FROM runs WHERE run_id = ANY($1)",
        )
        .bind(&ids)
        .fetch_all(&self.inner.pool)
        .await
        .map_err(|e| self.err("looking for changes by other processes", e))?;
        let me = self.inner.member_id.as_str();
        let mut changed = Vec::new();
        let mut lost = Vec::new();
        let mut taken = Vec::new();
        let mut still_mine = Vec::new();
        let mut held = self.inner.held.lock();
        for row in rows {
            let run_id: String = row.get(0);
            let next_seq: i64 = row.get(1);
            let owner: Option<String> = row.get(2);
            let epoch: i64 = row.get(3);
            let finished: bool = row.get(4);
            let Some(h) = held.get_mut(&run_id) else {
                continue;
            };
            if seen_before.get(run_id.as_str()) != Some(&(h.seen_seq, h.epoch)) {
                // This store wrote to or claimed the run while the rows were read: they may
                // predate that. The next look compares again.
                continue;
            }
            if owner.as_deref() != Some(me) || epoch != h.epoch {
                // Taken over: forgotten here, and reported, so the engine lets go of the run
                // (its next append would fail with `LeaseLost`) instead of waiting on it.
                held.remove(&run_id);
                taken.push(run_id.clone());
                changed.push(run_id);
                continue;
            }
            still_mine.push(run_id.clone());
            if next_seq < h.seen_seq {
                // Behind what this store committed before the read: commits the server
                // answered were lost (it restarted before flushing them). The run is read
                // back from what the database holds.
                lost.push(run_id.clone());
            }
            if next_seq != h.seen_seq {
                h.seen_seq = next_seq;
                changed.push(run_id.clone());
            }
            if finished {
                held.remove(&run_id);
            }
        }
        drop(held);
        self.confirmed(lapses, &still_mine);
        let mut cache = self.inner.cache.lock();
        for run_id in &taken {
            cache.remove(run_id);
        }
        drop(cache);
        for run_id in lost {
            self.poison(
                &run_id,
                WorldError::Unavailable(format!(
                    "run {run_id} lost appends committed to PostgreSQL on {} (the server restarted before flushing them); it is read back from the database",
                    self.inner.server
                )),
            );
        }
        changed.sort();
        Ok(changed)
    }
}
