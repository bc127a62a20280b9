//! Shared helpers for the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod store_events;
pub mod wrapped_store;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use worlds_engine::prelude::*;
use worlds_engine::testing::TestWorld;
use worlds_engine::WorkflowState;

/// Which way a test world keeps runs between tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Runs stay live in memory between their tasks.
    Cached,
    /// Every run is evicted after every task and resumes by replay: every await is a replay.
    Evicting,
}

/// A started test world in the given mode. Failed workflows just fail (the `ignore`
/// strategy), so each test sees one attempt; the strategies have tests of their own.
pub async fn test_world(mode: Mode) -> TestWorld {
    test_world_with(mode, memory_config()).await
}

/// The in-memory config the tests start from: the defaults, but failed workflows just fail.
pub fn memory_config() -> WorldConfig {
    let mut config = WorldConfig::memory();
    config.failure_strategy = FailureStrategy::Ignore;
    config
}

/// A started test world in the given mode, with a config.
pub async fn test_world_with(mode: Mode, mut config: WorldConfig) -> TestWorld {
    config.evict_after_every_task = mode == Mode::Evicting;
    TestWorld::with_config(config).await
}

/// Generates one test per mode from `async fn name(mode: Mode)`.
#[macro_export]
macro_rules! in_both_modes {
    ($($name:ident),* $(,)?) => {
        mod cached {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($crate::common::Mode::Cached).await;
                }
            )*
        }
        mod evicting {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($crate::common::Mode::Evicting).await;
                }
            )*
        }
    };
}

/// A counter shared with an activity, to prove how often it ran.
#[derive(Clone, Default)]
pub struct Counter(Arc<AtomicUsize>);

impl Counter {
    pub fn bump(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// An activity `name` that returns its input + 1 and counts its calls.
pub fn add_one(name: &str, calls: &Counter) -> Activity<u64, u64> {
    let calls = calls.clone();
    activity(name, move |_ctx: ActivityContext, n: u64| {
        let calls = calls.clone();
        async move {
            calls.bump();
            Ok::<_, StepError>(n + 1)
        }
    })
}

/// The event type names of a run's history, in order.
pub fn event_types(state: &WorkflowState) -> Vec<&'static str> {
    state.history.iter().map(|e| e.kind.type_name()).collect()
}

/// Copies a store directory as it is on disk right now: what a `kill -9` would leave behind.
pub fn crash_copy(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let to = dst.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            crash_copy(&entry.path(), &to);
        } else {
            std::fs::copy(entry.path(), to).unwrap();
        }
    }
}

/// The workflow of `fixtures/histories/fixture_order_v1.json`: reserve, sleep an hour, charge.
pub fn order_flow(reserve: &Activity<u64, u64>, charge: &Activity<u64, u64>) -> Workflow<u64, u64> {
    let (reserve, charge) = (reserve.clone(), charge.clone());
    workflow("fixture-order", move |ctx: WorkflowContext, n: u64| {
        let (reserve, charge) = (reserve.clone(), charge.clone());
        async move {
            let reserved = ctx.run(&reserve, n).await?;
            ctx.sleep("1h").await?;
            let charged = ctx.run(&charge, reserved).await?;
            Ok::<_, WorkflowError>(charged)
        }
    })
}
