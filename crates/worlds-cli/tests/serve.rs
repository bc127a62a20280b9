//! `worlds serve`: a real process serving a directory's world over loopback HTTP, with the key
//! it made on first start printed once, kept (as a digest) across a restart, and required.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use reqwest::StatusCode;

/// A `worlds serve` process and what it printed until it served.
struct Serving {
    child: Child,
    /// Kept open: the process prints more when it stops.
    out: BufReader<ChildStdout>,
    lines: Vec<String>,
    base: String,
}

fn start(dir: &Path) -> Serving {
    start_with(dir, "file")
}

fn start_with(dir: &Path, persistence: &str) -> Serving {
    let mut child = Command::new(env!("CARGO_BIN_EXE_worlds"))
        .args([
            "serve",
            "--persistence",
            persistence,
            "--addr",
            "127.0.0.1:0",
            "--dir",
        ])
        .arg(dir)
        .env_remove("WORLDS_ENGINE_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out: BufReader<ChildStdout> = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "exited early: {lines:?}"
        );
        let line = line.trim_end().to_owned();
        let served = line.starts_with("serving the API");
        lines.push(line);
        if served {
            break;
        }
    }
    let last = lines.last().unwrap();
    let url = last
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_owned();
    Serving {
        child,
        out,
        lines,
        base: url,
    }
}

impl Serving {
    /// The key printed on this start, if one was made.
    fn new_key(&self) -> Option<String> {
        self.lines.iter().find(|l| l.starts_with("wek_")).cloned()
    }

    async fn status(&self, key: Option<&str>) -> StatusCode {
        let mut request = reqwest::Client::new().get(format!("{}/v1/runs", self.base));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send().await.unwrap().status()
    }

    /// Ctrl-C, and the process's exit status.
    fn interrupt(mut self) -> bool {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success());
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.out, &mut rest);
        assert!(rest.contains("stopping"), "{rest}");
        self.child.wait().unwrap().success()
    }
}

#[tokio::test]
async fn serve_makes_a_key_once_requires_it_and_keeps_it_across_a_restart() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let world_dir = dir.path().join("world");

    let first = start(&world_dir);
    let key = first.new_key().expect("a key is made when there is none");
    assert!(
        first.lines.iter().any(|l| l.contains("shown once")),
        "{:?}",
        first.lines
    );
    assert_eq!(first.status(None).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        first.status(Some("wek_nope")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(first.status(Some(&key)).await, StatusCode::OK);
    let health = reqwest::get(format!("{}/healthz", first.base))
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    assert!(first.interrupt(), "Ctrl-C stops it cleanly");

    let second = start(&world_dir);
    assert_eq!(
        second.new_key(),
        None,
        "the kept key is used: {:?}",
        second.lines
    );
    assert_eq!(second.status(Some(&key)).await, StatusCode::OK);
    // The secret is not shown again, and `keys list` cannot show it: point at the command
    // that makes one, for this world.
    let pointer = second
        .lines
        .iter()
        .find(|l| l.contains("can call this server"))
        .unwrap_or_else(|| panic!("no word on the keys in {:?}", second.lines));
    assert!(
        pointer.contains("worlds keys create --scope admin --dir ")
            && !pointer.contains("keys list"),
        "{pointer}"
    );
    assert!(second.interrupt());

    // Nothing in the directory holds the key's secret.
    let mut stack = vec![world_dir.clone()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes.windows(40).any(|w| w == &key.as_bytes()[13..53]),
                "{} holds the key",
                path.display()
            );
        }
    }
}

/// `worlds ARGS` with no server, key or database from the environment.
fn worlds(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_worlds"))
        .args(args)
        .env_remove("WORLDS_SERVER_URL")
        .env_remove("WORLDS_API_KEY")
        .env_remove("WORLDS_ENGINE_DATABASE_URL")
        .output()
        .unwrap()
}

