//! [`StreamStore`]: streams and chunks. A write locks the stream's row, so indexes stay dense
//! across processes; write keys are unique per stream.

use async_trait::async_trait;
use bytes::Bytes;
use sqlx::Row;
use tokio::sync::watch;
use worlds_engine::store::{NewChunk, StreamSignal, StreamStore};
use worlds_engine::streams::{StreamChunk, StreamInfo};
use worlds_engine::WorldError;

use crate::db::{big, unsigned};
use crate::PostgresStore;

fn chunk_of(row: &sqlx::postgres::PgRow) -> StreamChunk {
    StreamChunk {
        id: row.get("chunk_id"),
        index: unsigned(row.get("idx")),
        data: Bytes::from(row.get::<Vec<u8>, _>("data")),
        created_at: row.get("created_at"),
    }
}

#[async_trait]
impl StreamStore for PostgresStore {
    async fn write_chunk(
        &self,
        run_id: &str,
        name: &str,
        chunk: NewChunk,
    ) -> Result<StreamChunk, WorldError> {
        let mut tx = self
            .inner
            .pool
            .begin()
            .await
            .map_err(|e| self.err("writing a chunk", e))?;
        sqlx::query("INSERT INTO streams (run_id, name) VALUES ($1, $2) ON CONFLICT DO NOTHING")
            .bind(run_id)
            .bind(name.as_bytes())
            .execute(&mut *tx)
            .await
            .map_err(|e| self.err("creating a stream", e))?;
        let row = sqlx::query(
            "SELECT done, next_index FROM streams WHERE run_id = $1 AND name = $2 FOR UPDATE",
        )
        .bind(run_id)
        .bind(name.as_bytes())
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| self.err("locking a stream", e))?;
        let done: bool = row.get(0);
        let next_index: i64 = row.get(1);
        if let Some(key) = &chunk.key {
            let stored = sqlx::query(
                "SELECT chunk_id, idx, data, created_at FROM chunks
                 WHERE run_id = $1 AND name = $2 AND write_key = $3",
            )
            .bind(run_id)
            .bind(name.as_bytes())
            .bind(key.as_bytes())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.err("finding a chunk by key", e))?;
            if let Some(stored) = stored {
                return Ok(chunk_of(&stored));
            }
        }
        if done {
            return Err(WorldError::Conflict {
                message: format!(
                    "stream '{name}' of run {run_id} is closed; no chunk can be added"
                ),
            });
        }
        sqlx::query(
            "WITH ins AS (
                 INSERT INTO chunks (run_id, name, idx, chunk_id, write_key, data, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
             )
             UPDATE streams SET next_index = $3 + 1 WHERE run_id = $1 AND name = $2",
        )
        .bind(run_id)
        .bind(name.as_bytes())
        .bind(next_index)
        .bind(&chunk.id)
        .bind(chunk.key.as_deref().map(str::as_bytes))
        .bind(chunk.data.as_ref())
        .bind(chunk.created_at)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.err("writing a chunk", e))?;
        tx.commit()
            .await
            .map_err(|e| self.err("committing a chunk", e))?;
        self.stream_changed(run_id);
        Ok(StreamChunk {
            id: chunk.id,
            index: unsigned(next_index),
            data: chunk.data,
            created_at: chunk.created_at,
        })
    }

    async fn close_stream(&self, run_id: &str, name: &str) -> Result<(), WorldError> {
        sqlx::query(
            "INSERT INTO streams (run_id, name, done) VALUES ($1, $2, true)
             ON CONFLICT (run_id, name) DO UPDATE SET done = true",
        )
        .bind(run_id)
        .bind(name.as_bytes())
        .execute(&self.inner.pool)
        .await
        .map_err(|e| self.err("closing a stream", e))?;
        self.stream_changed(run_id);
        Ok(())
    }

    async fn close_run_streams(&self, run_id: &str) -> Result<(), WorldError> {
        if self.inner.ended.lock().contains(run_id) {
            // Closed by the statement that ended the run.
            return Ok(());
        }
        let closed = sqlx::query("UPDATE streams SET done = true WHERE run_id = $1 AND NOT done")
            .bind(run_id)
            .execute(&self.inner.pool)
            .await
            .map_err(|e| self.err("closing a run's streams", e))?;
        if closed.rows_affected() > 0 {
            self.stream_changed(run_id);
        }
        Ok(())
    }

    async fn stream_chunks(
        &self,
        run_id: &str,
        name: &str,
        from: u64,
        limit: usize,
    ) -> Result<(Vec<StreamChunk>, StreamInfo), WorldError> {
        let row =
            sqlx::query("SELECT done, next_index FROM streams WHERE run_id = $1 AND name = $2")
                .bind(run_id)
                .bind(name.as_bytes())
                .fetch_optional(&self.inner.pool)
                .await
                .map_err(|e| self.err("reading a stream", e))?;
        let Some(row) = row else {
            return Ok((
                Vec::new(),
                StreamInfo {
                    tail_index: -1,
                    done: false,
                },
            ));
        };
        let done: bool = row.get(0);
        let next_index: i64 = row.get(1);
        let info = StreamInfo {
            tail_index: next_index - 1,
            done,
        };
        if limit == 0 || big(from) >= next_index {
            return Ok((Vec::new(), info));
        }
        let rows = sqlx::query(
            "SELECT chunk_id, idx, data, created_at FROM chunks
             WHERE run_id = $1 AND name = $2 AND idx >= $3 AND idx < $4 ORDER BY idx LIMIT $5",
        )
        .bind(run_id)
        .bind(name.as_bytes())
        .bind(big(from))
        .bind(next_index)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.inner.pool)
        .await
        .map_err(|e| self.err("reading chunks", e))?;
        Ok((rows.iter().map(chunk_of).collect(), info))
    }

    async fn list_streams(&self, run_id: &str) -> Result<Vec<String>, WorldError> {
        let names: Vec<Vec<u8>> =
            sqlx::query_scalar("SELECT name FROM streams WHERE run_id = $1 ORDER BY name")
                .bind(run_id)
                .fetch_all(&self.inner.pool)
                .await
                .map_err(|e| self.err("listing streams", e))?;
        names
            .into_iter()
            .map(|n| {
                String::from_utf8(n).map_err(|e| {
                    WorldError::Internal(format!("a stored stream name is not UTF-8: {e}"))
                })
            })
            .collect()
    }

    fn watch_streams(&self, run_id: &str) -> StreamSignal {
        let mut signals = self.inner.signals.lock();
        let tx = signals
            .entry(run_id.to_owned())
            .or_insert_with(|| watch::channel(0).0);
        StreamSignal::from_watch(tx.subscribe())
    }
}
