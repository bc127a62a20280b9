//! Recovering failed runs by hand: retry from the failed part, reset to a position, resume a
//! quarantined run after its code was fixed — counted by side effects, on memory and hybrid
//! storage, with runs evicted after every task (every wake-up replays) and cached.

mod common;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use common::{add_one, event_types, memory_config, Counter, Mode};
use worlds_engine::error::ErrorKind;
use worlds_engine::model::{ReopenAction, ReopenRequest};
use worlds_engine::prelude::*;
use worlds_engine::store::{HybridStore, Store};
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{EventKind, RunStatus, WorkflowState};

/// The deployed code, as a number the workflow reads on every replay.
#[derive(Clone, Default)]
struct Deployed(Arc<AtomicU8>);

impl Deployed {
    fn get(&self) -> u8 {
        self.0.load(Ordering::SeqCst)
    }

    fn deploy(&self, version: u8) {
        self.0.store(version, Ordering::SeqCst);
    }
}

/// A step that fails for good (no retry) while `broken` is set, else returns its input + 1.
/// Every call is counted.
fn flaky(name: &str, broken: &Deployed, calls: &Counter) -> Activity<u64, u64> {
    let (broken, calls) = (broken.clone(), calls.clone());
    activity(name, move |_ctx: ActivityContext, n: u64| {
        let (broken, calls) = (broken.clone(), calls.clone());
        async move {
            calls.bump();
            if broken.get() == 1 {
                return Err(StepError::fatal("the payment API refused the key"));
            }
            Ok::<_, StepError>(n + 1)
        }
    })
}

struct Setup {
    t: TestWorld,
    flow: Workflow<u64, u64>,
    /// 1: step "b" fails. Code: 0 and 1 run a, b, c; 2 runs a, x (a different step in b's
    /// place), c; 3 is 2 with `patched`, so old runs keep b.
    code: Deployed,
    broken: Deployed,
    a: Counter,
    b: Counter,
    c: Counter,
    x: Counter,
    _dir: Option<tempfile::TempDir>,
}

/// `a; b (or x); sleep 1h; c`.
async fn setup(mode: Mode, hybrid: bool) -> Setup {
    let (code, broken) = (Deployed::default(), Deployed::default());
    let (a, b, c, x) = (
        Counter::default(),
        Counter::default(),
        Counter::default(),
        Counter::default(),
    );
    let (sa, sb, sc, sx) = (
        add_one("a", &a),
        flaky("b", &broken, &b),
        add_one("c", &c),
        add_one("x", &x),
    );
    let deployed = code.clone();
    let (fa, fb, fc, fx) = (sa.clone(), sb.clone(), sc.clone(), sx.clone());
    let flow = workflow("order", move |ctx: WorkflowContext, n: u64| {
        let (a, b, c, x, code) = (
            fa.clone(),
            fb.clone(),
            fc.clone(),
            fx.clone(),
            deployed.clone(),
        );
        async move {
            let reserved = ctx.run(&a, n).await?;
            let use_x = match code.get() {
                2 => true,
                3 => ctx.patched("x-instead-of-b"),
                _ => false,
            };
            let charged = if use_x {
                ctx.run(&x, reserved).await?
            } else {
                ctx.run(&b, reserved).await?
            };
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(ctx.run(&c, charged).await?)
        }
    });
    let mut config = memory_config();
    config.evict_after_every_task = mode == Mode::Evicting;
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
    for step in [&sa, &sb, &sc, &sx] {
        t.register(step).unwrap();
    }
    t.register(&flow).unwrap();
    Setup {
        t,
        flow,
        code,
        broken,
        a,
        b,
        c,
        x,
        _dir: dir,
    }
}

impl Setup {
    async fn start(&self, count: u64) -> Vec<String> {
        let mut ids = Vec::new();
        for n in 0..count {
            let run = self
                .t
                .execute(&self.flow, n * 10, WorkflowOptions::default())
                .await
                .unwrap();
            ids.push(run.id);
        }
        self.t.settle().await;
        ids
    }

    async fn state(&self, id: &str) -> WorkflowState {
        self.t.query(id).await.unwrap()
    }

    fn counts(&self) -> (usize, usize, usize, usize) {
        (self.a.get(), self.b.get(), self.c.get(), self.x.get())
    }
}

fn reopenings(state: &WorkflowState) -> Vec<EventKind> {
    state
        .history
        .iter()
        .filter(|e| matches!(e.kind, EventKind::RunReopened { .. }))
        .map(|e| e.kind.clone())
        .collect()
}

