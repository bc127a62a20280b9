//! `worlds dev` as a user runs it: the built binary on a fresh directory, run to completion, and
//! stopped with Ctrl-C (SIGINT) or SIGTERM then resumed by a second `worlds dev`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest any `worlds` process of these tests may take.
const PATIENCE: Duration = Duration::from_secs(30);

fn worlds(args: &[&str], dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_worlds"));
    command.args(args).arg("--dir").arg(dir);
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

/// Waits for `child` to exit and collects its output; kills it and fails after [`PATIENCE`].
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
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// (workflow name, status) of every run in `dir`, sorted.
fn runs_in(dir: &Path) -> Vec<(String, String)> {
    let output = run(&mut worlds(&["runs", "list", "--json"], dir));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let mut runs: Vec<(String, String)> = text(&output.stdout)
        .lines()
        .map(|line| {
            let run: Value = serde_json::from_str(line).unwrap();
            (
                run["name"].as_str().unwrap().to_owned(),
                run["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    runs.sort();
    runs
}

/// Three demo runs: two checkouts that complete and an order saga that compensates.
fn three_finished_runs() -> Vec<(String, String)> {
    vec![
        ("checkout".to_owned(), "completed".to_owned()),
        ("checkout".to_owned(), "completed".to_owned()),
        ("order-saga".to_owned(), "compensated".to_owned()),
    ]
}

#[test]
fn dev_runs_the_demo_workflows_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(&mut worlds(
        &["dev", "--runs", "3", "--speed", "20"],
        dir.path(),
    ));
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("starting 3 new runs"), "{stderr}");
    assert!(
        stderr.contains("finished 3/3"),
        "progress lines show the end: {stderr}"
    );
    assert!(
        stdout.contains("3 runs finished in") && stdout.contains("completed 2, compensated 1"),
        "{stdout}"
    );
    assert!(stdout.contains("worlds runs show wrun_"), "{stdout}");
    assert_eq!(runs_in(dir.path()), three_finished_runs());

    // Nothing in flight and no new runs asked for: nothing to do.
    let output = run(&mut worlds(&["dev", "--runs", "0"], dir.path()));
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("nothing to do"));
}

#[cfg(unix)]
#[test]
fn ctrl_c_stops_gracefully_and_the_next_dev_resumes() {
    stops_gracefully_and_the_next_dev_resumes("INT");
}

/// What systemd, containers and orchestrators send: the same graceful stop as Ctrl-C.
#[cfg(unix)]
#[test]
fn sigterm_stops_gracefully_and_the_next_dev_resumes() {
    stops_gracefully_and_the_next_dev_resumes("TERM");
}

/// `worlds dev` stopped by `signal` (`INT`, `TERM`) with three runs in flight exits 0 and says
/// so; the next one resumes them.
#[cfg(unix)]
fn stops_gracefully_and_the_next_dev_resumes(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    // At speed 1 every run sleeps 3 s: all three are still in flight when the signal arrives.
    let mut child = worlds(&["dev", "--runs", "3"], dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // Read progress lines (stderr is a pipe, so they are plain) until all three runs started.
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            let _ = lines_tx.send(line.clone());
            seen.push(line);
        }
        seen
    });
    let deadline = Instant::now() + PATIENCE;
    loop {
        let line = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("no progress line shows three runs started");
        if line.contains("started 3/3") {
            break;
        }
    }

    let interrupted = Instant::now();
    let kill = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let output = finish(child);
    let stderr = reader.join().unwrap().join("\n");
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "a graceful stop exits 0: {stderr}");
    assert!(
        interrupted.elapsed() < Duration::from_secs(10),
        "stopping took {:?}",
        interrupted.elapsed()
    );
    assert!(stderr.contains("stopping"), "{stderr}");
    assert!(
        stdout.contains("3 runs still in flight") && stdout.contains("again resumes them"),
        "{stdout}"
    );

    // The next `worlds dev` resumes them, starts none, and sees them to the end.
    let output = run(&mut worlds(&["dev", "--speed", "20"], dir.path()));
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("resuming 3 runs"), "{stderr}");
    assert!(!stderr.contains("starting"), "{stderr}");
    assert!(stdout.contains("3 runs finished in"), "{stdout}");
    assert_eq!(runs_in(dir.path()), three_finished_runs());
}

#[tokio::test]
async fn dev_serves_the_dashboard_with_a_key_of_its_own() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let mut child = worlds(
        &[
            "dev",
            "--runs",
            "2",
            "--speed",
            "4",
            "--dashboard",
            "127.0.0.1:0",
        ],
        dir.path(),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let line = loop {
        let line = lines
            .recv_timeout(PATIENCE)
            .expect("`worlds dev` printed no dashboard line");
        if line.starts_with("dashboard: ") {
            break line;
        }
    };
    // `dashboard: http://127.0.0.1:PORT/ (sign in with wek_…; it works for a day)`
    let url = line.split_whitespace().nth(1).unwrap().to_owned();
    let key = line
        .split("sign in with ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap()
        .to_owned();
    assert!(key.starts_with("wek_"), "{line}");
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let runs = http
        .get(format!("{url}v1/runs"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(runs.status().as_u16(), 200);
    let page = http.get(&url).send().await.unwrap();
    assert_eq!(
        page.headers()["location"],
        "/login",
        "the dashboard asks to sign in"
    );
    let refused = http.get(format!("{url}v1/runs")).send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    // Not in a terminal: the session ends with its runs.
    let output = finish(child);
    assert!(output.status.success());
}
