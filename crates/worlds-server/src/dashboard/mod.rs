//! The web dashboard, served by the API's router at `/`: runs (counts, filters, pages, live),
//! one run's story (what happened and why, a timeline, its history, what it waits on), and
//! actions (cancel, resume a hook, pause a schedule), retention (the policy, the last sweep, a
//! sweep now or its preview), behind the same authentication as the API.
//!
//! Pages are rendered on the server (askama templates, which escape what they insert); the
//! one script (`assets/app.js`, embedded in the binary) only keeps a page live, checks a hook's
//! payload against its type before the form is sent, and needs nothing at build time. Every page answers with a
//! strict Content-Security-Policy: no inline script, nothing from elsewhere.

mod charts;
mod pages;
mod session;
mod shown;
mod timeline;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::auth::{AuthProvider, Principal};
use crate::state::Api;

pub(crate) use session::Sessions;

/// The content security policy of every dashboard answer.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The dashboard's routes (merged into the API's router).
pub(crate) fn routes(provider: Arc<dyn AuthProvider>, api: &Api) -> Router<Api> {
    let sessions = Arc::new(Sessions::new(provider, api.world.clock()));
    let samples = Arc::new(charts::Samples::default());
    charts::spawn_sampler(&api.world, &samples);
    let signed_in = Router::new()
        .route("/", get(pages::runs))
        .route("/runs/{id}", get(pages::run))
        .route("/runs/{id}/cancel", post(pages::cancel))
        .route("/runs/{id}/recover/{action}", post(pages::recover))
        .route("/runs/{id}/hooks/{hook}/resume", post(pages::resume_hook))
        .route(
            "/runs/{id}/hooks/{hook}/check",
            post(pages::check_hook_payload),
        )
        .route("/schedules", get(pages::schedules))
        .route("/schedules/{id}/{action}", post(pages::change_schedule))
        .route("/pauses", get(pages::pauses).post(pages::pause))
        .route("/pauses/{kind}/{name}/resume", post(pages::resume))
        .route("/workers", get(pages::workers))
        .route("/retention", get(pages::retention))
        .route("/retention/sweep", post(pages::sweep))
        .route("/retention/preview", post(pages::preview))
        .route("/live", get(pages::live))
        .route("/live/stream", get(pages::live_stream))
        .route_layer(axum::middleware::from_fn_with_state(
            sessions.clone(),
            require_session,
        ));
    Router::new()
        .route("/login", get(pages::login_form).post(pages::login))
        .route("/logout", post(pages::logout))
        .route("/assets/app.css", get(css))
        .route("/assets/app.js", get(js))
        .merge(signed_in)
        .layer(axum::Extension(sessions))
        .layer(axum::Extension(samples))
        .layer(axum::middleware::from_fn(security_headers))
}

/// Lets a request with a live session whose key is still accepted through (its [`Principal`]
/// and [`SessionId`](session::SessionId) attached); sends a browser without one to the sign-in page. Actions must
/// come from the dashboard's own pages.
async fn require_session(
    State(sessions): State<Arc<Sessions>>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let Some((id, principal)) = sessions.principal(&parts.headers).await else {
        if parts.method == axum::http::Method::GET && !parts.uri.path().starts_with("/live") {
            return Redirect::to("/login").into_response();
        }
        return (
            StatusCode::UNAUTHORIZED,
            "sign in first (a session ends when its key is revoked or expires)",
        )
            .into_response();
    };
    if !session::same_origin(&parts) {
        return (
            StatusCode::FORBIDDEN,
            "refused: this action did not come from the dashboard's own page",
        )
            .into_response();
    }
    parts.extensions.insert(principal);
    parts.extensions.insert(id);
    next.run(Request::from_parts(parts, body)).await
}

/// What a path no route serves answers: for a browser asking for a page (not under `/v1`),
/// the dashboard's HTML "not found" page; for everything else, the API's JSON error.
pub(crate) async fn fallback(request: Request) -> Response {
    let path = request.uri().path();
    let api = path == "/v1" || path.starts_with("/v1/");
    let wants_html = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"));
    if api || !wants_html {
        return crate::error::no_route();
    }
    let mut response = pages::no_page(path);
    add_security_headers(&mut response);
    response
}

/// Headers on every dashboard answer: the CSP, no sniffing, no referrer elsewhere.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    add_security_headers(&mut response);
    response
}

fn add_security_headers(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
}

async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        include_str!("../../assets/app.css"),
    )
}

async fn js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        include_str!("../../assets/app.js"),
    )
}

/// Whether `principal` may act (cancel, resume, pause), not only look.
fn may_act(principal: &Principal) -> bool {
    principal.scope.allows(crate::auth::Scope::Write)
}
