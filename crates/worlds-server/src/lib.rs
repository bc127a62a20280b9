//! The HTTP API of a worlds-engine world: start runs by name, read and list them, wait for
//! results, page through histories and steps, cancel runs and resume hooks, from any process
//! that can reach the server — with every route but the health checks behind authentication.
//!
//! Mount [`router`] in your own axum application, or let [`serve`] run a server:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use worlds_engine::prelude::*;
//! use worlds_server::auth::{KeyRing, Scope};
//! use worlds_server::{serve, ApiOptions};
//!
//! let world = Arc::new(World::new(WorldConfig::default())?);
//! world.start().await?;
//! let keys = Arc::new(KeyRing::new());
//! let key = keys.create("ops", Scope::Write, world.clock().now_ms(), None);
//! println!("API key (shown once): {}", key.key);
//! let server = serve(world.clone(), "127.0.0.1:8080", ApiOptions::with_keys(keys)).await?;
//! // curl -H "Authorization: Bearer wek_…" http://127.0.0.1:8080/v1/runs
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Routes
//!
//! | route | scope | what |
//! |---|---|---|
//! | `GET /healthz`, `GET /readyz` | none | the process answers; its storage answers too |
//! | `POST /v1/runs` | write | start a run: `{"workflow", "input", "options"}` → 201 `{run_id, workflow_id}` (200 for the run already holding its idempotency key, or its workflow id under `on_conflict: use_existing`; 409 under `fail`); with `?wait_ms=` it also waits and answers as `…/result` does |
//! | `GET /v1/runs` | read | runs, newest first (`order=ascending` for oldest first): `status` (comma-separated), `workflow`, `parent`, `started_after`, `started_before`, `quarantined`, `code_version`, `workflow_id_prefix`, `cursor`, `limit`, `resolve=none\|all` |
//! | `GET /v1/runs/{id}` | read | one run (by run id or workflow id), `resolve=none\|all` |
//! | `GET /v1/runs/{id}/result` | read | waits up to `wait_ms` (default 30 s): 200 with the outcome once finished, 202 while it goes on |
//! | `GET /v1/runs/{id}/events` | read | its history, paged: `cursor`, `limit`, `order=ascending\|descending`, `resolve` |
//! | `GET /v1/runs/{id}/steps` | read | its steps, paged likewise |
//! | `GET /v1/runs/{id}/waits` | read | what it waits on now, since when, and a `concern` for each wait that looks stuck (a timer long overdue, a hook past its expiry, a step past its timeout) |
//! | `POST /v1/runs/{id}/cancel` | write | cancel it (and its unfinished children), `{"reason"}` optional |
//! | `GET /v1/runs/{id}/streams` | read | the names of the run's streams |
//! | `GET /v1/runs/{id}/streams/{name}` | read | its chunks, paged: `cursor`, `limit` (text, or `base64` for binary data) |
//! | `GET /v1/runs/{id}/streams/{name}/live` | read | Server-Sent Events: chunks from `from` (negative: that many back from the end, clamped to 0; or after `Last-Event-ID`), then new ones, then `end` |
//! | `POST /v1/runs/{id}/streams/{name}`, `…/close` | write | append the body as the stream's next chunk (201 `{index}`); close the stream (for runs driven from outside) |
//! | `GET /v1/runs/{id}/streams/{name}/chunks` | read | its chunks, paged, in the DevKit's shape: `{data: [{index, data: {"$bytes"}}], cursor, hasMore, done}` (`limit` 100 by default, at most 1000) |
//! | `GET /v1/runs/{id}/streams/{name}/info` | read | `{tailIndex, done}`: the index of its last chunk (-1 when empty), whether it is done |
//! | `POST /v1/runs/{id}/streams/{name}/chunks` | write | `{"chunks": [{"$bytes"} \| "text", …]}`: append them in order, all checked before any is stored (201 `{indices}`) |
//! | `/v1/devkit/…` | read (`GET`), write | the Workflow DevKit's World: its runs, steps, events, hooks and queue (see [`devkit`]) |
//! | `POST /v1/hooks/resume` | write | `{"token", "payload"}`: resume the hook waiting with that token |
//! | `GET /v1/hooks` | read | the hooks waiting now, paged |
//! | `GET /v1/hooks/{id}`, `GET /v1/runs/{id}/hooks` | read | a hook by id; a run's hooks, paged |
//! | `GET /v1/schedules`, `GET /v1/schedules/{id}` | read | schedules |
//! | `POST /v1/schedules` | admin | `{"id", "workflow", "cron", "input"}`: create or update a cron schedule (UTC) |
//! | `POST /v1/schedules/{id}/pause`, `…/resume`, `DELETE /v1/schedules/{id}` | admin | change one |
//! | `GET /v1/pauses` | read | the workflows and task queues paused, with who paused them, why and since when |
//! | `PUT /v1/pauses/{kind}/{name}`, `DELETE /v1/pauses/{kind}/{name}` | admin | pause a `workflow` or a `task_queue` (`{"reason"}` optional; its runs and steps not started are held until it is resumed; recorded as paused by `key:<id>`); resume it (404 if it was not paused) |
//! | `GET /v1/metrics`, `GET /metrics` | read | the world's metrics as JSON; in the Prometheus text format |
//! | `GET /v1/workers` | read | the serving process's workers: `live` and lately `dead` |
//! | `GET /v1/openapi.json` | read | the OpenAPI document of these routes (also [`openapi()`]) |
//! | `GET /v1/keys`, `POST /v1/keys`, `POST /v1/keys/{id}/revoke` | admin | the world's API keys (with [`ApiOptions::with_world_keys`]): list, create (`{"scope", "name", "expires_in_ms"}`, the key in the answer only), revoke |
//!
//! Errors are `{"code", "message", "details"}` with the engine's statuses (see
//! [`error::ErrorBody`]); a caller without a recognized key gets 401, one whose key's scope
//! does not cover the route 403; with a [`RateLimit`], one over its rate 429 with `Retry-After`.
//! Request bodies are capped at the world's payload limit plus
//! room for the envelope (413 beyond, at once for a declared `Content-Length`), and must arrive
//! within the world's `webhook_server.body_deadline` without a pause over its
//! `body_read_timeout` (408), on every route. CORS headers are sent only for the origins in
//! [`ApiOptions::cors_origins`] (none by default).
//!
//! # Features
//!
//! - `dashboard` (on by default): the web dashboard on the same router (`/`, `/login`,
//!   `/runs/{id}`, …), its pages, assets and sign-in sessions. Without it the router serves
//!   the API alone — every route above, the OpenAPI document, the DevKit's World — and a path
//!   no route serves gets the API's JSON "not found".

