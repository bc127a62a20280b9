//! HTTP endpoints a world can serve. For now: webhooks, with the limits of
//! [`WebhookServerOptions`].
//!
//! The router and the server (`WebhookServer`, `World::webhook_router`,
//! `World::serve_webhooks`) come with the `http` feature; the options are always here, as
//! they are a field of [`WorldConfig`](crate::WorldConfig).

#[cfg(feature = "http")]
mod webhooks;

pub use crate::config::WebhookServerOptions;
#[cfg(feature = "http")]
pub(crate) use webhooks::router as webhooks_router;
#[cfg(feature = "http")]
pub use webhooks::WebhookServer;
