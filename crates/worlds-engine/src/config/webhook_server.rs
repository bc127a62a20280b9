//! Limits of the webhook endpoint (read by `http::webhooks`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::Dur;
use crate::error::WorldError;

/// Limits of the webhook endpoint against slow or hostile clients
/// ([`WorldConfig::webhook_server`](crate::WorldConfig::webhook_server)).
///
/// ```
/// use worlds_engine::duration::Dur;
/// use worlds_engine::WorldConfig;
/// let mut config = WorldConfig::memory();
/// config.webhook_server.body_deadline = Dur::from_millis(10_000);
/// config.webhook_server.max_connections = 256;
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct WebhookServerOptions {
    /// Longest wait for a request's headers, from the moment the connection is ready for a
    /// request: a client that sends them slower is disconnected, and so is an idle keep-alive
    /// connection. Default 10 s.
    #[serde(alias = "headerReadTimeout")]
    pub header_read_timeout: Dur,
    /// Longest pause while a request body arrives; a longer one is answered 408. Default 10 s.
    #[serde(alias = "bodyReadTimeout")]
    pub body_read_timeout: Dur,
    /// Longest time for a whole request body, however steadily it trickles in; a slower one is
    /// answered 408. Default 30 s.
    #[serde(alias = "bodyDeadline")]
    pub body_deadline: Dur,
    /// Most connections served at once; further ones wait in the listen backlog until one
    /// closes. Default 1024.
    #[serde(alias = "maxConnections")]
    pub max_connections: usize,
}

impl Default for WebhookServerOptions {
    fn default() -> Self {
        Self {
            header_read_timeout: Dur(Duration::from_secs(10)),
            body_read_timeout: Dur(Duration::from_secs(10)),
            body_deadline: Dur(Duration::from_secs(30)),
            max_connections: 1024,
        }
    }
}

impl WebhookServerOptions {
    /// Checks the values, naming the first bad field.
    pub(crate) fn validate(&self) -> Result<(), WorldError> {
        for (field, value) in [
            ("header_read_timeout", self.header_read_timeout),
            ("body_read_timeout", self.body_read_timeout),
            ("body_deadline", self.body_deadline),
        ] {
            if value.0.is_zero() {
                return Err(WorldError::invalid(
                    format!("webhook_server.{field}"),
                    "must be positive",
                ));
            }
        }
        if self.max_connections == 0 {
            return Err(WorldError::invalid(
                "webhook_server.max_connections",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}
