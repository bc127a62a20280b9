//! HTTP endpoints a world can serve. For now: webhooks.

mod webhooks;

pub(crate) use webhooks::router as webhooks_router;
pub use webhooks::WebhookServer;
