//! [`ScheduleStore`]: schedule records, each update a transaction under a lock on the id, so
//! processes sharing the database never claim one firing twice.

use async_trait::async_trait;
use worlds_engine::schedule::ScheduleConfig;
use worlds_engine::store::{ScheduleChange, ScheduleStore, ScheduleUpdate};
use worlds_engine::WorldError;

use crate::db::{from_json, to_json};
use crate::PostgresStore;

#[async_trait]
impl ScheduleStore for PostgresStore {
    async fn list_schedules(&self) -> Result<Vec<ScheduleConfig>, WorldError> {
        let rows: Vec<String> = sqlx::query_scalar("SELECT record FROM schedules ORDER BY id")
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| self.err("listing schedules", e))?;
        rows.iter().map(|r| from_json("schedule", r)).collect()
    }

    async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleConfig>, WorldError> {
        let row: Option<String> = sqlx::query_scalar("SELECT record FROM schedules WHERE id = $1")
            .bind(id.as_bytes())
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(|e| self.err("reading a schedule", e))?;
        row.map(|r| from_json("schedule", &r)).transpose()
    }

    async fn update_schedule(
        &self,
        id: &str,
        change: &mut ScheduleUpdate<'_>,
    ) -> Result<Option<ScheduleConfig>, WorldError> {
        let mut tx = self
            .inner
            .pool
            .begin()
            .await
            .map_err(|e| self.err("updating a schedule", e))?;
        // A lock on the id, held to commit: the record may not exist yet, so no row to lock.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!("worlds-engine schedule {} {id}", self.inner.schema))
            .execute(&mut *tx)
            .await
            .map_err(|e| self.err("locking a schedule", e))?;
        let current: Option<String> =
            sqlx::query_scalar("SELECT record FROM schedules WHERE id = $1")
                .bind(id.as_bytes())
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| self.err("reading a schedule", e))?;
        let current: Option<ScheduleConfig> =
            current.map(|r| from_json("schedule", &r)).transpose()?;
        let after = match change(current.clone())? {
            ScheduleChange::Keep => return Ok(current),
            ScheduleChange::Delete => {
                sqlx::query("DELETE FROM schedules WHERE id = $1")
                    .bind(id.as_bytes())
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.err("deleting a schedule", e))?;
                None
            }
            ScheduleChange::Put(record) if record.id != id => {
                return Err(WorldError::InvalidInput {
                    field: "schedule".into(),
                    message: format!(
                        "a record with id '{}' cannot be stored as '{id}'",
                        record.id
                    ),
                })
            }
            ScheduleChange::Put(record) => {
                sqlx::query(
                    "INSERT INTO schedules (id, record) VALUES ($1, $2)
                     ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record",
                )
                .bind(id.as_bytes())
                .bind(to_json("schedule", &record)?)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.err("writing a schedule", e))?;
                Some(record)
            }
        };
        tx.commit()
            .await
            .map_err(|e| self.err("committing a schedule", e))?;
        Ok(after)
    }
}
