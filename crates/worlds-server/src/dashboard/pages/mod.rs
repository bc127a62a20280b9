//! The dashboard's pages and actions. Each page reads through the same world methods as the
//! JSON API, so the two always agree on a run's status. Here: what every page shares (the
//! frame, rendering, refusals, how times and links are written) and signing in; the pages
//! themselves are in the files beside it.

mod live;
mod pauses;
mod retention;
mod run;
mod run_parts;
mod runs;
mod schedules;

pub(crate) use live::{live, live_stream};
pub(crate) use pauses::{pause, pauses, resume};
pub(crate) use retention::{preview, retention, sweep};
pub(crate) use run::{cancel, check_hook_payload, recover, resume_hook, run};
pub(crate) use runs::runs;
pub(crate) use schedules::{change_schedule, schedules, workers};

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use axum::extract::{Extension, Form, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use futures::Stream;
use serde::Deserialize;
use worlds_engine::clock::Millis;
use worlds_engine::model::{ActivityStatus, ListQuery, SortOrder, StatusFilter};
use worlds_engine::schedule::ScheduleConfig;
use worlds_engine::telemetry::WorldMetrics;
use worlds_engine::{
    Event, EventKind, HookStatus, ResolveData, RunStatus, WorkflowQueryFilter, WorkflowState,
    WorldError,
};

use super::may_act;
use super::session::{SessionId, Sessions};
use super::shown::{self, duration_text};
use super::timeline::Timeline;
use crate::auth::{Principal, Scope};
use crate::state::Api;

/// Runs per page of the list.
const PAGE: usize = 50;
/// Counts by status stop at this many ("1000+").
const COUNT_CAP: usize = 1_000;
/// A history longer than this shows its first and last events only.
const HISTORY_SHOWN: usize = 200;
/// How often a live page checks for changes.
const LIVE_EVERY: Duration = Duration::from_millis(400);
/// How often a live runs list looks for changes nobody told it of (other processes sharing a
/// PostgreSQL store).
const LIST_POLL_EVERY: Duration = Duration::from_secs(5);

/// What every page's frame needs.
pub(crate) struct Page {
    signed_in: bool,
    section: &'static str,
    who: String,
    /// `data-live` of `<main>`: what the script watches (`runs`, `run:<id>`), or empty.
    live: String,
    notice: String,
}

impl Page {
    fn of(principal: &Principal, section: &'static str) -> Self {
        Page {
            signed_in: true,
            section,
            who: format!("{} ({})", principal.subject, principal.scope.as_str()),
            live: String::new(),
            notice: String::new(),
        }
    }
}

fn render(template: &impl Template, status: StatusCode) -> Response {
    match template.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "a dashboard page failed to render");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page failed to render",
            )
                .into_response()
        }
    }
}

/// A world error as a small page; a run (or hook, or schedule) that does not exist as the
/// "not found" page.
fn failure(principal: &Principal, error: &WorldError) -> Response {
    if matches!(error, WorldError::NotFound { .. }) {
        let page = Page::of(principal, "runs");
        let view = NotFound {
            page,
            what: format!("{error}."),
        };
        return render(&view, StatusCode::NOT_FOUND);
    }
    let mut page = Page::of(principal, "runs");
    page.notice = error.to_string();
    let status =
        StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    render(&Message { page }, status)
}

#[derive(Template)]
#[template(
    source = "{% extends \"base.html\" %}{% block title %}worlds{% endblock %}{% block main %}<p><a href=\"/\">Back to the runs</a></p>{% endblock %}",
    ext = "html"
)]
struct Message {
    page: Page,
}

#[derive(Template)]
#[template(
    source = "{% extends \"base.html\" %}{% block title %}Not found{% endblock %}{% block main %}<h1>Not found</h1><p id=\"not-found\">{{ what }}</p><p><a href=\"/\">Back to the runs</a></p>{% endblock %}",
    ext = "html"
)]
struct NotFound {
    page: Page,
    /// What was asked for and is not there.
    what: String,
}

/// The "not found" page for a path no route serves (no session needed to see it).
pub(crate) fn no_page(path: &str) -> Response {
    let view = NotFound {
        page: Page {
            signed_in: false,
            section: "",
            who: String::new(),
            live: String::new(),
            notice: String::new(),
        },
        what: format!("The dashboard has no page at {path}."),
    };
    render(&view, StatusCode::NOT_FOUND)
}

/// A notice shown at the top of a page after an action (`?notice=…`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Notice {
    #[serde(default)]
    notice: String,
}

// ---- sign-in ----

#[derive(Template)]
#[template(path = "login.html")]
struct Login {
    page: Page,
    error: String,
}

fn login_page(error: String) -> Login {
    Login {
        page: Page {
            signed_in: false,
            section: "",
            who: String::new(),
            live: String::new(),
            notice: String::new(),
        },
        error,
    }
}

pub(crate) async fn login_form() -> Response {
    render(&login_page(String::new()), StatusCode::OK)
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    key: String,
}

pub(crate) async fn login(
    Extension(sessions): Extension<Arc<Sessions>>,
    method: axum::http::Method,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if !super::session::from_own_page(&method, &headers) {
        return render(
            &login_page(
                "Not signed in: the sign-in did not come from this dashboard's own page; open the sign-in page and sign in there.".to_owned(),
            ),
            StatusCode::FORBIDDEN,
        );
    }
    match sessions.sign_in(&form.key).await {
        Ok((_, cookie)) => {
            let mut response = Redirect::to("/").into_response();
            response.headers_mut().insert(header::SET_COOKIE, cookie);
            response
        }
        Err(e) => render(
            &login_page(format!("Not signed in: {e}.")),
            StatusCode::UNAUTHORIZED,
        ),
    }
}

pub(crate) async fn logout(
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
) -> Response {
    let cookie = sessions.sign_out(&headers);
    let mut response = Redirect::to("/login").into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response
}

fn forbidden(principal: &Principal, what: &str) -> Response {
    let mut page = Page::of(principal, "runs");
    page.notice = format!(
        "Your key has the {} scope: to {what}, sign in with a key of more scope.",
        principal.scope.as_str()
    );
    render(&Message { page }, StatusCode::FORBIDDEN)
}

/// `k=v&…`, form-encoded.
fn query<V: serde::Serialize>(pairs: &[(&str, V)]) -> String {
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

/// `text` as one path segment: everything but unreserved characters percent-encoded.
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A `datetime-local` value (`2026-11-27T08:30`, read as UTC) as ms since the epoch.
fn local_time_ms(text: &str) -> Option<Millis> {
    let civil: jiff::civil::DateTime = text.parse().ok()?;
    let zoned = civil.to_zoned(jiff::tz::TimeZone::UTC).ok()?;
    Some(zoned.timestamp().as_millisecond())
}

fn iso(at: Millis) -> String {
    jiff::Timestamp::from_millisecond(at)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// `2026-11-27 08:30:12 UTC`.
fn clock_text(at: Millis) -> String {
    // The zone is named: a reader elsewhere would otherwise read it as their own time.
    jiff::Timestamp::from_millisecond(at)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations_read_well() {
        assert_eq!(local_time_ms("1970-01-01T00:01"), Some(60_000));
        assert_eq!(local_time_ms("yesterday"), None);
        assert_eq!(clock_text(90_061_000), "1970-01-02 01:01:01 UTC");
        assert_eq!(segment("a b/ü"), "a%20b%2F%C3%BC");
        assert_eq!(query(&[("notice", "a b&c")]), "notice=a+b%26c");
    }
}
