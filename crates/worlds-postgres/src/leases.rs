//! [`LeaseStore`]: the member heartbeat, claiming runs no live member holds (bumping their
//! fencing epoch), and finding writes by other members to runs this store holds.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use rustc_hash::FxHashMap;
use sqlx::Row;
use worlds_engine::store::LeaseStore;
use worlds_engine::WorldError;

use crate::{Held, Inner, PostgresStore};

/// Most runs one claim takes.
const CLAIM_BATCH: i64 = 500;

/// Runs open to a claim by `$1` (this member), whose owners' heartbeats are older than `$2`
/// seconds by the database clock.
const CLAIMABLE: &str = "NOT r.finished AND (r.owner IS NULL OR (r.owner <> $1 AND NOT EXISTS (
    SELECT 1 FROM members m WHERE m.member_id = r.owner
    AND m.heartbeat_at > now() - make_interval(secs => $2))))";

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
        if self.inner.heartbeat.is_cancelled() {
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO members (member_id) VALUES ($1)
             ON CONFLICT (member_id) DO UPDATE SET heartbeat_at = now()",
        )
        .bind(&self.inner.member_id)
        .execute(&self.inner.pool)
        .await
        .map_err(|e| self.err("renewing the member heartbeat", e))?;
        self.forget_dead_members().await
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
        if !self.inner.joined {
            // A visitor has no heartbeat: a run it took would look abandoned at once.
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
