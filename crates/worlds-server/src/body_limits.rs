//! Limits on every request body, whatever the route (the API, the dashboard's forms, the
//! sign-in): a body declared larger than the limit is refused with 413 before any of it is
//! read; a body that pauses longer than the world's `webhook_server.body_read_timeout`, or is
//! not all there within its `webhook_server.body_deadline` of the request's arrival, is cut off
//! and answered 408. So a client trickling a byte every few seconds cannot hold a connection
//! (or, with many, the server) for longer than the deadline, signed in or not.
//!
//! The body is not read here: it is wrapped so that the handler's own read fails when a limit
//! passes, and the answer is then replaced by the 408. These timeouts guard sockets, not
//! workflows: they run on Tokio's timer, not on the world's clock.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use tokio::time::{sleep, Instant, Sleep};
use worlds_engine::duration::Dur;
use worlds_engine::WorldError;

use crate::error::ApiError;

/// The limits of one router.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimits {
    /// Largest body, in bytes.
    pub(crate) max_bytes: usize,
    /// Longest pause between two parts of a body.
    pub(crate) pause: Duration,
    /// Longest time for a whole body, from the request's arrival.
    pub(crate) deadline: Duration,
}

/// Which limit cut a body off.
const NONE: u8 = 0;
const PAUSED: u8 = 1;
const LATE: u8 = 2;

/// Middleware: applies `limits` to the request's body.
pub(crate) async fn limit(
    State(limits): State<BodyLimits>,
    request: Request,
    next: Next,
) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(declared) = declared.filter(|d| *d > limits.max_bytes as u64) {
        return closing(ApiError::from(WorldError::PayloadTooLarge {
            what: "request body (as declared by its Content-Length)".into(),
            size: usize::try_from(declared).unwrap_or(usize::MAX),
            limit: limits.max_bytes,
        }));
    }
    if request.body().is_end_stream() {
        // No body (a GET, say): nothing to time.
        return next.run(request).await;
    }
    let cut = Arc::new(AtomicU8::new(NONE));
    let request = request.map(|body| {
        Body::new(Limited {
            body,
            pause: limits.pause,
            idle: Box::pin(sleep(limits.pause)),
            deadline: Box::pin(sleep(limits.deadline)),
            cut: cut.clone(),
        })
    });
    let response = next.run(request).await;
    match cut.load(Ordering::Acquire) {
        PAUSED => closing(ApiError::from(WorldError::RequestTimeout(format!(
            "the request body paused for more than {}; send the body without pauses",
            Dur(limits.pause)
        )))),
        LATE => closing(ApiError::from(WorldError::RequestTimeout(format!(
            "the request body did not arrive within {}; send it faster or in a smaller request",
            Dur(limits.deadline)
        )))),
        _ => response,
    }
}

/// The refusal, with the connection closed after it: the rest of such a body may never come,
/// or is not worth reading.
fn closing(error: ApiError) -> Response {
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request body that fails once it pauses too long or its deadline passes.
struct Limited {
    body: Body,
    pause: Duration,
    idle: Pin<Box<Sleep>>,
    deadline: Pin<Box<Sleep>>,
    cut: Arc<AtomicU8>,
}

impl Limited {
    fn cut_off(&self, why: u8) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.cut.store(why, Ordering::Release);
        let message = if why == LATE {
            "the request body did not arrive within its deadline"
        } else {
            "the request body paused too long"
        };
        Poll::Ready(Some(Err(axum::Error::new(message))))
    }
}

impl HttpBody for Limited {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                let pause = this.pause;
                this.idle.as_mut().reset(Instant::now() + pause);
                return Poll::Ready(frame);
            }
            Poll::Pending => {}
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            return this.cut_off(LATE);
        }
        if this.idle.as_mut().poll(cx).is_ready() {
            return this.cut_off(PAUSED);
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
