//! One-off writes from the CLI (`worlds runs cancel`, `worlds schedules pause …`): open the
//! world's directory as a short-lived world, do the write, close it.
//!
//! In file mode the directory may be shared, so the command simply joins it like any other
//! process. A directory held by a running hybrid world cannot be written from outside; the
//! command says so. A hybrid directory no world holds is opened in hybrid mode when it has
//! segments or writes not yet compacted (file mode would first move them all into run logs).

use std::path::Path;

use anyhow::{bail, Context};
use worlds_engine::{ErrorKind, HookSecret, Persistence, World, WorldConfig};

/// How to open the directory for writing: hybrid if a hybrid world left segments or writes
/// not yet compacted, which are its own format; file mode otherwise.
pub(crate) fn persistence_for(dir: &Path) -> Persistence {
    let wal = dir.join("state").join("wal.ndjson");
    let has_segments = std::fs::read_dir(dir.join("segments"))
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    match std::fs::metadata(&wal) {
        _ if has_segments => Persistence::Hybrid,
        Ok(meta) if meta.len() > 0 => Persistence::Hybrid,
        _ => Persistence::File,
    }
}

/// Opens the world in `dir` (not started) and runs `write` on it. `instead` finishes the
/// sentence "A world in hybrid mode owns DIR: …", saying what to do when a running hybrid world
/// holds the directory.
pub(crate) fn with_world<T>(
    dir: &Path,
    instead: &str,
    write: impl AsyncFnOnce(&World) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    crate::inspect::check_dir(dir)?;
    if !dir.join("workflows").is_dir() {
        bail!(
            "no worlds-engine data in {} (it has no workflows/ directory)",
            dir.display()
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("could not start the async runtime")?;
    runtime.block_on(async {
        let mut config = WorldConfig::default();
        config.persistence = persistence_for(dir);
        config.persistence_path = dir.to_path_buf();
        // The world is never started, so no workflow code asks for a hook token: a key of its
        // own keeps the command from creating `state/hook-key` or warning about it.
        config.hook_secret = Some(HookSecret(format!("{:032x}", rand_seed())));
        // Only `runs bulk` starts it, to drive its operation: pinned to a code version of its
        // own, it leaves every other run where it is (on a directory of one process a started
        // world would otherwise take up every unfinished run, and fail those whose workflow it
        // does not have).
        config.code_version = Some(format!("worlds-cli-{:x}", rand_seed()));
        config.pin_code_version = true;
        let world = World::new(config).map_err(|e| match e.kind() {
            ErrorKind::Unavailable => anyhow::anyhow!(
                "{e}\n\nA world in hybrid mode owns {}: {instead}",
                dir.display()
            ),
            _ => anyhow::Error::new(e).context(format!("could not open {}", dir.display())),
        })?;
        write(&world).await
    })
}

/// A value that differs between runs of the command; the key it makes derives no token anyone
/// holds.
fn rand_seed() -> u128 {
    use std::hash::{BuildHasher, RandomState};
    let state = RandomState::new();
    (u128::from(state.hash_one(std::process::id())) << 64) | u128::from(state.hash_one(1u8))
}
