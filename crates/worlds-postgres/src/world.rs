//! Opening a world on PostgreSQL: [`open`] turns a [`WorldConfig`] with
//! [`Persistence::Postgres`] into a [`World`] whose store is a [`PostgresStore`].

use std::sync::Arc;

use worlds_engine::clock::{Clock, SystemClock};
use worlds_engine::hooks::HOOK_SECRET_ENV;
use worlds_engine::{HookSecret, Persistence, World, WorldConfig, WorldError};

use crate::{PostgresOptions, PostgresStore};

/// The `settings` row holding the hook key when none is configured.
const HOOK_KEY_SETTING: &str = "hook_key";

/// Opens the world `config` describes on its PostgreSQL database: connects (the URL from
/// [`DatabaseConfig::url`](worlds_engine::DatabaseConfig::url) or the
/// [`DATABASE_URL_ENV`](worlds_engine::DATABASE_URL_ENV) variable), migrates the schema, joins
/// the world's members, and returns the world, ready to register workflows and start.
///
/// Every process opened on the same database and schema is a member of one world: runs started
/// by any are driven by one at a time, and taken over by another when a member dies.
///
/// Hook tokens are derived from one key shared by every member: the configured one
/// ([`WorldConfig::hook_secret`], the `WORLDS_ENGINE_HOOK_SECRET` variable or
/// [`WorldConfig::hook_key_file`]), else a key the first member generates and keeps in the
/// schema's `settings` table (whoever can read that table can derive tokens: configure a key
/// to keep it out of the database).
///
/// ```no_run
/// use worlds_engine::prelude::*;
/// # async fn demo() -> Result<(), WorldError> {
/// let world = worlds_postgres::open(WorldConfig::postgres("postgres://app@db.internal/app")).await?;
/// world.start().await?;
/// # Ok(()) }
/// ```
pub async fn open(config: WorldConfig) -> Result<World, WorldError> {
    open_with_clock(config, Arc::new(SystemClock)).await
}

/// [`open`] on a given clock (a virtual clock in tests). Leases still run on the database's
/// time.
pub async fn open_with_clock(
    mut config: WorldConfig,
    clock: Arc<dyn Clock>,
) -> Result<World, WorldError> {
    if config.persistence != Persistence::Postgres {
        return Err(WorldError::InvalidInput {
            field: "persistence".into(),
            message: format!(
                "worlds_postgres::open opens PostgreSQL worlds; this configuration asks for {:?} (use WorldConfig::postgres(url), or World::new for the other backends)",
                config.persistence
            ),
        });
    }
    config.validate()?;
    let url = config
        .database
        .resolve_url(|name| std::env::var(name).ok())?;
    let options = PostgresOptions {
        pool_size: config.database.pool_size,
        schema: config.database.schema.clone(),
        lease_duration: config.database.lease_duration.0,
        log_days: config.logs.max_files,
        ..PostgresOptions::default()
    };
    // Keys in the environment that do not read are refused here, before anything is written.
    config.encryption_keys = config.encryption()?;
    let store = PostgresStore::connect(&url, options).await?;
    if config.hook_secret.is_none()
        && config.hook_key_file.is_none()
        && std::env::var_os(HOOK_SECRET_ENV).is_none()
    {
        let key = store.shared_setting(HOOK_KEY_SETTING, random_key).await?;
        config.hook_secret = Some(HookSecret(key));
    }
    Ok(World::with_store_and_logs(
        config,
        clock,
        Arc::new(store.clone()),
        Arc::new(store),
    ))
}

/// 32 random bytes as 64 hex digits.
fn random_key() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl PostgresStore {
    /// The value of setting `name`, set to `make()` by the first process that asks: every
    /// process gets the same value.
    pub(crate) async fn shared_setting(
        &self,
        name: &str,
        make: impl FnOnce() -> String,
    ) -> Result<String, WorldError> {
        sqlx::query("INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT DO NOTHING")
            .bind(name)
            .bind(make())
            .execute(self.pool())
            .await
            .map_err(|e| self.err("writing a setting", e))?;
        let value: String = sqlx::query_scalar("SELECT value FROM settings WHERE name = $1")
            .bind(name)
            .fetch_one(self.pool())
            .await
            .map_err(|e| self.err("reading a setting", e))?;
        Ok(value)
    }
}
