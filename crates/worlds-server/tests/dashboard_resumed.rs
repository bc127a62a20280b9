//! A world killed with SIGKILL between two steps of a run and started again after the run's
//! timer was due: the dashboard's run page says the run resumed, marks where in its history,
//! and says why its timer fired late.
//!
//! The test binary re-executes itself as the world that is killed: `resumed_child` is an
//! ignored test that does nothing unless `WORLDS_RESUMED_DIR` is set.

#![cfg(feature = "dashboard")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use worlds_engine::prelude::*;
use worlds_engine::store::{EventStore, FileStore};
use worlds_engine::{EventKind, ResolveData};
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions};

const DIR_VAR: &str = "WORLDS_RESUMED_DIR";
/// What the child prints before the id of the run it started.
const PREFIX: &str = "started run ";
const PATIENCE: Duration = Duration::from_secs(60);

/// A checkout: charge, a durable 1 s sleep, ship.
fn checkout() -> (
    Activity<u64, String>,
    Activity<String, String>,
    Workflow<u64, String>,
) {
    let charge = activity("charge", |_ctx: ActivityContext, cents: u64| async move {
        Ok::<_, StepError>(format!("paid {cents}"))
    });
    let ship = activity("ship", |_ctx: ActivityContext, paid: String| async move {
        Ok::<_, StepError>(format!("shipped after {paid}"))
    });
    let (c, s) = (charge.clone(), ship.clone());
    let checkout = workflow("checkout", move |ctx: WorkflowContext, cents: u64| {
        let (charge, ship) = (c.clone(), s.clone());
        async move {
            let paid = ctx.run(&charge, cents).await?;
            ctx.sleep("1s").await?;
            Ok::<_, WorkflowError>(ctx.run(&ship, paid).await?)
        }
    });
    (charge, ship, checkout)
}

fn hybrid_world(dir: &Path) -> World {
    let mut config = WorldConfig::default();
    config.persistence = Persistence::Hybrid;
    config.persistence_path = dir.to_path_buf();
    let world = World::new(config).expect("open the world");
    let (charge, ship, checkout) = checkout();
    world
        .register(&charge)
        .unwrap()
        .register(&ship)
        .unwrap()
        .register(&checkout)
        .unwrap();
    world
}

#[test]
#[ignore = "child process of the dashboard's resumed-run test; does nothing when run directly"]
fn resumed_child() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let world = hybrid_world(&PathBuf::from(dir));
        world.start().await.unwrap();
        let (_, _, checkout) = checkout();
        let run = world
            .execute(
                &checkout,
                4200,
                WorkflowOptions::new().workflow_id("order-1"),
            )
            .await
            .unwrap();
        println!("{PREFIX}{}", run.id);
        // Killed here, by the parent, once the sleep is on disk.
        std::future::pending::<()>().await;
    });
}

/// When the run's sleep is due, once the directory holds it (read without writing, as the
/// `worlds` commands do while a world runs).
fn sleep_on_disk(dir: &Path, run_id: &str) -> Option<i64> {
    let store = FileStore::open_read_only(dir).ok()?;
    let history = futures::executor::block_on(store.history(run_id, 0)).ok()?;
    history.iter().find_map(|e| match e.kind {
        EventKind::TimerScheduled { fire_at, .. } => Some(fire_at),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_between_steps_shows_where_it_resumed() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("world");

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "resumed_child",
            "--nocapture",
            "--include-ignored",
        ])
        .env(DIR_VAR, &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let run_id = tokio::task::spawn_blocking(move || {
        stdout
            .lines()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix(PREFIX).map(str::to_owned))
    })
    .await
    .unwrap()
    .expect("the child started no run");
    let deadline = Instant::now() + PATIENCE;
    let due = loop {
        if let Some(due) = sleep_on_disk(&dir, &run_id) {
            break due;
        }
        assert!(
            Instant::now() < deadline,
            "the run's sleep never reached the disk"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Between the steps: the card is charged, the shipment not started.
    child.kill().unwrap();
    child.wait().unwrap();

    // Started again once the timer is overdue: it can only fire now.
    let world = Arc::new(hybrid_world(&dir));
    let now = world.clock().now_ms();
    tokio::time::sleep(Duration::from_millis((due + 1_500 - now).max(0) as u64)).await;
    world.start().await.unwrap();
    tokio::time::timeout(PATIENCE, async {
        while world
            .get_run(&run_id, ResolveData::None)
            .await
            .unwrap()
            .status
            != RunStatus::Completed
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the resumed run completes");

    let keys = Arc::new(KeyRing::new());
    let key = keys
        .create("viewer", Scope::Read, world.clock().now_ms(), None)
        .key;
    let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = http
        .post(format!("{base}/login"))
        .header("origin", &base)
        .form(&[("key", key.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status().as_u16(), 303);
    let cookie = login.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let page = http
        .get(format!("{base}/runs/{run_id}"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();

    assert!(
        page.contains("<dt>Resumed</dt><dd id=\"resumed\">after a restart or takeover, at "),
        "{page}"
    );
    let history = &page[page.find("class=\"history\"").expect("a history")..];
    let marker = history
        .find("<li id=\"event-")
        .and_then(|_| history.find("class=\"resumed\""))
        .unwrap_or_else(|| panic!("no row marks the resumption: {history}"));
    let row = &history[marker..];
    let row = &row[..row.find("</summary>").unwrap()];
    assert!(
        row.contains("run_resumed") && row.contains("resumed after a restart or takeover"),
        "{row}"
    );
    let fired = history.find("<b>timer_fired</b>").expect("the timer fired");
    assert!(marker < fired, "marked before the timer fired: {history}");
    let fired_row = &history[fired..];
    let fired_row = &fired_row[..fired_row.find("</summary>").unwrap()];
    assert!(
        fired_row.contains("late: the world was not running when it was due"),
        "{fired_row}"
    );
    // The timeline marks it across the rows.
    assert!(
        page.contains("<title>resumed after a restart or takeover</title>"),
        "{page}"
    );

    server.shutdown().await;
    world.shutdown().await.unwrap();
}
