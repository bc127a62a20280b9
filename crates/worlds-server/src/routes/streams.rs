//! A run's streams: their names, their chunks in pages, and one stream read live as
//! Server-Sent Events.
//!
//! Live reading sends every stored chunk from the asked index, then each new one as it is
//! written, as an event `chunk` whose id is the chunk's index, and ends with an event `end`
//! once the stream is done (closed, or its run finished). A client that loses the connection
//! and reconnects with `Last-Event-ID` (what browsers' `EventSource` does by itself) continues
//! after the last index it got: no chunk is missed or sent twice.
//!
//! The Workflow DevKit's World (`clients/devkit-world`) uses these routes, plus three in its
//! own shapes: several chunks written at once (`POST …/chunks`, each `{"$bytes": base64}` or
//! text), a page of chunks as `{"$bytes"}` with whether the stream is done (`GET …/chunks`),
//! and where a stream stands (`GET …/info`). Every route stores and returns a chunk's bytes as
//! they were written, whichever wrote it. A stream of an existing run that was never written
//! reads as empty (no chunks, `tailIndex` -1, not done until closed or the run finishes); a run
//! that does not exist is a 404.

use std::convert::Infallible;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use futures::{Stream, StreamExt};
use worlds_engine::streams::StreamChunk;
use worlds_wire::{
    ChunkBody, ChunkPage, DevkitChunk, DevkitChunkPage, Live, NewChunks, PageBody, StreamTail,
    WireBytes, Written, WrittenMany,
};

use crate::error::ApiError;
use crate::openapi::ErrorDoc;
use crate::state::Api;

/// A chunk as the API shows it: text when it is UTF-8, base64 otherwise.
fn chunk_body(chunk: &StreamChunk) -> ChunkBody {
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
    let page = page(&api, &id, &name, &q).await?;
    Ok(Json(PageBody::from(page).map(|c| chunk_body(&c))))
}

/// The most chunks one page holds; a larger `limit` is lowered to it.
const MAX_CHUNK_PAGE: usize = 1_000;

/// One page of a stream's chunks, as both paged routes read it: `limit` absent or 0 is the
/// engine's default (100), above [`MAX_CHUNK_PAGE`] is lowered to it; a cursor this did not
/// give is a 400.
async fn page(
    api: &Api,
    id: &str,
    name: &str,
    q: &ChunkPage,
) -> Result<worlds_engine::model::Page<StreamChunk>, ApiError> {
    Ok(api
        .world
        .streams()
        .chunks(
            id,
            name,
            q.cursor.as_deref(),
            q.limit.unwrap_or(0).min(MAX_CHUNK_PAGE),
        )
        .await?)
}

/// A stream's chunks, paged, in the DevKit's shape (`streams.getChunks`). `limit` defaults to
/// 100 and is lowered to 1000; a stream never written reads as an empty page.
#[utoipa::path(get, path = "/v1/runs/{id}/streams/{name}/chunks", tag = "streams",
    params(("id" = String, Path, description = "A run id or workflow id"),
        ("name" = String, Path, description = "The stream's name"), ChunkPage),
    security(("api_key" = [])),
    responses((status = 200, body = DevkitChunkPage), (status = 400, body = ErrorDoc),
        (status = 404, description = "No such run", body = ErrorDoc)))]
pub(crate) async fn devkit_chunks(
    State(api): State<Api>,
    Path((id, name)): Path<(String, String)>,
    query: Result<Query<ChunkPage>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DevkitChunkPage>, ApiError> {
    let Query(q) = query?;
    // Where the stream stands is read first: once it is done no chunk can follow, so a page
    // read after it that reaches the tail has reached the end.
    let info = api.world.streams().info(&id, &name).await?;
    let page = page(&api, &id, &name, &q).await?;
    let data = page
        .data
        .iter()
        .map(|chunk| DevkitChunk {
            index: chunk.index,
            data: WireBytes {
                bytes: base64::engine::general_purpose::STANDARD.encode(&chunk.data),
            },
        })
        .collect();
    Ok(Json(DevkitChunkPage {
        data,
        cursor: page.cursor,
        has_more: page.has_more,
        done: info.done && !page.has_more,
    }))
}

/// The index of a stream's last chunk and whether it is done (`streams.getInfo`).
#[utoipa::path(get, path = "/v1/runs/{id}/streams/{name}/info", tag = "streams",
    params(("id" = String, Path, description = "A run id or workflow id"),
        ("name" = String, Path, description = "The stream's name")),
    security(("api_key" = [])),
    responses((status = 200, body = StreamTail), (status = 400, body = ErrorDoc),
        (status = 404, description = "No such run", body = ErrorDoc)))]
