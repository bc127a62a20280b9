//! Patching: workflow code changed on purpose while runs are in flight.
//!
//! A shared counter plays the deployed code version. Every run is evicted after every task,
//! so each wake-up replays its history against the code deployed *now*, as after a deploy.
//! Runs are parked at two points (before and after the patched call) when the new code goes
//! out; old runs that got past the point finish on the old branch, the others and new runs
//! take the new one; then the patch is deprecated and finally removed, and runs still go on.

mod common;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use common::{add_one, event_types, memory_config, Counter};
use worlds_engine::prelude::*;
use worlds_engine::store::{HybridStore, Store};
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{RunStatus, WorkflowState};

/// The deployed code: 1 without the patch, 2 with `patched`, 3 with `deprecate_patch`, 4
/// without either (the new branch only).
#[derive(Clone, Default)]
struct Deployed(Arc<AtomicU8>);

impl Deployed {
    fn get(&self) -> u8 {
        self.0.load(Ordering::SeqCst).max(1)
    }

    fn deploy(&self, version: u8) {
        self.0.store(version, Ordering::SeqCst);
    }
}

struct Setup {
    t: TestWorld,
    flow: Workflow<u64, u64>,
    deployed: Deployed,
    old: Counter,
    new: Counter,
    _dir: Option<tempfile::TempDir>,
}

/// `a; sleep 1h; <old "b" or new "c">; sleep 1h; d`, the middle step chosen as `deployed`
/// says.
async fn setup(hybrid: bool) -> Setup {
    let deployed = Deployed::default();
    let (calls_a, old, new, calls_d) = (
        Counter::default(),
        Counter::default(),
        Counter::default(),
        Counter::default(),
    );
    let (a, b, c, d) = (
        add_one("a", &calls_a),
        add_one("b", &old),
        add_one("c", &new),
        add_one("d", &calls_d),
    );
    let code = deployed.clone();
    let (sa, sb, sc, sd) = (a.clone(), b.clone(), c.clone(), d.clone());
    let flow = workflow("patched-flow", move |ctx: WorkflowContext, n: u64| {
        let (a, b, c, d, code) = (sa.clone(), sb.clone(), sc.clone(), sd.clone(), code.clone());
        async move {
            let x = ctx.run(&a, n).await?;
            ctx.sleep("1h").await?;
            let new_branch = match code.get() {
                1 => false,
                2 => ctx.patched("use-c"),
                3 => {
                    ctx.deprecate_patch("use-c");
                    true
                }
                _ => true,
            };
            let y = if new_branch {
                ctx.run(&c, x).await? + 100
            } else {
                ctx.run(&b, x).await?
            };
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(ctx.run(&d, y).await?)
        }
    });
    let mut config = memory_config();
    config.evict_after_every_task = true;
    let (store, dir): (Option<Arc<dyn Store>>, _) = if hybrid {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(HybridStore::open(dir.path()).unwrap());
        (Some(store), Some(dir))
    } else {
        (None, None)
    };
    let t = TestWorld::with_options(TestWorldOptions {
        config,
        store,
        ..TestWorldOptions::default()
    })
    .await;
    for step in [&a, &b, &c, &d] {
        t.register(step).unwrap();
    }
    t.register(&flow).unwrap();
    Setup {
        t,
        flow,
        deployed,
        old,
        new,
        _dir: dir,
    }
}

async fn start(s: &Setup, count: u64) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 0..count {
        let run =
            s.t.execute(&s.flow, n * 1_000, WorkflowOptions::default())
                .await
                .unwrap();
        ids.push(run.id);
    }
    s.t.settle().await;
    ids
}

async fn states(s: &Setup, ids: &[String]) -> Vec<WorkflowState> {
    let mut states = Vec::new();
    for id in ids {
        states.push(s.t.query(id).await.unwrap());
    }
    states
}

fn took(state: &WorkflowState, step: &str) -> bool {
    state.activities.iter().any(|a| a.name == step)
}

fn marked(state: &WorkflowState) -> bool {
    event_types(state).contains(&"patch_recorded")
}

