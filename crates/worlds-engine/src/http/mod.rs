//! HTTP endpoints a world can serve: webhooks, with the limits of [`WebhookServerOptions`],
//! and (feature `http`) `serve_connections`, which serves any axum router with those limits
//! (the API server of `worlds-server` uses it too).
//!
//! The router and the server (`WebhookServer`, `World::webhook_router`,
//! `World::serve_webhooks`) come with the `http` feature; the options are always here, as
//! they are a field of [`WorldConfig`](crate::WorldConfig).

#[cfg(feature = "http")]
mod serving;
#[cfg(feature = "http")]
mod webhooks;

pub use crate::config::WebhookServerOptions;
#[cfg(feature = "http")]
pub use serving::{serve_connections, Limits};
#[cfg(feature = "http")]
pub(crate) use webhooks::router as webhooks_router;
#[cfg(feature = "http")]
pub use webhooks::WebhookServer;
