//! Live pages: Server-Sent Events that tell a page to refresh itself, and a run's stream
//! read as it is written.

use super::*;

// ---- a run's stream, live ----

#[derive(Debug, Default, Deserialize)]
pub(crate) struct StreamQuery {
    run: String,
    name: String,
}

/// A run's stream from its first chunk, then live, as the API's `…/streams/{name}/live`
/// sends it (`chunk` events with the chunk as JSON, then `end`).
pub(crate) async fn live_stream(
    State(api): State<Api>,
    Extension(sessions): Extension<Arc<Sessions>>,
    Extension(session): Extension<SessionId>,
    Query(q): Query<StreamQuery>,
    headers: HeaderMap,
) -> Response {
    // A reconnecting browser continues after the last chunk it got.
    let from = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map_or(0, |last| last.saturating_add(1));
    // Chunks stored encrypted that the world has no keys for are shown as such.
    match api.world.streams().read_shown(&q.run, &q.name, from).await {
        Ok(chunks) => {
            // The stream ends with the session (its key revoked, say).
            let events = futures::StreamExt::take_until(
                crate::routes::streams::events(chunks),
                sessions.ended(session),
            );
            Sse::new(events)
                .keep_alive(KeepAlive::default())
                .into_response()
        }
        Err(e) => (
            StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::NOT_FOUND),
            e.to_string(),
        )
            .into_response(),
    }
}

// ---- live ----

#[derive(Debug, Default, Deserialize)]
pub(crate) struct LiveQuery {
    /// A run id: watch that run; without it, watch the list.
    #[serde(default)]
    run: String,
}

/// Server-Sent Events telling a page that what it shows changed (`change`), so its script
/// fetches the page again; a run page gets `end` once its run finished.
pub(crate) async fn live(
    State(api): State<Api>,
    Extension(sessions): Extension<Arc<Sessions>>,
    Extension(session): Extension<SessionId>,
    Query(q): Query<LiveQuery>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let changes = api.world.status_changes();
    let stream = futures::stream::unfold(
        (api, q.run, changes, None::<String>, false),
        |(api, run, mut changes, mut last, ended)| async move {
            if ended {
                return None;
            }
            loop {
                let (now, done) = signature(&api, &run).await;
                let changed = last.as_ref().is_some_and(|l| *l != now);
                let first = last.is_none();
                last = Some(now);
                if done && !first {
                    let event = SseEvent::default().event("end").data("done");
                    return Some((Ok(event), (api, run, changes, last, true)));
                }
                if changed {
                    let event = SseEvent::default().event("change").data("changed");
                    return Some((Ok(event), (api, run, changes, last, false)));
                }
                if run.is_empty() {
                    // The runs list: woken by this process's status changes (at most every
                    // LIVE_EVERY), and looking anyway now and then for other processes'.
                    let _ = tokio::time::timeout(LIST_POLL_EVERY, changes.changed()).await;
                }
                tokio::time::sleep(LIVE_EVERY).await;
            }
        },
    );
    // The stream ends with the session (its key revoked, say).
    let stream = futures::StreamExt::take_until(stream, sessions.ended(session));
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// What a live page compares: a run's status and event count, or the first page of runs.
async fn signature(api: &Api, run: &str) -> (String, bool) {
    if run.is_empty() {
        let page = api
            .world
            .list_runs(WorkflowQueryFilter::new().limit(PAGE))
            .await;
        let text = page.map_or_else(
            |e| e.to_string(),
            |p| {
                p.data
                    .iter()
                    .map(|r| format!("{}:{}", r.id, r.status.as_str()))
                    .collect::<Vec<_>>()
                    .join(",")
            },
        );
        return (text, false);
    }
    match api.world.get_run(run, ResolveData::None).await {
        Ok(state) => (
            format!("{}:{}", state.status.as_str(), state.event_count),
            state.status.is_terminal(),
        ),
        Err(e) => (e.to_string(), true),
    }
}
