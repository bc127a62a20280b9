//! History fixtures: a run's events kept in a file, so that a unit test can replay an old
//! history against today's code (`replay_history`) long after the run itself is gone.
//!
//! A fixture is one event per line, in the events' JSON form (the form the store and the HTTP
//! API use). Write one from a run with [`write_history_fixture`] — in a test, or from a
//! program next to a world whose run is worth keeping — and commit it with the tests.
//!
//! ```
//! use worlds_engine::prelude::*;
//! use worlds_engine::testing::{replay_history, write_history_fixture, TestWorld};
//! use worlds_engine::HistoryVerdict;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
//!     ctx.sleep("1h").await?;
//!     Ok::<_, WorkflowError>(())
//! });
//! let test = TestWorld::new().await;
//! test.register(&nap).unwrap();
//! let run = test.execute(&nap, (), WorkflowOptions::default()).await.unwrap();
//! test.run_until_complete(&run.id, "2h").await.unwrap();
//!
//! let dir = tempfile::tempdir().unwrap();
//! let fixture = dir.path().join("nap.jsonl");
//! write_history_fixture(&test, &run.id, &fixture).await.unwrap();
//! // Later, with the code of the day registered:
//! assert_eq!(replay_history(&test, &fixture).unwrap(), HistoryVerdict::Clean);
//! # });
//! ```

use std::io::Write as _;
use std::path::Path;

use crate::error::WorldError;
use crate::model::Event;
use crate::world::{HistoryVerdict, World};

/// Writes the history of run `run_id` (by run id or workflow id) to `path` as a fixture.
pub async fn write_history_fixture(
    world: &World,
    run_id: &str,
    path: impl AsRef<Path>,
) -> Result<(), WorldError> {
    let path = path.as_ref();
    let state = world.query(run_id).await?;
    let mut text = Vec::new();
    for event in &state.history {
        serde_json::to_writer(&mut text, event)
            .map_err(|e| WorldError::serde("an event of the fixture", e))?;
        text.write_all(b"\n").map_err(|e| io(path, e))?;
    }
    std::fs::write(path, text).map_err(|e| io(path, e))
}

/// Reads a fixture written by [`write_history_fixture`]: its events, in order.
pub fn read_history_fixture(path: impl AsRef<Path>) -> Result<Vec<Event>, WorldError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|e| {
                WorldError::invalid(
                    "history fixture",
                    format!(
                        "{} line {}: not an event ({e}); a fixture holds one event per line",
                        path.display(),
                        i + 1
                    ),
                )
            })
        })
        .collect()
}

/// Replays the history in the fixture at `path` against the workflows registered in `world`,
/// without running anything: [`HistoryVerdict::Clean`] if today's code issues what the
/// history holds. See [`World::verify_history`].
pub fn replay_history(world: &World, path: impl AsRef<Path>) -> Result<HistoryVerdict, WorldError> {
    world.verify_history(&read_history_fixture(path)?)
}

fn io(path: &Path, e: std::io::Error) -> WorldError {
    WorldError::invalid("history fixture", format!("{}: {e}", path.display()))
}