async fn parked_runs_finish_on_their_own_branch(hybrid: bool) {
    let s = setup(hybrid).await;
    // 50 runs get past the patch point on the old code (they ran "b" and sleep again); 50
    // more are parked before it.
    let past = start(&s, 50).await;
    s.t.advance("1h").await;
    s.t.settle().await;
    let before = start(&s, 50).await;
    for state in states(&s, &past).await {
        assert!(took(&state, "b") && !took(&state, "c"), "{state:?}");
    }
    assert_eq!(s.old.get(), 50);

    s.deployed.deploy(2);
    let fresh = start(&s, 10).await;
    s.t.advance("3h").await;
    s.t.settle().await;
    for state in states(&s, &past).await {
        assert_eq!(state.status, RunStatus::Completed, "{state:?}");
        assert!(
            !took(&state, "c") && !marked(&state),
            "went past the point on old code: stays on it"
        );
    }
    for state in states(&s, &before)
        .await
        .iter()
        .chain(&states(&s, &fresh).await)
    {
        assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
        assert!(took(state, "c") && !took(state, "b"), "the new branch");
        assert!(marked(state), "the marker is recorded");
    }
    assert_eq!((s.old.get(), s.new.get()), (50, 60), "no step ran twice");

    // Deprecated: runs that recorded the marker replay; then removed: the marker is passed.
    let marked_runs = start(&s, 10).await;
    s.t.advance("1h").await;
    s.t.settle().await;
    s.deployed.deploy(3);
    let deprecated = start(&s, 10).await;
    s.t.advance("1h").await;
    s.t.settle().await;
    s.deployed.deploy(4);
    let removed = start(&s, 10).await;
    s.t.advance("3h").await;
    s.t.settle().await;
    for (group, runs) in [
        ("marked under patched", &marked_runs),
        ("marked under deprecate_patch", &deprecated),
        ("after removal", &removed),
    ] {
        for state in states(&s, runs).await {
            assert_eq!(
                state.status,
                RunStatus::Completed,
                "{group}: {:?}",
                state.error
            );
            assert!(took(&state, "c") && !took(&state, "b"), "{group}");
            assert_eq!(
                marked(&state),
                group != "after removal",
                "{group}: a marker only where the code asked"
            );
        }
    }
    assert_eq!((s.old.get(), s.new.get()), (50, 90));
}

#[tokio::test]
async fn parked_runs_finish_on_their_own_branch_in_memory() {
    parked_runs_finish_on_their_own_branch(false).await;
}

#[tokio::test]
async fn parked_runs_finish_on_their_own_branch_on_hybrid_storage() {
    parked_runs_finish_on_their_own_branch(true).await;
}

/// A run that went past the point on old code fails loudly under `deprecate_patch`: that
/// code says no old run is left, and this one is.
#[tokio::test]
async fn deprecating_while_an_old_run_is_past_the_point_is_nondeterminism() {
    let s = setup(false).await;
    let past = start(&s, 1).await;
    s.t.advance("1h").await;
    s.t.settle().await;
    s.deployed.deploy(3);
    s.t.advance("2h").await;
    s.t.settle().await;
    let state = s.t.query(&past[0]).await.unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    let error = state.error.unwrap();
    assert_eq!(error.code.as_deref(), Some("NONDETERMINISM"), "{error}");
    assert!(
        error.message.contains("'b'") && error.message.contains("'c'"),
        "{error}"
    );
}

/// `current::patched` for workflows written without a context parameter.
#[tokio::test]
async fn patched_is_reachable_without_a_context() {
    let flow = workflow("ambient-patch", |_ctx: WorkflowContext, _: ()| async move {
        let first = worlds_engine::current::patched("p1")?;
        worlds_engine::current::deprecate_patch("p2")?;
        Ok::<_, WorkflowError>(first)
    });
    let t = TestWorld::new().await;
    t.register(&flow).unwrap();
    let run = t
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert!(run.result().await.unwrap());
    assert_eq!(
        event_types(&state)
            .iter()
            .filter(|t| **t == "patch_recorded")
            .count(),
        2
    );
    assert!(worlds_engine::current::patched("outside").is_err());
}
