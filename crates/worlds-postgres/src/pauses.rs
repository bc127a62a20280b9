//! [`PauseStore`]: the pauses in force in the `pauses` table, one JSON record per paused
//! workflow or task queue.

use async_trait::async_trait;
use worlds_engine::model::{Pause, PauseTarget};
use worlds_engine::store::PauseStore;
use worlds_engine::WorldError;

use crate::db::{from_json, to_json};
use crate::PostgresStore;

#[async_trait]
impl PauseStore for PostgresStore {
    async fn list_pauses(&self) -> Result<Vec<Pause>, WorldError> {
        let rows: Vec<String> = sqlx::query_scalar("SELECT record FROM pauses")
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| self.err("listing pauses", e))?;
        let mut pauses = rows
            .iter()
            .map(|r| from_json("pause", r))
            .collect::<Result<Vec<Pause>, _>>()?;
        // In the order of the engine's targets (workflows first), whatever the collation.
        pauses.sort_by(|a, b| a.target.cmp(&b.target));
        Ok(pauses)
    }

    async fn save_pause(&self, pause: &Pause) -> Result<(), WorldError> {
        pause.check()?;
        let json = to_json("pause", pause)?;
        sqlx::query(
            "INSERT INTO pauses (kind, name, record) VALUES ($1, $2, $3)
             ON CONFLICT (kind, name) DO UPDATE SET record = EXCLUDED.record",
        )
        .bind(pause.target.kind())
        .bind(pause.target.name())
        .bind(&json)
        .execute(&self.inner.pool)
        .await
        .map_err(|e| self.err("saving a pause", e))?;
        Ok(())
    }

    async fn remove_pause(&self, target: &PauseTarget) -> Result<Option<Pause>, WorldError> {
        // A name PostgreSQL cannot hold names no stored pause.
        if target.check().is_err() {
            return Ok(None);
        }
        let row: Option<String> =
            sqlx::query_scalar("DELETE FROM pauses WHERE kind = $1 AND name = $2 RETURNING record")
                .bind(target.kind())
                .bind(target.name())
                .fetch_optional(&self.inner.pool)
                .await
                .map_err(|e| self.err("lifting a pause", e))?;
        row.map(|r| from_json("pause", &r)).transpose()
    }
}
