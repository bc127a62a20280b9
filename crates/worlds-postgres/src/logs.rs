//! [`LogStore`]: the world's log entries in the schema's `logs` table, written by every member
//! and read by `world.logs().query(…)` and `worlds logs --database-url`.
//!
//! The world hands each batch over at its flush interval; a task per store inserts the
//! batches waiting (one statement for all of them), so the flush never waits on the database.
//! A batch the database refuses is dropped with one warning per streak of failures (the
//! warning is itself a log entry: reporting every failure would feed the loop).

use std::sync::Weak;

use async_trait::async_trait;
use sqlx::Row;
use tokio::sync::{mpsc, oneshot};
use worlds_engine::telemetry::logs::{LogEntry, LogError, LogLevel, LogQuery, LogStore};

use crate::db::to_json;
use crate::{Inner, PostgresStore};

/// What the log writer is handed: a batch to insert, or a caller to answer once everything
/// before it is inserted.
pub(crate) enum LogItem {
    Batch(Vec<LogEntry>),
    Flushed(oneshot::Sender<()>),
}

/// Items waiting for the log writer.
pub(crate) type LogQueue = mpsc::UnboundedSender<LogItem>;

/// Batches inserted by one statement at most.
const MAX_BATCHES: usize = 64;

/// A level as stored: ordered as the levels are.
fn level_number(level: LogLevel) -> i16 {
    match level {
        LogLevel::Debug => 0,
        LogLevel::Info => 1,
        LogLevel::Warn => 2,
        LogLevel::Error => 3,
    }
}

/// Starts the task that inserts a store's log batches.
pub(crate) fn spawn_log_writer(
    inner: Weak<Inner>,
    mut rx: mpsc::UnboundedReceiver<LogItem>,
    keep_days: Option<usize>,
) {
    tokio::spawn(async move {
        // A failure was reported and no write has worked since.
        let mut failing = false;
        // The oldest day kept as of the last pruning: prune again when a newer day begins.
        let mut kept_from: Option<i64> = None;
        let mut items = Vec::with_capacity(MAX_BATCHES);
        while rx.recv_many(&mut items, MAX_BATCHES).await > 0 {
            let mut entries = Vec::new();
            let mut waiting = Vec::new();
            for item in items.drain(..) {
                match item {
                    LogItem::Batch(batch) => entries.extend(batch),
                    LogItem::Flushed(reply) => waiting.push(reply),
                }
            }
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let store = PostgresStore { inner };
            let newest = entries.iter().map(|e| e.timestamp).max();
            match store.insert_logs(&entries).await {
                Ok(()) => {
                    failing = false;
                    if let (Some(days), Some(newest)) = (keep_days, newest) {
                        let from = first_day_kept(newest, days);
                        if kept_from.is_none_or(|kept| from > kept)
                            && store.prune_logs(from).await.is_ok()
                        {
                            kept_from = Some(from);
                        }
                    }
                }
                Err(e) => {
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(
                            error = %e,
                            dropped = entries.len(),
                            "could not write log entries to PostgreSQL; entries are dropped until writing works again"
                        );
                    }
                }
            }
            for reply in waiting {
                let _ = reply.send(());
            }
        }
    });
}

/// A day in milliseconds.
const DAY_MS: i64 = 86_400_000;

/// The start (ms, UTC) of the oldest day kept when `days` days are kept and the newest entry
/// is at `newest`: its own day and the `days - 1` before.
fn first_day_kept(newest: i64, days: usize) -> i64 {
    let today = newest.div_euclid(DAY_MS) * DAY_MS;
    let back = i64::try_from(days.saturating_sub(1)).unwrap_or(i64::MAX / DAY_MS);
    today.saturating_sub(back.saturating_mul(DAY_MS))
}

impl PostgresStore {
    /// Deletes the entries from before `from` (ms).
    async fn prune_logs(&self, from: i64) -> Result<(), worlds_engine::WorldError> {
        sqlx::query("DELETE FROM logs WHERE at < $1")
            .bind(from)
            .execute(&self.inner.pool)
            .await
            .map_err(|e| self.err("deleting old log entries", e))?;
        Ok(())
    }

