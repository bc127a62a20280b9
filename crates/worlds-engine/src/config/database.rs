//! Where a PostgreSQL world's database is: [`DatabaseConfig`].

use serde::{Deserialize, Serialize};

/// The environment variable a PostgreSQL world reads its database URL from when
/// [`DatabaseConfig::url`] is unset.
pub const DATABASE_URL_ENV: &str = "WORLDS_ENGINE_DATABASE_URL";

/// The database of a world with [`Persistence::Postgres`](super::Persistence::Postgres): its
/// URL, how many connections a process opens, the schema holding the tables, and how long a
/// process's lease on its runs outlives its last heartbeat. Every process of the world points
/// at the same database and schema.
///
/// ```
/// use std::time::Duration;
/// use worlds_engine::WorldConfig;
/// let mut config = WorldConfig::postgres("postgres://app@db.internal/app");
/// assert_eq!(config.database.pool_size, 10);
/// assert_eq!(config.database.schema, "worlds");
/// assert_eq!(config.database.lease_duration.0, Duration::from_secs(30));
/// config.database.lease_duration = Duration::from_secs(10).into();
/// // The password never shows in logs.
/// let shown = format!("{:?}", WorldConfig::postgres("postgres://app:s3cret@db/app").database);
/// assert!(!shown.contains("s3cret"), "{shown}");
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct DatabaseConfig {
    /// `postgres://user:password@host:port/database`. Unset, the URL is read from
    /// [`DATABASE_URL_ENV`] when the world opens.
    pub url: Option<String>,
    /// Most connections one process opens. Default 10.
    #[serde(alias = "poolSize")]
    pub pool_size: u32,
    /// The PostgreSQL schema holding the world's tables, created if missing: lower-case letters,
    /// digits and `_`. Several worlds can share a database under different schemas. Default
    /// `worlds`.
    pub schema: String,
    /// How long this process's runs stay leased to it after its last heartbeat (renewed every
    /// third of it): when a process dies without shutting down (`kill -9`, a crash, a lost
    /// host), the other processes take its runs over this long after its last heartbeat, and a
    /// process paused or cut off from the database for longer may find its runs taken. A
    /// world that shuts down hands its runs over at once. At least 1 s. Default 30 s.
    #[serde(alias = "leaseDuration")]
    pub lease_duration: crate::duration::Dur,
}

/// The shortest [`DatabaseConfig::lease_duration`]: a shorter lease would pass to another
/// process whenever a heartbeat is a little late.
pub(crate) const MIN_LEASE_DURATION: std::time::Duration = std::time::Duration::from_secs(1);

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: None,
            pool_size: 10,
            schema: "worlds".to_owned(),
            lease_duration: crate::duration::Dur(std::time::Duration::from_secs(30)),
        }
    }
}

impl DatabaseConfig {
    /// The URL to connect to: [`url`](Self::url), else the [`DATABASE_URL_ENV`] variable read
    /// through `env`. An error names both when neither is set.
    pub fn resolve_url(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<String, crate::WorldError> {
        match &self.url {
            Some(url) if !url.trim().is_empty() => Ok(url.clone()),
            _ => match env(DATABASE_URL_ENV) {
                Some(url) if !url.trim().is_empty() => Ok(url),
                _ => Err(crate::WorldError::invalid(
                    "database.url",
                    format!(
                        "a PostgreSQL world needs a database URL: set WorldConfig::database.url or the {DATABASE_URL_ENV} environment variable (postgres://user@host:5432/database)"
                    ),
                )),
            },
        }
    }
}

/// The URL with its password replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((credentials, host)) => match credentials.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl std::fmt::Debug for DatabaseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseConfig")
            .field("url", &self.url.as_deref().map(redact_url))
            .field("pool_size", &self.pool_size)
            .field("schema", &self.schema)
            .field("lease_duration", &self.lease_duration)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("postgres://app:pw@db:5432/x"),
            "postgres://app:***@db:5432/x"
        );
        assert_eq!(redact_url("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(redact_url("postgres://db/x"), "postgres://db/x");
        assert_eq!(redact_url("postgres://a:b@c@db/x"), "postgres://a:***@db/x");
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn the_url_comes_from_the_config_then_the_environment() {
        let mut config = DatabaseConfig::default();
        let env = |name: &str| (name == DATABASE_URL_ENV).then(|| "postgres://env/db".to_owned());
        assert_eq!(config.resolve_url(env).unwrap(), "postgres://env/db");
        config.url = Some("postgres://cfg/db".into());
        assert_eq!(config.resolve_url(env).unwrap(), "postgres://cfg/db");
        let err = DatabaseConfig::default().resolve_url(|_| None).unwrap_err();
        assert!(err.to_string().contains(DATABASE_URL_ENV), "{err}");
    }
}
