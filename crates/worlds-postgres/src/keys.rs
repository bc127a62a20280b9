//! [`KeyStore`]: API key records in the `api_keys` table, one JSON record per key id.

use async_trait::async_trait;
use worlds_engine::model::keys::{check_key_id, ApiKeyRecord};
use worlds_engine::store::KeyStore;
use worlds_engine::WorldError;

use crate::db::{from_json, to_json};
use crate::PostgresStore;

#[async_trait]
impl KeyStore for PostgresStore {
    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>, WorldError> {
        let rows: Vec<String> = sqlx::query_scalar("SELECT record FROM api_keys ORDER BY id")
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| self.err("listing API keys", e))?;
        rows.iter().map(|r| from_json("API key", r)).collect()
    }

    async fn save_key(&self, record: &ApiKeyRecord) -> Result<(), WorldError> {
        check_key_id(&record.id)?;
        let json = to_json("API key", record)?;
        sqlx::query(
            "INSERT INTO api_keys (id, record) VALUES ($1, $2)
             ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record",
        )
        .bind(&record.id)
        .bind(&json)
        .execute(&self.inner.pool)
        .await
        .map_err(|e| self.err("saving an API key", e))?;
        Ok(())
    }
}