#![forbid(unsafe_code)]

pub mod auth;
mod body_limits;
#[cfg(feature = "dashboard")]
mod dashboard;
pub mod devkit;
pub mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod openapi;
mod routes;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use worlds_engine::http::{serve_connections, Limits};
use worlds_engine::{World, WorldError};

use auth::{AuthProvider, Guard, KeyAuth, KeyRing, Scope};
use routes::{
    health, hooks, keys, metrics, pauses, recovery, retention, runs, schedules, streams, workers,
};
use state::Api;

pub use openapi::OPENAPI_PATH;

/// Room for a request's envelope (workflow name, options, token) on top of the world's payload
/// limit.
const ENVELOPE_BYTES: usize = 64 * 1024;

/// How callers are recognized.
#[derive(Clone)]
pub enum Auth {
    /// API keys from this ring (`Authorization: Bearer wek_…`), checked on the world's clock.
    Keys(Arc<KeyRing>),
    /// API keys kept by the world's store ([`ApiKeys`](auth::ApiKeys)), also managed over
    /// the API (`/v1/keys`, admin scope).
    WorldKeys(Arc<auth::ApiKeys>),
    /// A program's own check.
    Provider(Arc<dyn AuthProvider>),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Keys(keys) => write!(f, "Auth::Keys({} keys)", keys.list().len()),
            Auth::WorldKeys(_) => f.write_str("Auth::WorldKeys(..)"),
            Auth::Provider(_) => f.write_str("Auth::Provider(..)"),
        }
    }
}