async fn retry_runs_only_the_failed_part(mode: Mode, hybrid: bool) {
    let s = setup(mode, hybrid).await;
    s.broken.deploy(1);
    let ids = s.start(5).await;
    for id in &ids {
        let state = s.state(id).await;
        assert_eq!(state.status, RunStatus::Failed, "{state:?}");
    }
    assert_eq!(s.counts(), (5, 5, 0, 0));

    // The key is fixed; each run goes on from its failed step, the reservation kept.
    s.broken.deploy(0);
    for id in &ids {
        let reopened =
            s.t.reopen(
                id,
                ReopenRequest::retry()
                    .by("alice")
                    .reason("rotated the payment key"),
            )
            .await
            .unwrap();
        assert_eq!(reopened.action, ReopenAction::Retry);
        assert_eq!(reopened.attempt, 2);
        assert_eq!(reopened.kept_until, 1, "a is kept, b runs again");
        assert!(!reopened.already);
    }
    s.t.settle().await;
    assert_eq!(s.counts(), (5, 10, 0, 0));
    s.t.advance("1h").await;
    s.t.settle().await;
    for (n, id) in ids.iter().enumerate() {
        let state = s.state(id).await;
        assert_eq!(state.status, RunStatus::Completed, "{:#?}", state.history);
        let output: u64 = state.output.clone().unwrap().decode().unwrap();
        assert_eq!(output, n as u64 * 10 + 3);
        assert!(state.error.is_none() && state.quarantine.is_none());
        match reopenings(&state).as_slice() {
            [EventKind::RunReopened {
                action: ReopenAction::Retry,
                by: Some(by),
                reason: Some(reason),
                kept_from: 0,
                kept_until: 1,
                ..
            }] => assert_eq!(
                (by.as_str(), reason.as_str()),
                ("alice", "rotated the payment key")
            ),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        s.counts(),
        (5, 10, 5, 0),
        "a ran once per run, b once more, c once: nothing kept ran again"
    );

    // A completed run cannot be reopened.
    let refused =
        s.t.reopen(&ids[0], ReopenRequest::retry())
            .await
            .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Conflict, "{refused}");
    assert!(refused.to_string().contains("is completed"), "{refused}");
}

async fn reset_runs_again_from_a_position(mode: Mode, hybrid: bool) {
    let s = setup(mode, hybrid).await;
    s.broken.deploy(1);
    let ids = s.start(2).await;
    assert_eq!(s.counts(), (2, 2, 0, 0));
    s.broken.deploy(0);

    // Out of range: a clear refusal that changes nothing.
    let refused =
        s.t.reopen(&ids[0], ReopenRequest::reset(9))
            .await
            .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::InvalidInput, "{refused}");
    assert!(
        refused.to_string().contains("holds commands #0 to #1"),
        "{refused}"
    );
    assert_eq!(s.state(&ids[0]).await.status, RunStatus::Failed);

    // From #0: the whole workflow again. From #1: b again, a kept.
    let whole =
        s.t.reopen(&ids[0], ReopenRequest::reset(0).by("bob"))
            .await
            .unwrap();
    assert_eq!((whole.action, whole.kept_until), (ReopenAction::Reset, 0));
    s.t.reopen(&ids[1], ReopenRequest::reset(1)).await.unwrap();
    s.t.settle().await;
    assert_eq!(s.counts(), (3, 4, 0, 0), "only run 0 ran a again");
    s.t.advance("1h").await;
    s.t.settle().await;
    for id in &ids {
        let state = s.state(id).await;
        assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    }
    assert_eq!(s.counts(), (3, 4, 2, 0));

    // Reopened twice: a reopened attempt carries what it was carried.
    s.broken.deploy(1);
    let again = s.start(1).await;
    s.t.reopen(&again[0], ReopenRequest::retry()).await.unwrap();
    s.t.settle().await;
    assert_eq!(s.state(&again[0]).await.status, RunStatus::Failed);
    assert_eq!(s.counts(), (4, 6, 2, 0));
    s.broken.deploy(0);
    let second = s.t.reopen(&again[0], ReopenRequest::retry()).await.unwrap();
    assert_eq!(second.attempt, 3);
    s.t.advance("1h").await;
    s.t.settle().await;
    let state = s.state(&again[0]).await;
    assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
    assert_eq!(s.counts(), (4, 7, 3, 0), "a kept through two reopenings");
    assert_eq!(reopenings(&state).len(), 2);
}

