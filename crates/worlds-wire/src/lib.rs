//! The bodies of the worlds-engine HTTP API, written once: what a caller sends (a start, a
//! cancel, a hook's payload, query parameters) and what the server answers (a started run, an
//! outcome, a page, a refusal).
//!
//! `worlds-server` reads the requests and writes the answers with these types, and
//! `worlds-client` writes the requests and reads the answers with the same ones, so the two
//! cannot drift apart. The engine's own records (a run's state, an event, a schedule) travel
//! inside them as the engine serializes them.
//!
//! With the `openapi` feature every body also derives `utoipa::ToSchema` (query parameters
//! `utoipa::IntoParams`), and the server's OpenAPI document is built from them field by field;
//! its `openapi` module holds the named schemas of the engine records the bodies carry.

#![forbid(unsafe_code)]

mod error;
mod hooks;
mod keys;
mod page;
mod runs;
mod schedules;
mod streams;
mod workers;

#[cfg(feature = "openapi")]
pub mod openapi;

pub use error::ErrorBody;
pub use hooks::{Resume, Resumed};
pub use keys::{CreatedKey, NewKey};
pub use page::{PageBody, PageParams};
pub use runs::{
    Bulk, Cancel, Outcome, Prune, Reopen, Reset, Resolve, RunFilter, StartRun, Started, Wait,
};
pub use schedules::NewSchedule;
pub use streams::{
    ChunkBody, ChunkPage, DevkitChunk, DevkitChunkPage, Live, NewChunks, StreamTail, WireBytes,
    Written, WrittenMany,
};
pub use workers::Workers;
