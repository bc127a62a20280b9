//! Verifying a deploy: the histories of runs in flight replayed against the code registered
//! now, without running anything; and old histories kept as fixtures, replayed in unit tests.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{add_one, Counter};
use worlds_engine::prelude::*;
use worlds_engine::testing::{replay_history, write_history_fixture, TestWorld};
use worlds_engine::{HistoryVerdict, VerifyOptions};

struct Setup {
    t: TestWorld,
    flow: Workflow<u64, u64>,
    changed: Arc<AtomicBool>,
    calls: Counter,
}

/// `a; sleep 1h; b (or, once changed, c); sleep 1h; a` — the change is not patched.
async fn setup() -> Setup {
    let calls = Counter::default();
    let (a, b, c) = (
        add_one("a", &calls),
        add_one("b", &calls),
        add_one("c", &calls),
    );
    let changed = Arc::new(AtomicBool::new(false));
    let (code, sa, sb, sc) = (changed.clone(), a.clone(), b.clone(), c.clone());
    let flow = workflow("verified", move |ctx: WorkflowContext, n: u64| {
        let (code, a, b, c) = (code.clone(), sa.clone(), sb.clone(), sc.clone());
        async move {
            let x = ctx.run(&a, n).await?;
            ctx.sleep("1h").await?;
            let middle = if code.load(Ordering::SeqCst) { &c } else { &b };
            let y = ctx.run(middle, x).await?;
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(ctx.run(&a, y).await?)
        }
    });
    let t = TestWorld::new().await;
    for step in [&a, &b, &c] {
        t.register(step).unwrap();
    }
    t.register(&flow).unwrap();
    Setup {
        t,
        flow,
        changed,
        calls,
    }
}

async fn start(s: &Setup, count: u64) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 0..count {
        let run =
            s.t.execute(&s.flow, n, WorkflowOptions::default())
                .await
                .unwrap();
        ids.push(run.id);
    }
    s.t.settle().await;
    ids
}

#[tokio::test]
async fn verify_names_exactly_the_runs_a_change_would_break_and_runs_nothing() {
    let s = setup().await;
    // Three runs went past the changed step, four have not reached it.
    let mut past = start(&s, 3).await;
    s.t.advance("1h").await;
    s.t.settle().await;
    let before = start(&s, 4).await;
    let clean = s.t.verify(VerifyOptions::default()).await.unwrap();
    assert!(clean.is_clean(), "{clean}");
    assert_eq!(clean.workflows["verified"].clean, 7);

    s.changed.store(true, Ordering::SeqCst);
    let calls = s.calls.get();
    let mut events = Vec::new();
    for id in past.iter().chain(&before) {
        events.push(s.t.query(id).await.unwrap().history.len());
    }
    let report = s.t.verify(VerifyOptions::default()).await.unwrap();
    assert!(!report.is_clean());
    let verified = &report.workflows["verified"];
    assert_eq!(verified.clean, before.len(), "{report}");
    let mut diverged: Vec<String> = verified.diverged.iter().map(|d| d.run_id.clone()).collect();
    diverged.sort();
    past.sort();
    assert_eq!(diverged, past, "exactly the runs past the change: {report}");
    for d in &verified.diverged {
        assert_eq!(d.position, 2, "a, the sleep, then the changed step");
        assert_eq!(
            (d.recorded.as_str(), d.issued.as_str()),
            ("step 'b'", "step 'c'")
        );
    }
    let text = report.to_string();
    assert!(
        text.contains("verified: 4 clean, 3 diverged") && text.contains("breaks the runs above"),
        "{text}"
    );

    // Nothing ran and nothing was recorded.
    assert_eq!(s.calls.get(), calls);
    for (id, before) in past.iter().chain(&before).zip(&events) {
        assert_eq!(s.t.query(id).await.unwrap().history.len(), *before);
    }

    // A sample replays fewer runs, spread over them.
    let sampled =
        s.t.verify(VerifyOptions {
            sample: Some(3),
            ..VerifyOptions::default()
        })
        .await
        .unwrap();
    assert_eq!(sampled.runs(), 3, "{sampled}");
}

#[tokio::test]
async fn a_history_kept_as_a_fixture_replays_against_later_code() {
    let s = setup().await;
    let run = start(&s, 1).await.remove(0);
    s.t.run_until_complete(&run, "3h").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fixture = dir.path().join("verified.jsonl");
    write_history_fixture(&s.t, &run, &fixture).await.unwrap();
    assert_eq!(
        replay_history(&s.t, &fixture).unwrap(),
        HistoryVerdict::Clean
    );

    s.changed.store(true, Ordering::SeqCst);
    assert_eq!(
        replay_history(&s.t, &fixture).unwrap(),
        HistoryVerdict::Diverged {
            position: 2,
            recorded: "step 'b'".into(),
            issued: "step 'c'".into(),
        }
    );

    // A world without the workflow says so; a broken file is a clear error.
    let empty = TestWorld::new().await;
    assert_eq!(
        replay_history(&empty, &fixture).unwrap(),
        HistoryVerdict::NotRegistered {
            name: "verified".into()
        }
    );
    std::fs::write(&fixture, "{\"not\": \"an event\"}\n").unwrap();
    let error = replay_history(&s.t, &fixture).unwrap_err().to_string();
    assert!(
        error.contains("line 1") && error.contains("not an event"),
        "{error}"
    );
}

/// `cli::run` (what `my-service verify` answers): exit status 0 while the code replays every
/// run, 1 once a change breaks some, with the report; 2 for bad arguments.
#[tokio::test]
async fn the_verify_command_gates_a_deploy_by_its_exit_status() {
    let s = setup().await;
    start(&s, 2).await;
    s.t.advance("1h").await;
    s.t.settle().await;
    let args = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
    let run = |list: Vec<String>| {
        let world: &World = &s.t;
        async move {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let status = worlds_engine::cli::run(world, &list, &mut out, &mut err).await;
            (
                status,
                String::from_utf8(out).unwrap(),
                String::from_utf8(err).unwrap(),
            )
        }
    };
    let (status, out, _) = run(args(&["verify"])).await;
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("2 run(s) replay cleanly"), "{out}");

    s.changed.store(true, Ordering::SeqCst);
    let (status, out, _) = run(args(&["verify"])).await;
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("verified: 0 clean, 2 diverged"), "{out}");
    let (status, json, _) = run(args(&["verify", "--json"])).await;
    assert_eq!(status, 1);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        report["workflows"]["verified"]["diverged"][0]["issued"],
        "step 'c'"
    );

    let (status, _, err) = run(args(&["verify", "--sample"])).await;
    assert_eq!(status, 2);
    assert!(
        err.contains("--sample needs") && err.contains("usage:"),
        "{err}"
    );
}
