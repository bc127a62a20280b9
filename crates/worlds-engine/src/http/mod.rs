//! HTTP endpoints a world can serve. For now: webhooks, with the limits of
//! [`WebhookServerOptions`].

mod webhooks;

pub(crate) use webhooks::router as webhooks_router;
pub use webhooks::{WebhookServer, WebhookServerOptions};