async fn resume_continues_a_quarantined_run_once_fixed(mode: Mode, hybrid: bool) {
    let s = setup(mode, hybrid).await;
    let ids = s.start(3).await;
    // Deployed without `patched`: the parked runs diverge when they wake.
    s.code.deploy(2);
    s.t.advance("1h").await;
    s.t.settle().await;
    for id in &ids {
        let state = s.state(id).await;
        assert_eq!(state.status, RunStatus::Failed);
        assert!(state.quarantine.is_some(), "{state:?}");
    }
    // A retry is not a resume, and resuming under the still broken code is refused.
    let refused =
        s.t.reopen(&ids[0], ReopenRequest::resume())
            .await
            .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Conflict);
    assert!(
        refused.to_string().contains(
            "would diverge again: at command #1 the kept history holds step 'b' but the code now issues step 'x'"
        ),
        "{refused}"
    );
    let state = s.state(&ids[0]).await;
    assert!(state.quarantine.is_some() && reopenings(&state).is_empty());

    // The fix: `patched`. Old runs keep b, and nothing they did runs again.
    s.code.deploy(3);
    for id in &ids {
        s.t.reopen(id, ReopenRequest::resume().by("carol"))
            .await
            .unwrap();
    }
    s.t.settle().await;
    for id in &ids {
        let state = s.state(id).await;
        assert_eq!(state.status, RunStatus::Completed, "{:?}", state.error);
        assert!(state.quarantine.is_none());
        assert!(!event_types(&state).contains(&"patch_recorded"));
    }
    assert_eq!(s.counts(), (3, 3, 3, 0));
    // A plain failed run is not quarantined: resume says to retry.
    s.broken.deploy(1);
    s.code.deploy(0);
    let failed = s.start(1).await;
    let refused =
        s.t.reopen(&failed[0], ReopenRequest::resume())
            .await
            .unwrap_err();
    assert!(
        refused.to_string().contains("is not quarantined"),
        "{refused}"
    );
}

async fn a_bulk_operation_reopens_a_run_once(mode: Mode, hybrid: bool) {
    let s = setup(mode, hybrid).await;
    s.broken.deploy(1);
    let ids = s.start(1).await;
    s.broken.deploy(0);
    let first =
        s.t.reopen(&ids[0], ReopenRequest::retry().operation("bulk_1"))
            .await
            .unwrap();
    assert!(!first.already);
    s.t.advance("1h").await;
    s.t.settle().await;
    let again =
        s.t.reopen(&ids[0], ReopenRequest::retry().operation("bulk_1"))
            .await
            .unwrap();
    assert!(again.already, "the same operation does not reopen it twice");
    let state = s.state(&ids[0]).await;
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(reopenings(&state).len(), 1);
    assert_eq!(s.counts(), (1, 2, 1, 0));
}

macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod memory {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(Mode::Evicting, false).await;
                }
            )*
        }
        mod memory_cached {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(Mode::Cached, false).await;
                }
            )*
        }
        mod hybrid {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(Mode::Evicting, true).await;
                }
            )*
        }
    };
}

on_every_store!(
    retry_runs_only_the_failed_part,
    reset_runs_again_from_a_position,
    resume_continues_a_quarantined_run_once_fixed,
    a_bulk_operation_reopens_a_run_once,
);

/// What cannot be reopened, each with a clear refusal.
#[tokio::test]
async fn refusals_say_what_to_do_instead() {
    let undone = Counter::default();
    let undo = add_one("undo", &undone);
    let u = undo.clone();
    let saga = workflow("saga", move |ctx: WorkflowContext, _: ()| {
        let u = u.clone();
        async move {
            ctx.add_compensation_step(&u, 1);
            Err::<(), _>(WorkflowError::msg("out of stock"))
        }
    })
    .with_options(WorkflowOptions::new().failure_strategy(FailureStrategy::Compensate));
    let child = workflow("child", |_ctx: WorkflowContext, _: ()| async move {
        Err::<(), _>(WorkflowError::msg("child broke"))
    });
    let c = child.clone();
    let parent = workflow("parent", move |ctx: WorkflowContext, _: ()| {
        let c = c.clone();
        async move {
            let _ = ctx.execute_child(&c, (), WorkflowOptions::default()).await;
            Ok::<_, WorkflowError>(())
        }
    });
    let t = TestWorld::with_config(memory_config()).await;
    t.register(&undo).unwrap();
    t.register(&saga).unwrap();
    t.register(&child).unwrap();
    t.register(&parent).unwrap();
    let compensated = t
        .execute(&saga, (), WorkflowOptions::default())
        .await
        .unwrap();
    let parent_run = t
        .execute(&parent, (), WorkflowOptions::default())
        .await
        .unwrap();
    t.settle().await;
    let state = t.query(&compensated.id).await.unwrap();
    assert_eq!(state.status, RunStatus::Compensated);
    let refused = t
        .reopen(&compensated.id, ReopenRequest::retry())
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("compensations ran"),
        "{refused}"
    );

    let parent_state = t.query(&parent_run.id).await.unwrap();
    let child_id = &parent_state.children[0];
    let refused = t
        .reopen(child_id, ReopenRequest::retry())
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains(&format!("child of run {}", parent_run.id)),
        "{refused}"
    );
    let missing = t
        .reopen("wrun_nope", ReopenRequest::retry())
        .await
        .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
}