    async fn insert_logs(&self, entries: &[LogEntry]) -> Result<(), worlds_engine::WorldError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut at = Vec::with_capacity(entries.len());
        let mut level = Vec::with_capacity(entries.len());
        let mut category = Vec::with_capacity(entries.len());
        let mut body = Vec::with_capacity(entries.len());
        for entry in entries {
            at.push(entry.timestamp);
            level.push(level_number(entry.level));
            category.push(entry.category.as_str());
            body.push(to_json("log entry", entry)?);
        }
        sqlx::query(
            "INSERT INTO logs (at, level, category, member, entry)
             SELECT a, l, c, $5, e FROM UNNEST($1::bigint[], $2::smallint[], $3::text[], $4::text[])
                 AS x(a, l, c, e)",
        )
        .bind(&at)
        .bind(&level)
        .bind(&category)
        .bind(&body)
        .bind(&self.inner.member_id)
        .execute(&self.inner.pool)
        .await
        .map_err(|e| self.err("writing log entries", e))?;
        Ok(())
    }

    /// The entries matching `query`, oldest first (with a limit, the most recent ones); each
    /// names the member that wrote it (`metadata.member`).
    pub async fn query_logs(&self, query: &LogQuery) -> Result<Vec<LogEntry>, LogError> {
        let failed = |e: String| LogError::Store { message: e };
        let rows = sqlx::query(
            "SELECT member, entry FROM logs
             WHERE ($1::bigint IS NULL OR at >= $1)
               AND ($2::smallint IS NULL OR level >= $2)
               AND ($3::text IS NULL OR category = $3)
             ORDER BY at DESC, id DESC LIMIT $4",
        )
        .bind(query.since)
        .bind(query.level.map(level_number))
        .bind(query.category.map(|c| c.as_str()))
        .bind(query.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX)))
        .fetch_all(&self.inner.pool)
        .await
        .map_err(|e| failed(self.err("reading log entries", e).to_string()))?;
        let mut entries = Vec::with_capacity(rows.len());
        for row in rows.iter().rev() {
            let member: String = row.get(0);
            let body: String = row.get(1);
            let mut entry: LogEntry = serde_json::from_str(&body)
                .map_err(|e| failed(format!("a stored log entry does not parse: {e}")))?;
            entry
                .metadata
                .entry("member")
                .or_insert(serde_json::Value::String(member));
            entries.push(entry);
        }
        Ok(entries)
    }
}

#[async_trait]
impl LogStore for PostgresStore {
    fn append(&self, entries: Vec<LogEntry>) -> Result<(), LogError> {
        self.inner
            .logs
            .send(LogItem::Batch(entries))
            .map_err(|_| LogError::Store {
                message: "the PostgreSQL store was closed".into(),
            })
    }

    async fn query(&self, query: &LogQuery) -> Result<Vec<LogEntry>, LogError> {
        self.query_logs(query).await
    }

    async fn flush(&self) {
        let (reply, done) = oneshot::channel();
        if self.inner.logs.send(LogItem::Flushed(reply)).is_ok() {
            let _ = done.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_days_kept_end_with_the_newest_entrys_day() {
        let day = |d: i64| d * DAY_MS;
        // One day kept: from the start of the newest entry's day.
        assert_eq!(first_day_kept(day(20) + 5, 1), day(20));
        assert_eq!(first_day_kept(day(20), 1), day(20));
        assert_eq!(first_day_kept(day(21) - 1, 1), day(20));
        // Three days: that day and the two before.
        assert_eq!(first_day_kept(day(20) + 5, 3), day(18));
        // Zero behaves as one (no day is kept by none).
        assert_eq!(first_day_kept(day(20) + 5, 0), day(20));
        // Huge counts keep everything instead of overflowing.
        assert!(first_day_kept(day(20), usize::MAX) < 0);
    }
}