/// Requests one caller (one API key) may make: `per_second` on average, up to `burst` at once.
/// Beyond it the answer is 429 with `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per second, on average.
    pub per_second: std::num::NonZeroU32,
    /// Requests allowed at once after a quiet spell.
    pub burst: std::num::NonZeroU32,
}

/// How the API is served. There is no way to serve it unauthenticated.
#[derive(Debug, Clone)]
pub struct ApiOptions {
    /// How callers are recognized.
    pub auth: Auth,
    /// Requests per caller; `None` (the default): no limit.
    pub rate_limit: Option<RateLimit>,
    /// Web origins (`https://app.example.com`) whose pages may call the API from a browser.
    /// Empty (the default): no CORS headers are sent, so browsers allow same-origin pages only.
    pub cors_origins: Vec<String>,
    /// Largest request body accepted (413 beyond). Default: the world's
    /// `max_payload_bytes` plus 64 KiB.
    pub max_body_bytes: Option<usize>,
    /// Origins (`https://app.example.com`, `http://localhost:3000`) the DevKit queue may
    /// deliver messages to; a loopback origin stands for its port under every loopback name,
    /// and the entry `loopback` ([`devkit::LOOPBACK`]) for every port of this machine. Empty
    /// (the default): none; a `callbackUrl` not allowed is refused with 400, so a caller cannot
    /// make the server send requests to hosts, or local services, it names.
    pub devkit_callback_origins: Vec<String>,
}

impl ApiOptions {
    /// Callers are recognized by the API keys of `keys`.
    pub fn with_keys(keys: Arc<KeyRing>) -> Self {
        ApiOptions {
            auth: Auth::Keys(keys),
            rate_limit: None,
            cors_origins: Vec::new(),
            max_body_bytes: None,
            devkit_callback_origins: Vec::new(),
        }
    }

    /// Callers are recognized by the API keys kept in the world's store (see [`ApiKeys`]).
    ///
    /// [`ApiKeys`]: auth::ApiKeys
    pub fn with_world_keys(keys: Arc<auth::ApiKeys>) -> Self {
        ApiOptions {
            auth: Auth::WorldKeys(keys),
            rate_limit: None,
            cors_origins: Vec::new(),
            max_body_bytes: None,
            devkit_callback_origins: Vec::new(),
        }
    }

    /// Callers are recognized by `provider`.
    pub fn with_provider(provider: impl AuthProvider) -> Self {
        ApiOptions {
            auth: Auth::Provider(Arc::new(provider)),
            rate_limit: None,
            cors_origins: Vec::new(),
            max_body_bytes: None,
            devkit_callback_origins: Vec::new(),
        }
    }
}

/// Every route, by the scope it needs, with its OpenAPI entry: the router and the document
/// are built from this one list.
struct Routes {
    read: OpenApiRouter<Api>,
    write: OpenApiRouter<Api>,
    admin: OpenApiRouter<Api>,
    open: OpenApiRouter<Api>,
}

