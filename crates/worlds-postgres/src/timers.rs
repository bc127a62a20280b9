//! [`TimerStore`]: durable timers in the `timers` table, taken with `FOR UPDATE SKIP LOCKED`
//! so two processes never fire one timer.
//!
//! A timer belongs to its run's holder: a member takes (and sees in `next_timer_at`) only the
//! timers of runs it holds, so it never fires a timer of a run another member drives. A run
//! nobody holds (its holder died) keeps its timers until a member claims it; the claimer
//! re-arms them from the run's state (adding a timer is idempotent) and fires them. A finished
//! run has no timers: the append that finishes it deletes them. Timers of a run id that has no
//! run record are anyone's (nothing drives such a run, so firing one cannot double-drive it).

use async_trait::async_trait;
use sqlx::Row;
use worlds_engine::clock::Millis;
use worlds_engine::store::{Timer, TimerKind, TimerStore};
use worlds_engine::WorldError;

use crate::PostgresStore;

/// A timer kind as `(tag, a, b)`: ordered as the kind's variants and fields are.
fn encode(kind: &TimerKind) -> (i16, i64, i64) {
    match kind {
        TimerKind::Sleep { position } => (0, i64::from(*position), 0),
        TimerKind::ActivityRetry { position, attempt } => {
            (1, i64::from(*position), i64::from(*attempt))
        }
        TimerKind::RunTimeout => (2, 0, 0),
        TimerKind::WorkflowRetry { attempt } => (3, i64::from(*attempt), 0),
        TimerKind::HookExpiry { position } => (4, i64::from(*position), 0),
    }
}

fn decode(tag: i16, a: i64, b: i64) -> Result<TimerKind, WorldError> {
    let a = u32::try_from(a);
    let b = u32::try_from(b);
    let bad = || WorldError::Internal(format!("a stored timer has an unknown kind ({tag})"));
    Ok(match (tag, a, b) {
        (0, Ok(position), _) => TimerKind::Sleep { position },
        (1, Ok(position), Ok(attempt)) => TimerKind::ActivityRetry { position, attempt },
        (2, _, _) => TimerKind::RunTimeout,
        (3, Ok(attempt), _) => TimerKind::WorkflowRetry { attempt },
        (4, Ok(position), _) => TimerKind::HookExpiry { position },
        _ => return Err(bad()),
    })
}

#[async_trait]
impl TimerStore for PostgresStore {
    async fn add_timer(&self, timer: Timer) -> Result<(), WorldError> {
        let (tag, a, b) = encode(&timer.kind);
        sqlx::query(
            "INSERT INTO timers (fire_at, run_id, kind_tag, a, b) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT DO NOTHING",
        )
        .bind(timer.fire_at)
        .bind(&timer.run_id)
        .bind(tag)
        .bind(a)
        .bind(b)
        .execute(&self.inner.pool)
        .await
        .map_err(|e| self.err("adding a timer", e))?;
        Ok(())
    }

    async fn take_due_timers(&self, now: Millis, limit: usize) -> Result<Vec<Timer>, WorldError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "WITH due AS (
                 SELECT t.fire_at, t.run_id, t.kind_tag, t.a, t.b FROM timers t
                 LEFT JOIN runs r ON r.run_id = t.run_id
                 WHERE t.fire_at <= $1 AND (r.run_id IS NULL OR (r.owner = $3 AND NOT r.finished))
                 ORDER BY t.fire_at, t.run_id, t.kind_tag, t.a, t.b LIMIT $2
                 FOR UPDATE OF t SKIP LOCKED
             )
             DELETE FROM timers t USING due
             WHERE (t.fire_at, t.run_id, t.kind_tag, t.a, t.b) = (due.fire_at, due.run_id, due.kind_tag, due.a, due.b)
             RETURNING t.fire_at, t.run_id, t.kind_tag, t.a, t.b",
        )
        .bind(now)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(&self.inner.member_id)
        .fetch_all(&self.inner.pool)
        .await
        .map_err(|e| self.err("taking due timers", e))?;
        let mut due = rows
            .iter()
            .map(|row| {
                Ok(Timer {
                    fire_at: row.get(0),
                    run_id: row.get(1),
                    kind: decode(row.get(2), row.get(3), row.get(4))?,
                })
            })
            .collect::<Result<Vec<_>, WorldError>>()?;
        due.sort();
        Ok(due)
    }

    async fn next_timer_at(&self) -> Result<Option<Millis>, WorldError> {
        sqlx::query_scalar(
            "SELECT min(t.fire_at) FROM timers t LEFT JOIN runs r ON r.run_id = t.run_id
             WHERE r.run_id IS NULL OR (r.owner = $1 AND NOT r.finished)",
        )
        .bind(&self.inner.member_id)
        .fetch_one(&self.inner.pool)
        .await
        .map_err(|e| self.err("reading the next timer", e))
    }

    async fn remove_run_timers(&self, run_id: &str) -> Result<bool, WorldError> {
        if self.inner.ended.lock().contains(run_id) {
            // Deleted by the statement that ended the run, which does not say how many.
            return Ok(true);
        }
        let deleted = sqlx::query("DELETE FROM timers WHERE run_id = $1")
            .bind(run_id)
            .execute(&self.inner.pool)
            .await
            .map_err(|e| self.err("removing a run's timers", e))?;
        Ok(deleted.rows_affected() > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_kinds_order_as_the_kinds_do_and_decode_back() {
        let kinds = [
            TimerKind::Sleep { position: 0 },
            TimerKind::Sleep { position: 9 },
            TimerKind::ActivityRetry {
                position: 1,
                attempt: 2,
            },
            TimerKind::ActivityRetry {
                position: 1,
                attempt: 3,
            },
            TimerKind::RunTimeout,
            TimerKind::WorkflowRetry { attempt: 2 },
            TimerKind::HookExpiry { position: u32::MAX },
        ];
        for pair in kinds.windows(2) {
            assert!(pair[0] < pair[1]);
            assert!(encode(&pair[0]) < encode(&pair[1]), "{pair:?}");
        }
        for kind in kinds {
            let (tag, a, b) = encode(&kind);
            assert_eq!(decode(tag, a, b).unwrap(), kind);
        }
        assert!(decode(9, 0, 0).is_err());
    }
}
