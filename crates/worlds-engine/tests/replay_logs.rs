//! Workflow code runs again from the top when a run is replayed; `ctx.info` and friends log
//! each line once anyway, and `ctx.is_replaying` says when the code is catching up.

mod common;

use common::{add_one, test_world_with, Counter, Mode};
use worlds_engine::prelude::*;
use worlds_engine::telemetry::logs::{LogCategory, LogLevel, LogQuery, LogsConfig};

async fn logs_each_line_once(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::memory_config();
    config.logs = LogsConfig::default().level(LogLevel::Debug).dir(dir.path());
    let t = test_world_with(mode, config).await;
    let calls = Counter::default();
    let step = add_one("add-one", &calls);
    let (bodies, live) = (Counter::default(), Counter::default());
    let flow = {
        let (step, bodies, live) = (step.clone(), bodies.clone(), live.clone());
        workflow("chatty", move |ctx: WorkflowContext, n: u64| {
            let (step, bodies, live) = (step.clone(), bodies.clone(), live.clone());
            async move {
                bodies.bump();
                if !ctx.is_replaying() {
                    live.bump();
                }
                ctx.info(format!("before, with {n}"));
                let a = ctx.run(&step, n).await?;
                ctx.warn(format!("between, with {a}"));
                let b = ctx.run(&step, a).await?;
                ctx.log(LogLevel::Debug, "after");
                Ok::<_, WorkflowError>(b)
            }
        })
    };
    t.register(&step).unwrap().register(&flow).unwrap();
    let run = t.execute(&flow, 1, WorkflowOptions::new()).await.unwrap();
    let state = t.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(state.output.unwrap().decode::<u64>().unwrap(), 3);
    if mode == Mode::Evicting {
        assert!(bodies.get() > 1, "the evicting world replays the workflow");
    }
    assert_eq!(live.get(), 1, "the top of the code runs live once");

    t.logs().flush().unwrap();
    let entries = t
        .logs()
        .query(LogQuery::new().category(LogCategory::Workflow))
        .await
        .unwrap();
    let lines: Vec<(&str, LogLevel)> = entries
        .iter()
        .filter(|e| e.metadata.get("workflow").and_then(|w| w.as_str()) == Some("chatty"))
        .filter(|e| e.message != "run created")
        .map(|e| (e.message.as_str(), e.level))
        .collect();
    assert_eq!(
        lines,
        [
            ("before, with 1", LogLevel::Info),
            ("between, with 2", LogLevel::Warn),
            ("after", LogLevel::Debug),
        ],
        "{entries:#?}"
    );
    for entry in entries.iter().filter(|e| e.message == "after") {
        assert_eq!(entry.metadata["run_id"], run.id.as_str());
    }
}

in_both_modes!(logs_each_line_once);
