//! Serving an axum router over TCP so that hostile clients cannot hold the server: hyper's
//! HTTP/1 server with a timer, so a request's headers must arrive within a timeout (which also
//! closes idle keep-alive connections); at most a number of connections at once, the others
//! waiting in the listen backlog; and a shutdown that waits for requests in progress at most a
//! grace period. `axum::serve` has none of these.
//!
//! These timeouts guard sockets, not workflows: they run on Tokio's timer, not on the world's
//! [`Clock`](crate::clock::Clock), which may be virtual and would then never fire.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::config::WebhookServerOptions;

/// Pause after a failed `accept` (out of file descriptors, say) before the next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The limits [`serve_connections`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest wait for a request's headers (and longest idle keep-alive).
    pub header_read_timeout: Duration,
    /// Most connections served at once.
    pub max_connections: usize,
    /// Longest wait for requests in progress at shutdown; then connections are closed.
    pub shutdown_grace: Duration,
}

impl Limits {
    /// The limits of a world's webhook endpoint (its `webhook_server` options) and its
    /// `shutdown_grace`: what an HTTP endpoint of that world uses.
    pub fn of(options: &WebhookServerOptions, shutdown_grace: Duration) -> Self {
        Limits {
            header_read_timeout: options.header_read_timeout.0,
            max_connections: options.max_connections,
            shutdown_grace,
        }
    }
}

/// Serves `router` on `listener` until `stop` completes: then stops accepting, lets requests
/// in progress finish for at most the grace period, and closes what is left.
///
/// ```no_run
/// # async fn demo(world: &worlds_engine::World) -> std::io::Result<()> {
/// use std::time::Duration;
/// use worlds_engine::http::{serve_connections, Limits};
///
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let limits = Limits::of(&world.config().webhook_server, Duration::from_secs(5));
/// let router = world.webhook_router();
/// serve_connections(listener, router, limits, tokio::signal::ctrl_c()).await;
/// # Ok(()) }
/// ```
pub async fn serve_connections<F: Future + Send>(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stop: F,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut http = hyper::server::conn::http1::Builder::new();
    // Without a timer hyper never applies its header read timeout.
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let service = TowerToHyperService::new(router);
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        // A slot is taken before accepting, so connections over the limit stay in the
        // backlog instead of being accepted and held.
        let slot = tokio::select! {
            _ = &mut stop => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "HTTP endpoint: could not accept a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let connection =
            graceful.watch(http.serve_connection(TokioIo::new(stream), service.clone()));
        connections.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "HTTP endpoint: connection ended with an error");
            }
            drop(slot);
        });
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(limits.shutdown_grace) => tracing::warn!(
            open = connections.len(),
            "HTTP endpoint: shutdown grace period over; closing the connections still open"
        ),
    }
    connections.shutdown().await;
}
