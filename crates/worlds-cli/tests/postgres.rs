//! The `worlds` binary against a PostgreSQL world: every test gets a fresh schema on the
//! database named by `WORLDS_TEST_DATABASE_URL` (default the local server), dropped afterwards.
//! Unreachable, the tests fail under `CI=true` and are skipped, loudly, otherwise.

use std::process::Output;
use std::time::Duration;

use serde_json::json;
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use worlds_engine::prelude::*;
use worlds_engine::schedule::Schedule;
use worlds_engine::ErrorKind;

/// A password the server ignores (trust authentication) and the output must never show.
const SECRET: &str = "hunter2-s3cret";

use worlds_postgres::testing::{database_up, test_url as url, TestSchema as Schema};

/// The test URL with [`SECRET`] as its password (the test server trusts local connections;
/// a server that checks passwords gets its own URL, whose password the tests also look for).
fn url_with_password() -> String {
    let url = url();
    match url.split_once("://") {
        Some((scheme, rest)) if !rest.split('/').next().unwrap_or("").contains('@') => {
            format!("{scheme}://postgres:{SECRET}@{rest}")
        }
        Some((scheme, rest)) if !rest.split('@').next().unwrap_or("").contains(':') => {
            let (user, host) = rest.split_once('@').unwrap();
            format!("{scheme}://{user}:{SECRET}@{host}")
        }
        _ => url,
    }
}

/// A world on the schema, with a short poll interval so it hears of outside writes quickly.
async fn open_world(schema: &Schema) -> World {
    let mut config = WorldConfig::postgres(url());
    config.database.schema = schema.name().to_owned();
    config.database.pool_size = 4;
    config.shared_poll_interval = Duration::from_millis(50).into();
    // A failed run stays failed (the default retries the workflow).
    config.failure_strategy = FailureStrategy::Ignore;
    worlds_postgres::open(config).await.unwrap()
}

/// Runs `worlds ARGS` with no database or directory from the environment.
async fn worlds(args: &[&str]) -> Output {
    worlds_env(args, &[]).await
}

/// Runs `worlds ARGS` with the given environment variables.
async fn worlds_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_worlds"));
    command
        .args(args)
        .env_remove("WORLDS_ENGINE_DATABASE_URL")
        .env_remove("WORLDS_ENGINE_DIR");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().await.unwrap()
}

/// `worlds ARGS --database-url URL --schema SCHEMA`.
async fn on_db(args: &[&str], url: &str, schema: &Schema) -> Output {
    let mut all = args.to_vec();
    all.extend(["--database-url", url, "--schema", schema.name()]);
    worlds(&all).await
}

/// Rows in the schema's `members` table.
async fn member_rows(schema: &Schema) -> i64 {
    let mut conn = PgConnection::connect(&self::url()).await.unwrap();
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{}\".members",
        schema.name()
    )))
    .fetch_one(&mut conn)
    .await
    .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Fails if the password appears anywhere in the output.
fn no_secret(output: &Output) {
    let all = format!("{}{}", stdout(output), stderr(output));
    assert!(!all.contains(SECRET), "the password was printed:\n{all}");
}

fn step() -> Activity<u64, u64> {
    activity("cli-pg-step", |_ctx: ActivityContext, n: u64| async move {
        Ok::<_, StepError>(n + 1)
    })
}

fn adder(step: &Activity<u64, u64>) -> Workflow<u64, u64> {
    let step = step.clone();
    workflow("cli-pg-add", move |ctx: WorkflowContext, n: u64| {
        let step = step.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&step, n).await?) }
    })
}

fn boom() -> Workflow<(), ()> {
    workflow("cli-pg-boom", |_ctx: WorkflowContext, _: ()| async move {
        Err::<(), _>(WorkflowError::msg("warehouse on fire"))
    })
}

fn nap() -> Workflow<(), ()> {
    workflow("cli-pg-nap", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    })
}