impl Routes {
    fn new() -> Self {
        let read = OpenApiRouter::new()
            .routes(routes!(runs::list))
            .routes(routes!(runs::get))
            .routes(routes!(runs::result))
            .routes(routes!(runs::events))
            .routes(routes!(runs::waits))
            .routes(routes!(runs::steps))
            .routes(routes!(recovery::bulk_progress))
            .routes(routes!(retention::report))
            .routes(routes!(retention::status))
            .routes(routes!(hooks::of_run))
            .routes(routes!(streams::names))
            .routes(routes!(streams::chunks))
            .routes(routes!(streams::live))
            .routes(routes!(streams::devkit_chunks))
            .routes(routes!(streams::info))
            .routes(routes!(hooks::waiting))
            .routes(routes!(hooks::get))
            .routes(routes!(schedules::list))
            .routes(routes!(schedules::get))
            .routes(routes!(pauses::list))
            .routes(routes!(metrics::json))
            .routes(routes!(metrics::prometheus))
            .routes(routes!(workers::list))
            .routes(routes!(devkit::reads::list_runs))
            .routes(routes!(devkit::reads::get_run))
            .routes(routes!(devkit::reads::list_steps))
            .routes(routes!(devkit::reads::get_step))
            .routes(routes!(devkit::reads::list_events))
            .routes(routes!(devkit::reads::get_event))
            .routes(routes!(devkit::reads::events_by_correlation))
            .routes(routes!(devkit::reads::get_hook))
            .routes(routes!(devkit::reads::list_hooks));
        let write = OpenApiRouter::new()
            .routes(routes!(runs::start))
            .routes(routes!(runs::cancel))
            .routes(routes!(recovery::retry))
            .routes(routes!(recovery::reset))
            .routes(routes!(recovery::resume))
            .routes(routes!(recovery::bulk))
            .routes(routes!(hooks::resume))
            .routes(routes!(streams::write))
            .routes(routes!(streams::close))
            .routes(routes!(streams::write_many))
            .routes(routes!(devkit::create::create_event))
            .routes(routes!(devkit::create::set_attributes))
            .routes(routes!(devkit::reads::hook_by_token))
            .routes(routes!(devkit::queue::queue));
        let admin = OpenApiRouter::new()
            .routes(routes!(schedules::create))
            .routes(routes!(schedules::delete))
            .routes(routes!(schedules::pause))
            .routes(routes!(schedules::resume))
            .routes(routes!(keys::list))
            .routes(routes!(keys::create))
            .routes(routes!(keys::revoke))
            .routes(routes!(retention::prune))
            .routes(routes!(pauses::pause, pauses::resume));
        let open = OpenApiRouter::new()
            .routes(routes!(health::healthz))
            .routes(routes!(health::readyz));
        Routes {
            read,
            write,
            admin,
            open,
        }
    }
}

/// The OpenAPI document of the API (what `GET /v1/openapi.json` answers).
pub fn openapi() -> utoipa::openapi::OpenApi {
    let routes = Routes::new();
    let doc = routes
        .read
        .merge(routes.write)
        .merge(routes.admin)
        .merge(routes.open)
        .into_openapi();
    openapi::finish(doc)
}

/// The API over `world`, to serve or to mount in a larger application (under `/`: its paths
/// start with `/v1`, `/healthz` and `/readyz`).
pub fn router(world: Arc<World>, options: ApiOptions) -> Router {
    routes_of(world, options, CancellationToken::new())
}

