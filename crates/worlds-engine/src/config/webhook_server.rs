//! Limits of the webhook endpoint (read by `http::webhooks`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::webhook_signature::WebhookSignature;
use crate::duration::Dur;
use crate::error::WorldError;

/// Limits of the webhook endpoint against slow or hostile clients, and the signatures its
/// requests must carry ([`WorldConfig::webhook_server`](crate::WorldConfig::webhook_server)).
///
/// ```
/// use worlds_engine::duration::Dur;
/// use worlds_engine::WorldConfig;
/// let mut config = WorldConfig::memory();
/// config.webhook_server.body_deadline = Dur::from_millis(10_000);
/// config.webhook_server.max_connections = 256;
/// assert!(config.validate().is_ok());
/// ```
///
/// Signed webhooks: every request must carry a Standard Webhooks signature, and webhooks
/// created with `HookOptions::new().signature("github")` a GitHub one instead.
///
/// ```
/// use worlds_engine::hooks::WebhookSignature;
/// use worlds_engine::WorldConfig;
/// let mut config = WorldConfig::memory();
/// let secret = WebhookSignature::generate_standard_secret();
/// config.webhook_server.signature = Some(WebhookSignature::standard(secret));
/// config
///     .webhook_server
///     .named_signatures
///     .insert("github".into(), WebhookSignature::github("the secret given to GitHub"));
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
    /// Largest request head (request line and headers together), in bytes: a larger one is
    /// answered 431 before any of it reaches a handler. At least 8192. Default 64 KiB.
    #[serde(alias = "maxHeaderBytes")]
    pub max_header_bytes: usize,
    /// Longest pause while a request body arrives; a longer one is answered 408 (here and on
    /// every route of `worlds-server`'s API). Default 10 s.
    #[serde(alias = "bodyReadTimeout")]
    pub body_read_timeout: Dur,
    /// Longest time for a whole request body, however steadily it trickles in, from the
    /// request's arrival; a slower one is answered 408 (here and on every route of
    /// `worlds-server`'s API). Default 30 s.
    #[serde(alias = "bodyDeadline")]
    pub body_deadline: Dur,
    /// Most connections served at once. When all are taken and another client connects, the
    /// connection idle the longest (one that sent no request yet, or a keep-alive connection
    /// between requests) is closed to make room, or with none idle the one whose request body
    /// has been arriving the longest; only when every connection has a request being served
    /// (body received, answer not yet sent) do further ones wait in the listen backlog.
    /// Default 1024.
    #[serde(alias = "maxConnections")]
    pub max_connections: usize,
    /// The signature every webhook request must carry, unless its webhook names another
    /// ([`HookOptions::signature`](crate::HookOptions::signature)); a request without it is
    /// answered 401 and leaves the webhook waiting. Default none: the unguessable URL is then
    /// the only protection.
    pub signature: Option<WebhookSignature>,
    /// Signatures that webhooks name with [`HookOptions::signature`](crate::HookOptions::signature),
    /// by name: one per sender (`"github"`, `"stripe"`), each with its own secret.
    #[serde(alias = "namedSignatures")]
    pub named_signatures: BTreeMap<String, WebhookSignature>,
}

impl Default for WebhookServerOptions {
    fn default() -> Self {
        Self {
            header_read_timeout: Dur(Duration::from_secs(10)),
            max_header_bytes: 64 * 1024,
            body_read_timeout: Dur(Duration::from_secs(10)),
            body_deadline: Dur(Duration::from_secs(30)),
            max_connections: 1024,
            signature: None,
            named_signatures: BTreeMap::new(),
        }
    }
}

impl WebhookServerOptions {
    /// The signature a webhook's requests must carry: the one it names, else the default.
    /// `Err` names a signature this world does not configure.
    #[cfg(feature = "http")]
    pub(crate) fn signature_for(
        &self,
        named: Option<&str>,
    ) -> Result<Option<&WebhookSignature>, super::webhook_signature::SignatureRefusal> {
        match named {
            None => Ok(self.signature.as_ref()),
            Some(name) => self.named_signatures.get(name).map(Some).ok_or_else(|| {
                super::webhook_signature::SignatureRefusal::NotConfigured(name.to_owned())
            }),
        }
    }

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
        if self.max_header_bytes < 8192 {
            return Err(WorldError::invalid(
                "webhook_server.max_header_bytes",
                format!(
                    "must be at least 8192 (browsers send heads of several KiB); got {}",
                    self.max_header_bytes
                ),
            ));
        }
        if self.max_connections == 0 {
            return Err(WorldError::invalid(
                "webhook_server.max_connections",
                "must be at least 1",
            ));
        }
        if let Some(signature) = &self.signature {
            signature.validate("webhook_server.signature")?;
        }
        for (name, signature) in &self.named_signatures {
            signature.validate(&format!("webhook_server.named_signatures[{name:?}]"))?;
        }
        Ok(())
    }
}