#[tokio::test]
async fn the_cli_operates_a_hybrid_world_through_its_server() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let world_dir = dir.path().join("world");
    let serving = start_with(&world_dir, "hybrid");
    let key = serving.new_key().unwrap();
    let dir_arg = world_dir.display().to_string();

    let started: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/v1/runs", serving.base))
        .bearer_auth(&key)
        .json(&serde_json::json!({
            "workflow": "checkout",
            "input": { "id": "A-1", "cents": 1200, "sku": "SKU-1", "quantity": 1 }
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = started["run_id"].as_str().unwrap().to_owned();

    // The directory is the hybrid world's: a cancellation from outside is refused, and says
    // how to do it through the server.
    let refused = worlds(&["runs", "cancel", &run, "--dir", &dir_arg]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(why.contains("--server"), "{why}");

    let listed = worlds(&[
        "runs",
        "list",
        "--server",
        &serving.base,
        "--api-key",
        &key,
        "--json",
    ]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&run));

    let cancelled = worlds(&[
        "runs",
        "cancel",
        &run,
        "--server",
        &serving.base,
        "--api-key",
        &key,
        "--json",
    ]);
    let out = String::from_utf8_lossy(&cancelled.stdout).into_owned();
    let err = String::from_utf8_lossy(&cancelled.stderr).into_owned();
    // The checkout may have finished first: then the server says it cannot be cancelled.
    assert!(
        (cancelled.status.success() && out.contains("cancelled")) || err.contains("CONFLICT"),
        "{out} {err}"
    );

    let no_key = worlds(&["runs", "list", "--server", &serving.base]);
    assert!(!no_key.status.success());
    assert!(String::from_utf8_lossy(&no_key.stderr).contains("--api-key"));
    let wrong = worlds(&[
        "runs",
        "list",
        "--server",
        &serving.base,
        "--api-key",
        "wek_x",
    ]);
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("UNAUTHENTICATED"));
    let hook = worlds(&[
        "hooks",
        "resume",
        "f00d",
        "--data",
        "true",
        "--server",
        &serving.base,
        "--api-key",
        &key,
    ]);
    assert!(!hook.status.success());
    assert!(String::from_utf8_lossy(&hook.stderr).contains("NOT_FOUND"));
    let bad = worlds(&[
        "hooks",
        "resume",
        "f00d",
        "--data",
        "{nope",
        "--server",
        &serving.base,
        "--api-key",
        &key,
    ]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not JSON"));

    // One run in full, as text and as JSON with its history.
    let remote = ["--server", serving.base.as_str(), "--api-key", key.as_str()];
    let with_remote = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&remote);
        worlds(&all)
    };
    let shown = with_remote(&["runs", "show", &run]);
    let text = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(text.contains(&run) && text.contains("checkout"), "{text}");
    let shown = with_remote(&["runs", "show", &run, "--json"]);
    let state: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let history = state["history"].as_array().unwrap();
    assert_eq!(history[0]["type"], "workflow_queued", "{state}");
    assert_eq!(history.len() as u64, state["event_count"].as_u64().unwrap());
    // Oldest first.
    let oldest = with_remote(&["runs", "list", "--oldest-first", "--json", "--limit", "1"]);
    assert!(String::from_utf8_lossy(&oldest.stdout).contains(&run));

    // Schedules: made over the API, listed, paused, resumed and deleted by the CLI.
    let made = reqwest::Client::new()
        .post(format!("{}/v1/schedules", serving.base))
        .bearer_auth(&key)
        .json(&serde_json::json!({
            "id": "nightly", "workflow": "checkout", "cron": "0 3 * * *",
            "input": { "id": "N-1", "cents": 1, "sku": "SKU-1", "quantity": 1 }
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), StatusCode::CREATED);
    let listed = with_remote(&["schedules", "list", "--json"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("nightly"));
    for (action, expect) in [
        ("pause", "\"paused\":true"),
        ("resume", "\"paused\":false"),
        ("delete", "\"deleted\":true"),
    ] {
        let changed = with_remote(&["schedules", action, "nightly", "--json"]);
        let out = String::from_utf8_lossy(&changed.stdout).into_owned();
        assert!(
            out.contains(expect),
            "{action}: {out} {}",
            String::from_utf8_lossy(&changed.stderr)
        );
    }
    let gone = with_remote(&["schedules", "pause", "nightly"]);
    assert!(String::from_utf8_lossy(&gone.stderr).contains("NOT_FOUND"));
    assert!(serving.interrupt());
}

#[tokio::test]
async fn a_run_started_over_http_survives_a_killed_server_and_its_result_is_fetched_after() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let world_dir = dir.path().join("world");
    let mut first = start_with(&world_dir, "hybrid");
    let key = first.new_key().unwrap();
    let http = reqwest::Client::new();
    let started: serde_json::Value = http
        .post(format!("{}/v1/runs", first.base))
        .bearer_auth(&key)
        .json(&serde_json::json!({
            "workflow": "checkout",
            "input": { "id": "A-7", "cents": 700, "sku": "SKU-7", "quantity": 2 }
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = started["run_id"].as_str().unwrap().to_owned();
    // Acknowledged, then the server dies mid-run (its steps pause between them).
    let going = http
        .get(format!("{}/v1/runs/{run}/result?wait_ms=0", first.base))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(
        going.status(),
        StatusCode::ACCEPTED,
        "still running when killed"
    );
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let second = start_with(&world_dir, "hybrid");
    assert_eq!(second.new_key(), None, "{:?}", second.lines);
    let outcome: serde_json::Value = http
        .get(format!(
            "{}/v1/runs/{run}/result?wait_ms=30000",
            second.base
        ))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(outcome["done"], true, "{outcome}");
    assert_eq!(outcome["status"], "completed", "{outcome}");
    assert!(second.interrupt());
}