fn parent(child: &Workflow<(), ()>) -> Workflow<(), ()> {
    let child = child.clone();
    workflow("cli-pg-parent", move |ctx: WorkflowContext, _: ()| {
        let child = child.clone();
        async move {
            ctx.execute_child(&child, (), WorkflowOptions::new().workflow_id("nap-child"))
                .await?;
            Ok::<_, WorkflowError>(())
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_list_and_show_read_a_postgres_world() {
    if !database_up().await {
        return;
    }
    let schema = Schema::fresh();
    let world = open_world(&schema).await;
    let step = step();
    let add = adder(&step);
    let boom = boom();
    world.register(&step).unwrap();
    world.register(&add).unwrap();
    world.register(&boom).unwrap();
    world.start().await.unwrap();
    for n in 0..2 {
        let run = world
            .execute(
                &add,
                n,
                WorkflowOptions::new().workflow_id(format!("add-{n}")),
            )
            .await
            .unwrap();
        assert_eq!(run.result().await.unwrap(), n + 1);
    }
    let failed = world
        .execute(&boom, (), WorkflowOptions::new().workflow_id("wf-failed"))
        .await
        .unwrap();
    assert!(failed.result().await.is_err());
    world.shutdown().await.unwrap();
    let url = url_with_password();

    let out = on_db(&["runs", "list", "--json"], &url, &schema).await;
    assert!(out.status.success(), "{}", stderr(&out));
    no_secret(&out);
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{}", stdout(&out));
    assert_eq!(lines[0]["workflow_id"], "wf-failed");

    let out = on_db(&["runs", "list", "--status", "failed"], &url, &schema).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert_eq!(table.lines().count(), 2, "{table}");
    assert!(table.contains("wf-failed") && table.contains("warehouse on fire"));

    let out = on_db(&["runs", "show", "wf-failed"], &url, &schema).await;
    assert!(out.status.success(), "{}", stderr(&out));
    no_secret(&out);
    let text = stdout(&out);
    assert!(text.contains("status      failed"), "{text}");
    assert!(text.contains("error       warehouse on fire"), "{text}");

    let out = on_db(&["runs", "show", "add-1", "--json"], &url, &schema).await;
    let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(state["status"], "completed");
    assert!(!state["history"].as_array().unwrap().is_empty());

    let out = on_db(&["runs", "show", "nope"], &url, &schema).await;
    assert!(!out.status.success());
    no_secret(&out);
    let message = stderr(&out);
    assert!(message.contains("not found"), "{message}");
    assert!(
        message.contains("worlds runs list --database-url"),
        "{message}"
    );

    // The commands leave no member of their own behind (the world, shut down, left already).
    let members = member_rows(&schema).await;
    assert_eq!(members, 0, "a command left a member row behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_a_run_a_running_member_drives_and_its_children() {
    if !database_up().await {
        return;
    }
    let schema = Schema::fresh();
    let world = open_world(&schema).await;
    let nap = nap();
    let parent = parent(&nap);
    world.register(&nap).unwrap();
    world.register(&parent).unwrap();
    world.start().await.unwrap();
    let run = world
        .execute(&parent, (), WorkflowOptions::new().workflow_id("nap-1"))
        .await
        .unwrap();
    // Wait until the child is asleep: the parent is then waiting on it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while world.query("nap-child").await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the child never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let out = on_db(
        &[
            "runs",
            "cancel",
            "nap-1",
            "--json",
            "--reason",
            "not needed",
        ],
        &url_with_password(),
        &schema,
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    no_secret(&out);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["status"], "cancelled");
    assert_eq!(summary["workflow_id"], "nap-1");

    // The member driving the run hears of it, and the child is cancelled with it.
    let err = tokio::time::timeout(Duration::from_secs(20), run.result())
        .await
        .expect("the driving member saw the cancellation")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RunCancelled);
    let child = world.query("nap-child").await.unwrap();
    assert_eq!(child.status, RunStatus::Cancelled);

    let out = on_db(&["runs", "cancel", "no-such-run"], &url(), &schema).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no-such-run"), "{}", stderr(&out));
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_pause_and_resume_while_a_member_runs() {
    if !database_up().await {
        return;
    }
    let schema = Schema::fresh();
    let world = open_world(&schema).await;
    let report = workflow(
        "cli-pg-report",
        |_ctx: WorkflowContext, _: serde_json::Value| async move { Ok::<_, WorkflowError>(()) },
    );
    world.register(&report).unwrap();
    world.start().await.unwrap();
    world
        .schedules()
        .cron("daily-job", "cli-pg-report", json!({}), "0 9 * * *")
        .await
        .unwrap();
    world
        .schedules()
        .add(Schedule::cron("paris", "cli-pg-report", "30 7 * * 1-5").time_zone("Europe/Paris"))
        .await
        .unwrap();
    let url = url();

    let out = on_db(&["schedules", "list"], &url, &schema).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("0 9 * * * (UTC)"), "{table}");
    assert!(table.contains("30 7 * * 1-5 (Europe/Paris)"), "{table}");

    let out = on_db(
        &["schedules", "pause", "daily-job", "--json"],
        &url,
        &schema,
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let paused: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(paused["paused"], true);
    assert!(world.schedules().get("daily-job").await.unwrap().paused);

    let out = on_db(&["schedules", "resume", "daily-job"], &url, &schema).await;
    assert!(
        stdout(&out).contains("schedule daily-job is active"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(!world.schedules().get("daily-job").await.unwrap().paused);

    let out = on_db(&["schedules", "delete", "paris"], &url, &schema).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(world.schedules().list().await.unwrap().len(), 1);

    let out = on_db(&["schedules", "pause", "nope"], &url, &schema).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("schedule not found: nope"),
        "{}",
        stderr(&out)
    );
    world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_connection_version_members_runs_and_timers() {
    if !database_up().await {
        return;
    }
    let schema = Schema::fresh();
    let world = open_world(&schema).await;
    let nap = nap();
    world.register(&nap).unwrap();
    world.start().await.unwrap();
    world
        .execute(&nap, (), WorkflowOptions::new().workflow_id("napping"))
        .await
        .unwrap();
    let url = url_with_password();

    let out = on_db(&["doctor"], &url, &schema).await;
    no_secret(&out);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    for expected in [
        "database: ",
        "connection: ok (",
        &format!(
            "schema version: {} (this build: {})",
            worlds_postgres::SCHEMA_VERSION,
            worlds_postgres::SCHEMA_VERSION
        ),
        "members: 1 live, 0 dead",
        "runs: 1 (",
        "runs leased to no live member: 0",
        "timers due: 0",
        "healthy",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
    world.shutdown().await.unwrap();

    // A world that shut down has left at once: not live, not dead, and its run is up for a
    // claim by any member (none is running).
    let out = on_db(&["doctor"], &url, &schema).await;
    let text = stdout(&out);
    for expected in [
        "members: 0 live, 0 dead",
        "runs leased to no live member: 1",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }

    // The member dies (its heartbeat an hour old) with the run unfinished: nothing drives it.
    let mut conn = PgConnection::connect(&self::url()).await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{}\".members SET heartbeat_at = now() - interval '1 hour'",
        schema.name()
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    let out = on_db(&["doctor"], &url, &schema).await;
    no_secret(&out);
    let text = stdout(&out);
    assert!(!out.status.success(), "{text}");
    // (A member that shut down cleanly has already left the table and released its runs; one
    // that died is still listed, as dead.)
    for expected in [
        "members: 0 live",
        "runs leased to no live member: 1",
        "problem: 1 unfinished run(s) and no live member",
        "start the world's program",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
    assert!(!text.contains("healthy"), "{text}");
    assert!(
        stderr(&out).contains("1 problem(s) found"),
        "{}",
        stderr(&out)
    );

    // A schema no world has used.
    let missing = Schema::fresh();
    let out = on_db(&["doctor"], &url, &missing).await;
    assert!(!out.status.success());
    no_secret(&out);
    assert!(stdout(&out).contains("no such schema"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("problem: there is no schema"),
        "{}",
        stdout(&out)
    );

    // No server: a clear error naming host and port, quickly.
    let out = worlds(&[
        "doctor",
        "--database-url",
        &format!("postgres://postgres:{SECRET}@127.0.0.1:1/test"),
    ])
    .await;
    assert!(!out.status.success());
    no_secret(&out);
    assert!(
        stderr(&out).contains("cannot connect to PostgreSQL at 127.0.0.1:1"),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("connection: FAILED"),
        "{}",
        stdout(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_and_a_database_together_are_refused() {
    let url = format!("postgres://postgres:{SECRET}@127.0.0.1:1/test");
    for args in [
        vec!["runs", "list", "--dir", "somewhere", "--database-url", &url],
        vec!["doctor", "--dir", "somewhere", "--database-url", &url],
        vec!["logs", "--dir", "somewhere", "--database-url", &url],
        vec![
            "schedules",
            "pause",
            "x",
            "--dir",
            "somewhere",
            "--database-url",
            &url,
            "--json",
        ],
    ] {
        let out = worlds(&args).await;
        assert!(!out.status.success());
        no_secret(&out);
        assert!(
            stderr(&out).contains("pick one"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let out = worlds_env(
        &["runs", "list", "--dir", "somewhere"],
        &[("WORLDS_ENGINE_DATABASE_URL", &url)],
    )
    .await;
    assert!(
        stderr(&out).contains("WORLDS_ENGINE_DATABASE_URL environment variable"),
        "{}",
        stderr(&out)
    );
    no_secret(&out);

    // --help shows the variable, not its value.
    let out = worlds_env(
        &["runs", "list", "--help"],
        &[("WORLDS_ENGINE_DATABASE_URL", &url)],
    )
    .await;
    assert!(
        stdout(&out).contains("WORLDS_ENGINE_DATABASE_URL"),
        "{}",
        stdout(&out)
    );
    no_secret(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_can_come_from_the_environment() {
    if !database_up().await {
        return;
    }
    let schema = Schema::fresh();
    let world = open_world(&schema).await;
    world.shutdown().await.unwrap();
    let url = url_with_password();
    let out = worlds_env(
        &["runs", "list", "--schema", schema.name()],
        &[("WORLDS_ENGINE_DATABASE_URL", &url)],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    no_secret(&out);
    assert!(
        stderr(&out).contains(&format!("no runs in schema '{}' on ", schema.name())),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("worlds dev --persistence postgres"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_reads_every_members_entries_from_the_database() {
    if !database_up().await {
        return;
    }
    let schema = Schema::fresh();
    let boom = boom();
    let a = open_world(&schema).await;
    let b = open_world(&schema).await;
    for world in [&a, &b] {
        world.register(&boom).unwrap();
        world.start().await.unwrap();
    }
    let failed = a
        .execute(&boom, (), WorkflowOptions::new().workflow_id("wf-failed"))
        .await
        .unwrap();
    assert!(failed.result().await.is_err());
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    let url = url_with_password();

    let out = on_db(&["logs", "--json"], &url, &schema).await;
    assert!(out.status.success(), "{}", stderr(&out));
    no_secret(&out);
    let entries: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let members: std::collections::BTreeSet<String> = entries
        .iter()
        .filter(|e| e["message"] == "world started")
        .map(|e| e["metadata"]["member"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(members.len(), 2, "{}", stdout(&out));

    let out = on_db(&["logs", "--level", "warn"], &url, &schema).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("run failed") && text.contains("warehouse on fire"),
        "{text}"
    );
    assert!(!text.contains("world started"), "{text}");

    let out = on_db(&["logs", "--limit", "1"], &url, &schema).await;
    assert_eq!(stdout(&out).lines().count(), 1, "{}", stdout(&out));
    assert!(stderr(&out).contains("raise --limit"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn db_migrate_creates_the_schema_then_finds_it_current_and_joins_no_world() {
    if !database_up().await {
        return;
    }
    let schema = Schema::fresh();
    let url = url_with_password();
    // Nothing there yet: reading commands say how to create it.
    let out = on_db(&["runs", "list"], &url, &schema).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("worlds db migrate"),
        "{}",
        stderr(&out)
    );

    let out = on_db(&["db", "migrate"], &url, &schema).await;
    assert!(out.status.success(), "{}", stderr(&out));
    no_secret(&out);
    let version = worlds_postgres::SCHEMA_VERSION;
    assert!(
        stdout(&out).contains(&format!("created schema '{}'", schema.name()))
            && stdout(&out).contains(&format!("version {version}")),
        "{}",
        stdout(&out)
    );
    let out = on_db(&["db", "migrate"], &url, &schema).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("at schema version {version} already")),
        "{}",
        stdout(&out)
    );
    let out = on_db(&["runs", "list", "--json"], &url, &schema).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");

    // It joined no world: no member row.
    let members = member_rows(&schema).await;
    assert_eq!(members, 0);

    // Without a database it says what it needs.
    let out = worlds(&["db", "migrate"]).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--database-url"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_w1_runs_over_several_member_processes() {
    if !database_up().await {
        return;
    }
    let out = worlds(&[
        "bench",
        "--workload",
        "w1",
        "--backend",
        "postgres",
        "--members",
        "2",
        "--n",
        "21",
        "--k",
        "2",
        "--json",
        "--database-url",
        &url(),
    ])
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(report["workload"], "W1");
    assert_eq!(report["n"], 21);
    assert!(report["steps_per_s"].as_f64().unwrap() > 0.0, "{report}");
    let notes = report["notes"].as_str().unwrap();
    assert!(
        notes.contains("2 member processes") && notes.contains("11 here, 10 in each other"),
        "{notes}"
    );

    // Anywhere else it is refused with what it is for.
    let out = worlds(&[
        "bench",
        "--workload",
        "w2",
        "--backend",
        "postgres",
        "--members",
        "2",
    ])
    .await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--members runs W1"),
        "{}",
        stderr(&out)
    );
}