/// The router, whose long polls answer at once when `stopping` is cancelled (the server is
/// shutting down: a poll must not hold the shutdown, nor be cut off without an answer).
fn routes_of(world: Arc<World>, options: ApiOptions, stopping: CancellationToken) -> Router {
    let mut world_keys = None;
    let provider: Arc<dyn AuthProvider> = match options.auth {
        Auth::Keys(keys) => Arc::new(KeyAuth {
            keys,
            clock: world.clock(),
        }),
        Auth::WorldKeys(keys) => {
            world_keys = Some(keys.clone());
            keys
        }
        Auth::Provider(provider) => provider,
    };
    let limit = options.max_body_bytes.unwrap_or(
        world
            .config()
            .max_payload_bytes
            .saturating_add(ENVELOPE_BYTES),
    );
    let limiter = options.rate_limit.map(|limit| {
        Arc::new(governor::RateLimiter::keyed(
            governor::Quota::per_second(limit.per_second).allow_burst(limit.burst),
        ))
    });
    let guard = |needs: Scope| {
        axum::middleware::from_fn_with_state(
            Guard {
                provider: provider.clone(),
                needs,
                limiter: limiter.clone(),
            },
            auth::require,
        )
    };
    let routes = Routes::new();
    let (app, doc) = routes
        .read
        .route_layer(guard(Scope::Read))
        .merge(routes.write.route_layer(guard(Scope::Write)))
        .merge(routes.admin.route_layer(guard(Scope::Admin)))
        .merge(routes.open)
        .split_for_parts();
    let doc = Arc::new(openapi::finish(doc));
    let document = Router::new()
        .route(
            OPENAPI_PATH,
            get(move || {
                let doc = doc.clone();
                async move { axum::Json(doc) }
            }),
        )
        .route_layer(guard(Scope::Read));
    let body_limits = body_limits::BodyLimits {
        max_bytes: limit,
        pause: world.config().webhook_server.body_read_timeout.0,
        deadline: world.config().webhook_server.body_deadline.0,
    };
    let state = Api {
        world,
        keys: world_keys,
        devkit: state::RunLocks::new(),
        callbacks: Arc::new(state::CallbackOrigins::new(
            &options.devkit_callback_origins,
        )),
        stopping,
    };
    let app = app.merge(document);
    // A browser gets the dashboard's page; an API caller the JSON error.
    #[cfg(feature = "dashboard")]
    let app = app
        .merge(dashboard::routes(provider.clone(), &state))
        .fallback(dashboard::fallback);
    #[cfg(not(feature = "dashboard"))]
    let app = app.fallback(|| async { error::no_route() });
    let app = app
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        // Every route's body: 413 at once when declared too large, 408 when it pauses too
        // long or is not all there within the deadline.
        .layer(axum::middleware::from_fn_with_state(
            body_limits,
            body_limits::limit,
        ));
    let app = match cors(&options.cors_origins) {
        Some(cors) => app.layer(cors),
        None => app,
    };
    // Refusals that come from axum rather than the handlers get the API's one JSON shape.
    let app = app.layer(axum::middleware::from_fn(error::one_shape));
    app.with_state(state)
}

/// The CORS layer for `origins`, if any: those origins may call every route with a key, from
/// a browser (preflight requests are answered before authentication).
fn cors(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use axum::http::{header, HeaderName, HeaderValue, Method};
    let origins: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok())
        .collect();
    if origins.is_empty() {
        return None;
    }
    Some(
        tower_http::cors::CorsLayer::new()
            .allow_origin(origins)
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static("last-event-id"),
            ])
            .expose_headers([header::LOCATION, header::RETRY_AFTER]),
    )
}

/// A running API server (see [`serve`]). It stops when [`shutdown`](Self::shutdown) is called
/// or when it is dropped.
#[derive(Debug)]
pub struct ApiServer {
    addr: SocketAddr,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl ApiServer {
    /// The address it listens on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections and waits for the requests in flight to be answered (a
    /// long poll answers at once, with the run's state as it is).
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serves the API over `world` on `addr` until the returned server is shut down. It speaks
/// plain HTTP: on an address other machines can reach it logs a warning, since keys and
/// payloads would travel unencrypted without a TLS proxy in front.
///
/// Connections get the world's HTTP limits (`webhook_server`: header read timeout and size,
/// most connections at once with the longest idle (or slowest sending) one closed to make room, body pause and
/// deadline) so slow or idle clients cannot hold the server, and shutdown waits for requests in
/// flight at most the world's `shutdown_grace`.
///
/// Fails with `Unavailable` if the address cannot be bound.
pub async fn serve(
    world: Arc<World>,
    addr: impl tokio::net::ToSocketAddrs,
    options: ApiOptions,
) -> Result<ApiServer, WorldError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| WorldError::Unavailable(format!("could not listen for the API: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| WorldError::Unavailable(format!("could not listen for the API: {e}")))?;
    if !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "the API is served over plain HTTP on an address other machines can reach: keys and payloads travel unencrypted; put a TLS proxy in front of it, or listen on 127.0.0.1"
        );
    }
    let limits = Limits::of(
        &world.config().webhook_server,
        world.config().shutdown_grace.0,
    );
    let stop = CancellationToken::new();
    let app = routes_of(world, options, stop.clone());
    let stopped = stop.clone();
    let task = tokio::spawn(serve_connections(listener, app, limits, async move {
        stopped.cancelled().await
    }));
    Ok(ApiServer {
        addr,
        stop,
        task: Some(task),
    })
}
