//! A run's streams: their names, their chunks in pages, and one stream read live as
//! Server-Sent Events.
//!
//! Live reading sends every stored chunk from the asked index, then each new one as it is
//! written, as an event `chunk` whose id is the chunk's index, and ends with an event `end`
//! once the stream is done (closed, or its run finished). A client that loses the connection
//! and reconnects with `Last-Event-ID` (what browsers' `EventSource` does by itself) continues
//! after the last index it got: no chunk is missed or sent twice.

use std::convert::Infallible;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use worlds_engine::streams::StreamChunk;

use super::runs::PageBody;
use super::Api;
use crate::error::ApiError;
use crate::openapi::ErrorDoc;

/// A chunk as the API shows it: text when it is UTF-8, base64 otherwise.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ChunkBody {
    /// Its place in the stream, from 0 with no gaps.
    index: u64,
    /// When it was written (ms since the epoch).
    created_at: i64,
    /// Its data, when that is UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// Its data in base64, when it is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    base64: Option<String>,
}

impl From<&StreamChunk> for ChunkBody {
    fn from(chunk: &StreamChunk) -> Self {
        let text = chunk.text().map(str::to_owned);
        let base64 = text
            .is_none()
            .then(|| base64::engine::general_purpose::STANDARD.encode(&chunk.data));
        ChunkBody {
            index: chunk.index,
            created_at: chunk.created_at,
            text,
            base64,
        }
    }
}

/// The names of a run's streams.
#[utoipa::path(get, path = "/v1/runs/{id}/streams", tag = "streams",
    params(("id" = String, Path, description = "A run id or workflow id")),
    security(("api_key" = [])),
    responses((status = 200, body = Vec<String>), (status = 404, body = ErrorDoc)))]
pub(crate) async fn names(
    State(api): State<Api>,
    Path(id): Path<String>,
) -> Result<Json<Vec<String>>, ApiError> {
    Ok(Json(api.world.streams().list(&id).await?))
}

/// Where a chunk was written.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Written {
    /// Its place in the stream.
    index: u64,
}

/// Appends the request body, as it is, as the next chunk of a run's stream (for runs whose
/// code runs outside the engine; a workflow writes its own streams).
#[utoipa::path(post, path = "/v1/runs/{id}/streams/{name}", tag = "streams",
    params(("id" = String, Path, description = "A run id or workflow id"),
        ("name" = String, Path, description = "The stream's name")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    security(("api_key" = [])),
    responses((status = 201, body = Written), (status = 404, body = ErrorDoc),
        (status = 409, description = "The stream is closed or the run has finished", body = ErrorDoc),
        (status = 413, body = ErrorDoc)))]
pub(crate) async fn write(
    State(api): State<Api>,
    Path((id, name)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Result<(axum::http::StatusCode, Json<Written>), ApiError> {
    let chunk = api.world.streams().write(&id, &name, body).await?;
    Ok((
        axum::http::StatusCode::CREATED,
        Json(Written { index: chunk.index }),
    ))
}

/// Closes a run's stream: readers end after its last chunk. Closing it again does nothing.
#[utoipa::path(post, path = "/v1/runs/{id}/streams/{name}/close", tag = "streams",
    params(("id" = String, Path, description = "A run id or workflow id"),
        ("name" = String, Path, description = "The stream's name")),
    security(("api_key" = [])),
    responses((status = 204, description = "Closed"), (status = 404, body = ErrorDoc)))]
pub(crate) async fn close(
    State(api): State<Api>,
    Path((id, name)): Path<(String, String)>,
) -> Result<axum::http::StatusCode, ApiError> {
    api.world.streams().close(&id, &name).await?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}

/// `?cursor=&limit=` of a page of chunks.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChunkPage {
    /// The `cursor` of the previous page.
    cursor: Option<String>,
    /// Page size, at most 1000.
    limit: Option<usize>,
}

/// A stream's chunks, paged.
#[utoipa::path(get, path = "/v1/runs/{id}/streams/{name}", tag = "streams",
    params(("id" = String, Path, description = "A run id or workflow id"),
        ("name" = String, Path, description = "The stream's name"), ChunkPage),
    security(("api_key" = [])),
    responses((status = 200, body = PageBody<ChunkBody>), (status = 404, body = ErrorDoc)))]
pub(crate) async fn chunks(
    State(api): State<Api>,
    Path((id, name)): Path<(String, String)>,
    query: Result<Query<ChunkPage>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PageBody<ChunkBody>>, ApiError> {
    let Query(q) = query?;
    let page = api
        .world
        .streams()
        .chunks(
            &id,
            &name,
            q.cursor.as_deref(),
            q.limit.unwrap_or(0).min(1_000),
        )
        .await?;
    Ok(Json(PageBody::from(page).map(|c| ChunkBody::from(&c))))
}

/// `?from=` of a live read: the first index (negative counts back from the last chunk).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct Live {
    /// The first index to send (default 0; negative counts from the end). `Last-Event-ID`
    /// takes precedence.
    from: Option<i64>,
}

/// A stream as Server-Sent Events: `chunk` events (id = index, data = the chunk as
/// `ChunkBody` JSON), then `end`.
#[utoipa::path(get, path = "/v1/runs/{id}/streams/{name}/live", tag = "streams",
    params(("id" = String, Path, description = "A run id or workflow id"),
        ("name" = String, Path, description = "The stream's name"), Live,
        ("Last-Event-ID" = Option<String>, Header, description = "Continue after this index")),
    security(("api_key" = [])),
    responses((status = 200, description = "An event stream", content_type = "text/event-stream"),
        (status = 400, body = ErrorDoc), (status = 404, body = ErrorDoc)))]
pub(crate) async fn live(
    State(api): State<Api>,
    Path((id, name)): Path<(String, String)>,
    headers: HeaderMap,
    query: Result<Query<Live>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let resumed = match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    ApiError::invalid("Last-Event-ID", "not the index of a chunk this sent")
                })?,
        ),
        None => None,
    };
    let start = match resumed {
        Some(last) => i64::try_from(last).unwrap_or(i64::MAX).saturating_add(1),
        None => q.from.unwrap_or(0),
    };
    let chunks = api.world.streams().read(&id, &name, start).await?;
    Ok(Sse::new(events(chunks))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The chunks as events, then `end`; a failure mid-read ends the events with `error` instead.
/// (The dashboard's live stream view sends the same events.)
pub(crate) fn events(
    chunks: impl Stream<Item = Result<StreamChunk, worlds_engine::WorldError>> + Send + 'static,
) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static {
    futures::stream::unfold((chunks.boxed(), false), |(mut chunks, over)| async move {
        if over {
            return None;
        }
        let (event, over) = match chunks.next().await {
            Some(Ok(chunk)) => (
                Event::default()
                    .id(chunk.index.to_string())
                    .event("chunk")
                    .json_data(ChunkBody::from(&chunk))
                    .unwrap_or_else(|_| Event::default().event("error")),
                false,
            ),
            Some(Err(e)) => (
                Event::default()
                    .event("error")
                    .json_data(ApiError::from(e).body())
                    .unwrap_or_else(|_| Event::default().event("error")),
                true,
            ),
            // Browsers drop an event without data, and their `EventSource` would then read the
            // stream again from the start: `end` carries some.
            None => (Event::default().event("end").data("end"), true),
        };
        Some((Ok(event), (chunks, over)))
    })
}
