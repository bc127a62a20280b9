//! Serving an axum router over TCP so that hostile clients cannot hold the server: hyper's
//! HTTP/1 server with a timer, so a request's headers must arrive within a timeout (which also
//! closes idle keep-alive connections) and may not exceed a size (431 beyond); at most a number
//! of connections at once; and a shutdown that waits for requests in progress at most a grace
//! period. `axum::serve` has none of these.
//!
//! Idle connections cannot lock real callers out: when every slot is taken and another client
//! connects, the connection idle the longest — one that has sent no request yet, or a
//! keep-alive connection between requests — is closed to make room. Slow senders cannot either:
//! with none idle, the connection whose request body has been arriving the longest (a body
//! trickled in a byte at a time is not yet a request the server can serve) is closed instead.
//! A connection whose request is being served (its body all received, its answer being
//! computed or sent: a long poll, an event stream) is never closed for this; only when every
//! connection has one does a new client wait (accepted, with the others in the listen backlog)
//! until a slot frees.
//!
//! These timeouts guard sockets, not workflows: they run on Tokio's timer, not on the world's
//! [`Clock`](crate::clock::Clock), which may be virtual and would then never fire.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::WebhookServerOptions;

/// Pause after a failed `accept` (out of file descriptors, say) before the next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The limits [`serve_connections`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Longest wait for a request's headers (and longest idle keep-alive).
    pub header_read_timeout: Duration,
    /// Largest request head (request line and headers) in bytes; a larger one is answered
    /// 431.
    pub max_header_bytes: usize,
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
            max_header_bytes: options.max_header_bytes,
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
        .header_read_timeout(limits.header_read_timeout)
        // Checked on the parsed head, however many reads brought it: `max_buf_size` alone
        // lets a head that arrives in one large read through.
        .max_header_size(limits.max_header_bytes);
    let service = TowerToHyperService::new(router);
    let tracker = Arc::new(Tracker::default());
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    let mut next_id: u64 = 0;
    'serving: loop {
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
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            // Full: close the connection idle the longest (or, with none idle, the one
            // receiving a body the longest) to make room; with neither, wait for a slot or for
            // a connection to fall idle.
            Err(_) => loop {
                let idle = tracker.idle.notified();
                let evicted = tracker.evict_idlest();
                if let Some(what) = evicted {
                    tracing::debug!("HTTP endpoint: closed the {what} connection to make room");
                }
                let evicted = evicted.is_some();
                tokio::select! {
                    _ = &mut stop => break 'serving,
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => break slot,
                        Err(_) => break 'serving,
                    },
                    () = idle, if !evicted => {}
                }
            },
        };
        next_id += 1;
        let id = next_id;
        let evict = tracker.open(id);
        let tracked = Tracked {
            inner: service.clone(),
            id,
            tracker: tracker.clone(),
        };
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), tracked));
        let tracker = tracker.clone();
        connections.spawn(async move {
            tokio::select! {
                ended = connection => if let Err(e) = ended {
                    tracing::debug!(error = %e, "HTTP endpoint: connection ended with an error");
                },
                () = evict.cancelled() => {}
            }
            tracker.close(id);
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

/// The connections being served and whether each is idle: the accept loop closes the one idle
/// the longest when it needs a slot.
#[derive(Default)]
struct Tracker {
    connections: Mutex<HashMap<u64, Connection>>,
    /// Woken when a connection falls idle.
    idle: Notify,
}

struct Connection {
    /// Requests whose answer is not yet sent to the end.
    in_flight: usize,
    /// When it last had none (since it was accepted, for one that sent nothing yet).
    idle_since: Instant,
    /// Requests whose body is still arriving.
    receiving: usize,
    /// When the oldest of those began.
    receiving_since: Instant,
    /// Closes it.
    evict: CancellationToken,
}

impl Tracker {
    fn open(&self, id: u64) -> CancellationToken {
        let evict = CancellationToken::new();
        self.connections.lock().insert(
            id,
            Connection {
                in_flight: 0,
                idle_since: Instant::now(),
                receiving: 0,
                receiving_since: Instant::now(),
                evict: evict.clone(),
            },
        );
        evict
    }

    fn close(&self, id: u64) {
        self.connections.lock().remove(&id);
    }

    /// Closes the connection idle the longest or, with none idle, the one receiving a request
    /// body the longest; says which kind it closed, if any.
    fn evict_idlest(&self) -> Option<&'static str> {
        let connections = self.connections.lock();
        let open = |c: &&Connection| !c.evict.is_cancelled();
        let idlest = connections
            .values()
            .filter(open)
            .filter(|c| c.in_flight == 0)
            .min_by_key(|c| c.idle_since)
            .map(|c| (c.evict.clone(), "longest idle"));
        let chosen = idlest.or_else(|| {
            connections
                .values()
                .filter(open)
                .filter(|c| c.receiving > 0)
                .min_by_key(|c| c.receiving_since)
                .map(|c| (c.evict.clone(), "longest receiving"))
        });
        drop(connections);
        chosen.map(|(evict, what)| {
            evict.cancel();
            what
        })
    }

    /// A request body began arriving on connection `id`: the connection may be closed to make
    /// room until the guard is dropped (the body ended, failed or was dropped).
    fn receive(self: &Arc<Self>, id: u64) -> Receiving {
        if let Some(connection) = self.connections.lock().get_mut(&id) {
            if connection.receiving == 0 {
                connection.receiving_since = Instant::now();
            }
            connection.receiving += 1;
        }
        Receiving {
            tracker: self.clone(),
            id,
        }
    }

    /// A request began on connection `id`: it is not idle until the guard is dropped.
    fn begin(self: &Arc<Self>, id: u64) -> InFlight {
        if let Some(connection) = self.connections.lock().get_mut(&id) {
            connection.in_flight += 1;
        }
        InFlight {
            tracker: self.clone(),
            id,
        }
    }
}

/// A request in progress, until its answer's body is sent or dropped.
struct InFlight {
    tracker: Arc<Tracker>,
    id: u64,
}

/// A request body still arriving, until it ends or is dropped.
struct Receiving {
    tracker: Arc<Tracker>,
    id: u64,
}

impl Drop for Receiving {
    fn drop(&mut self) {
        if let Some(connection) = self.tracker.connections.lock().get_mut(&self.id) {
            connection.receiving = connection.receiving.saturating_sub(1);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut connections = self.tracker.connections.lock();
        if let Some(connection) = connections.get_mut(&self.id) {
            connection.in_flight = connection.in_flight.saturating_sub(1);
            if connection.in_flight == 0 {
                connection.idle_since = Instant::now();
                drop(connections);
                self.tracker.idle.notify_one();
            }
        }
    }
}

/// The router's service on one connection, counting its requests in progress.
#[derive(Clone)]
struct Tracked {
    inner: TowerToHyperService<Router>,
    id: u64,
    tracker: Arc<Tracker>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Tracked {
    type Response = hyper::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let in_flight = self.tracker.begin(self.id);
        let request = request.map(|body| {
            let receiving = (!body.is_end_stream()).then(|| self.tracker.receive(self.id));
            Body::new(Arriving { body, receiving })
        });
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            // Busy until the whole answer is sent: a long poll or an event stream included.
            Ok(response.map(|body| {
                Body::new(Answer {
                    body,
                    _in_flight: in_flight,
                })
            }))
        })
    }
}

/// A request's body that keeps its connection counted as receiving until its last frame.
struct Arriving {
    body: Incoming,
    receiving: Option<Receiving>,
}

impl HttpBody for Arriving {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(frame, Poll::Ready(None | Some(Err(_)))) || self.body.is_end_stream() {
            self.receiving = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// An answer's body that keeps its request counted as in progress while it is sent.
struct Answer {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