pub(crate) async fn info(
    State(api): State<Api>,
    Path((id, name)): Path<(String, String)>,
) -> Result<Json<StreamTail>, ApiError> {
    let info = api.world.streams().info(&id, &name).await?;
    Ok(Json(StreamTail {
        tail_index: info.tail_index,
        done: info.done,
    }))
}

/// The most chunks one multi-chunk write takes.
const MAX_CHUNKS_PER_WRITE: usize = 10_000;

/// The bytes of chunk `i` of a write: `{"$bytes": base64}` decoded, or a string's UTF-8.
fn chunk_bytes(i: usize, chunk: serde_json::Value) -> Result<axum::body::Bytes, ApiError> {
    let field = format!("chunks[{i}]");
    match chunk {
        serde_json::Value::String(text) => Ok(text.into()),
        serde_json::Value::Object(mut object) if object.len() == 1 => {
            match object.remove("$bytes") {
                Some(serde_json::Value::String(b64)) => base64::engine::general_purpose::STANDARD
                    .decode(b64.as_bytes())
                    .map(Into::into)
                    .map_err(|e| {
                        ApiError::invalid(
                            &field,
                            format!("\"$bytes\" is not standard base64 with padding: {e}"),
                        )
                    }),
                _ => Err(ApiError::invalid(
                    &field,
                    "a chunk is {\"$bytes\": \"<base64>\"} or a string",
                )),
            }
        }
        _ => Err(ApiError::invalid(
            &field,
            "a chunk is {\"$bytes\": \"<base64>\"} or a string",
        )),
    }
}

/// Appends several chunks to a run's stream in order, in one request
/// (`streams.writeMulti`). Each is stored as the same bytes a single write of them stores.
/// Every chunk is checked before any is stored: a refused request writes nothing. An empty
/// list writes nothing (201 with no indices); more than 10 000 chunks are refused (400).
#[utoipa::path(post, path = "/v1/runs/{id}/streams/{name}/chunks", tag = "streams",
    params(("id" = String, Path, description = "A run id or workflow id"),
        ("name" = String, Path, description = "The stream's name")),
    request_body = NewChunks,
    security(("api_key" = [])),
    responses((status = 201, body = WrittenMany), (status = 400, body = ErrorDoc),
        (status = 404, body = ErrorDoc),
        (status = 409, description = "The stream is closed or the run has finished", body = ErrorDoc),
        (status = 413, body = ErrorDoc)))]
pub(crate) async fn write_many(
    State(api): State<Api>,
    Path((id, name)): Path<(String, String)>,
    body: Result<Json<NewChunks>, axum::extract::rejection::JsonRejection>,
) -> Result<(axum::http::StatusCode, Json<WrittenMany>), ApiError> {
    let Json(body) = body?;
    if body.chunks.len() > MAX_CHUNKS_PER_WRITE {
        return Err(ApiError::invalid(
            "chunks",
            format!(
                "{} chunks in one write; send at most {MAX_CHUNKS_PER_WRITE} per request",
                body.chunks.len()
            ),
        ));
    }
    let chunks = body
        .chunks
        .into_iter()
        .enumerate()
        .map(|(i, chunk)| chunk_bytes(i, chunk))
        .collect::<Result<Vec<_>, _>>()?;
    let written = api.world.streams().write_many(&id, &name, chunks).await?;
    Ok((
        axum::http::StatusCode::CREATED,
        Json(WrittenMany {
            indices: written.iter().map(|c| c.index).collect(),
        }),
    ))
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
                    .json_data(chunk_body(&chunk))
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
