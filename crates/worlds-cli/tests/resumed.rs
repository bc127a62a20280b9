//! A world killed with SIGKILL (or stopped with Ctrl-C) between two steps of a run, started
//! again after the run's timer was due, then inspected: `worlds runs show` marks where the run resumed and says why its
//! timer fired late.
//!
//! The world is `worlds dev` itself, as a user runs it: its checkout charges the card, sleeps
//! 3 s, then ships.

#![cfg(unix)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// Longest any `worlds` process of this test may take.
const PATIENCE: Duration = Duration::from_secs(60);

fn worlds(args: &[&str], dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_worlds"));
    command
        .args(args)
        .arg("--dir")
        .arg(dir)
        .env_remove("WORLDS_SERVER_URL")
        .env_remove("WORLDS_API_KEY")
        .env_remove("WORLDS_ENGINE_DATABASE_URL")
        .stdin(Stdio::null());
    command
}

/// Runs `command` to its end, failing the test if it takes longer than [`PATIENCE`].
fn run(command: &mut Command) -> Output {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    finish(child)
}

fn finish(mut child: Child) -> Output {
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("`worlds` did not exit within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The run `id` of `dir` with its history, as `worlds runs show --json` gives it, if the
/// directory holds it yet.
fn shown(dir: &Path, id: &str) -> Option<Value> {
    let output = run(&mut worlds(&["runs", "show", id, "--json"], dir));
    output
        .status
        .success()
        .then(|| serde_json::from_slice(&output.stdout).unwrap())
}

/// When the run's sleep is due, once its history holds the sleep (the card charged, the
/// shipment not started).
fn sleeping_until(run: &Value) -> Option<i64> {
    let history = run["history"].as_array()?;
    let fired = history.iter().any(|e| e["type"] == "timer_fired");
    let scheduled = history.iter().find(|e| e["type"] == "timer_scheduled")?;
    (!fired).then(|| scheduled["fire_at"].as_i64().unwrap())
}

#[test]
fn a_run_killed_between_steps_shows_where_it_resumed_and_why_its_timer_was_late() {
    stopped_between_steps("KILL");
}

/// The same after Ctrl-C: a world that stops gracefully leaves the run sleeping, and the next one
/// marks where it took the run up again.
#[test]
fn a_run_stopped_with_ctrl_c_between_steps_shows_where_it_resumed() {
    stopped_between_steps("INT");
}

/// `worlds dev` stopped by `signal` (`KILL`, `INT`) while its one run sleeps between two steps,
/// then started again after the timer was due: `worlds runs show` marks the resumption and the
/// late timer.
fn stopped_between_steps(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut world = worlds(&["dev", "--runs", "1", "--dashboard", "off"], dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    // The read commands open the directory read-only while the world runs on it.
    let deadline = Instant::now() + PATIENCE;
    let (id, due) = loop {
        assert!(Instant::now() < deadline, "the run never slept");
        assert!(world.try_wait().unwrap().is_none(), "`worlds dev` exited");
        let listed = run(&mut worlds(&["runs", "list", "--json"], dir));
        let id = text(&listed.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|run| run["name"] == "checkout")
            .map(|run| run["id"].as_str().unwrap().to_owned());
        if let Some((id, due)) = id.and_then(|id| {
            let due = sleeping_until(&shown(dir, &id)?)?;
            Some((id, due))
        }) {
            break (id, due);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Between the steps: with SIGKILL no shutdown, nothing flushed that was not already on
    // disk; with SIGINT the graceful stop.
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &world.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let ended = finish(world);
    if signal == "INT" {
        assert!(ended.status.success(), "{}", text(&ended.stderr));
    }
    let stopped = shown(dir, &id).unwrap();
    assert!(
        sleeping_until(&stopped).is_some(),
        "killed while sleeping: {stopped:#}"
    );

    // Down past the timer's due time: it can only fire once a world runs again.
    let wait = (due + 1_500 - now_ms()).max(0) as u64;
    std::thread::sleep(Duration::from_millis(wait));
    let output = run(&mut worlds(
        &["dev", "--runs", "0", "--dashboard", "off"],
        dir,
    ));
    assert!(output.status.success(), "{}", text(&output.stderr));

    let output = run(&mut worlds(&["runs", "show", &id], dir));
    let report = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("status") && l.contains("completed")),
        "{report}"
    );
    assert!(
        report.lines().any(
            |l| l.starts_with("resumed") && l.contains("1 time(s) after a restart or takeover")
        ),
        "{report}"
    );
    let history: Vec<&str> = report
        .lines()
        .skip_while(|l| !l.starts_with("history"))
        .collect();
    let marker = history
        .iter()
        .position(|l| l.contains("run_resumed") && l.contains("<< resumed after a restart"))
        .unwrap_or_else(|| panic!("no resumption marked in\n{report}"));
    let fired = history
        .iter()
        .position(|l| l.contains("timer_fired"))
        .unwrap_or_else(|| panic!("no timer_fired in\n{report}"));
    assert!(
        marker < fired,
        "the run resumed before its timer fired:\n{report}"
    );
    assert!(
        history[fired].contains("late: the world was not running when it was due"),
        "{report}"
    );
    // Before the marker, the charge; after it, the shipment: the run went on where it stopped.
    let charged = history
        .iter()
        .position(|l| l.contains("activity_completed") && l.contains("charge"))
        .unwrap_or_else(|| panic!("no charge in\n{report}"));
    let shipped = history
        .iter()
        .position(|l| l.contains("activity_completed") && l.contains("ship"))
        .unwrap_or_else(|| panic!("no shipment in\n{report}"));
    assert!(charged < marker && marker < shipped, "{report}");
}
