//! `worlds keys create|list|revoke` on a directory (also one a hybrid world holds) and on
//! PostgreSQL: a key is printed once, only its digest is kept, and a revoked key is refused.

mod common;

use std::path::Path;

use serde_json::Value;
use worlds_engine::model::keys::Scope;
use worlds_engine::prelude::*;
use worlds_engine::store::{KeyFiles, KeyStore};
use worlds_engine::Persistence;
use worlds_server::auth::{AuthError, KeyRing};

use common::{text, worlds};

fn created(dir: &Path, scope: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec!["keys", "create", "--scope", scope, "--json"];
    args.extend(extra);
    let out = worlds(&args, dir);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        json["key"].as_str().unwrap().to_owned(),
        json["record"]["id"].as_str().unwrap().to_owned(),
    )
}

fn file_contains(dir: &Path, needle: &str) -> bool {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if let Ok(bytes) = std::fs::read(&path) {
            if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                return true;
            }
        }
    }
    false
}

#[tokio::test]
async fn keys_are_created_listed_and_revoked_beside_a_running_hybrid_world() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = WorldConfig::default();
    config.persistence = Persistence::Hybrid;
    config.persistence_path = dir.path().to_path_buf();
    let world = World::new(config).unwrap();
    world.start().await.unwrap();

    let (key, id) = created(dir.path(), "write", &["--name", "deploy bot"]);
    assert!(key.starts_with("wek_") && key.contains(&id), "{key}");
    assert!(
        !file_contains(dir.path(), &key[13..]),
        "the secret is kept nowhere"
    );

    // The world holding the directory reads the record: the key checks out.
    let records = world.keys().list().await.unwrap();
    let ring = KeyRing::with_records(records);
    assert_eq!(ring.verify(&key, 0).unwrap().scope, Scope::Write);

    let out = worlds(&["keys", "list"], dir.path());
    let listing = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        listing.contains(&id) && listing.contains("deploy bot"),
        "{listing}"
    );
    assert!(
        listing.contains("write") && listing.contains("active"),
        "{listing}"
    );

    let out = worlds(&["keys", "revoke", &id], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ring = KeyRing::with_records(world.keys().list().await.unwrap());
    assert_eq!(ring.verify(&key, 0), Err(AuthError::Revoked));
    let listing = text(&worlds(&["keys", "list"], dir.path()).stdout);
    assert!(listing.contains("revoked"), "{listing}");

    // Mistakes are refused with a reason.
    let out = worlds(&["keys", "create", "--scope", "root"], dir.path());
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("read, write or admin"),
        "{}",
        text(&out.stderr)
    );
    let out = worlds(&["keys", "revoke", "nOsUchId"], dir.path());
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no key with id"),
        "{}",
        text(&out.stderr)
    );
    let out = worlds(&["keys", "revoke", "../x"], dir.path());
    assert!(!out.status.success());
    world.shutdown().await.unwrap();

    // An expiring key's record carries its end.
    let (_, id) = created(dir.path(), "read", &["--expires-in", "90d"]);
    let record = KeyFiles::open(dir.path())
        .list_keys()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id == id)
        .unwrap();
    let days = (record.expires_at.unwrap() - record.created_at) / 86_400_000;
    assert_eq!(days, 90);
}

#[tokio::test]
async fn keys_on_postgres_are_kept_as_digests() {
    use worlds_postgres::testing::{database_up, test_url, TestSchema};
    if !database_up().await {
        return;
    }
    let schema = TestSchema::fresh();
    let mut config = WorldConfig::postgres(test_url());
    config.database.schema = schema.name().to_owned();
    let world = worlds_postgres::open(config).await.unwrap();
    let url = test_url();
    let on_db = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--database-url", &url, "--schema", schema.name()]);
        std::process::Command::new(env!("CARGO_BIN_EXE_worlds"))
            .args(all)
            .env_remove("WORLDS_ENGINE_DIR")
            .output()
            .unwrap()
    };
    let out = on_db(&["keys", "create", "--scope", "admin", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = json["key"].as_str().unwrap();
    let records = world.keys().list().await.unwrap();
    assert_eq!(records.len(), 1);
    assert!(!serde_json::to_string(&records)
        .unwrap()
        .contains(&key[13..]));
    let ring = KeyRing::with_records(records);
    assert_eq!(ring.verify(key, 0).unwrap().scope, Scope::Admin);
    let out = on_db(&["keys", "revoke", json["record"]["id"].as_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing = text(&on_db(&["keys", "list"]).stdout);
    assert!(listing.contains("revoked"), "{listing}");
    world.shutdown().await.unwrap();
}

/// A `worlds serve` process; killed if the test ends before stopping it.
struct Serving {
    child: std::process::Child,
    /// Kept open: the process prints more when it stops.
    out: std::io::BufReader<std::process::ChildStdout>,
    base: String,
    /// The admin key it made on start.
    key: String,
}

impl Serving {
    /// `worlds serve ARGS --addr 127.0.0.1:0`, once it serves.
    fn start(args: &[&str]) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_worlds"))
            .arg("serve")
            .args(args)
            .args(["--addr", "127.0.0.1:0"])
            .env_remove("WORLDS_ENGINE_DIR")
            .env_remove("WORLDS_ENGINE_DATABASE_URL")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut lines = Vec::new();
        let base = loop {
            let mut line = String::new();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "exited early: {lines:?}"
            );
            let line = line.trim_end().to_owned();
            if line.starts_with("serving the API") {
                let url = line.split_whitespace().find(|w| w.starts_with("http://"));
                break url.unwrap().to_owned();
            }
            lines.push(line);
        };
        let key = lines.iter().find(|l| l.starts_with("wek_")).cloned();
        Self {
            child,
            out,
            base,
            key: key.unwrap_or_else(|| panic!("no key made: {lines:?}")),
        }
    }

    async fn status(&self, key: &str) -> reqwest::StatusCode {
        reqwest::Client::new()
            .get(format!("{}/v1/runs", self.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .status()
    }

    /// Ctrl-C: true if it stopped cleanly.
    fn interrupt(mut self) -> bool {
        let pid = self.child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.out, &mut rest);
        self.child.wait().unwrap().success()
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A key `worlds keys create` makes in a PostgreSQL world while `worlds serve` serves it is
/// accepted on its first request, not only once the server reads its keys again a second
/// later: the key is asked for right after a read (within that second), and a server that
/// did not read the store again for a key it does not know would refuse it.
#[tokio::test]
async fn a_key_made_while_serve_runs_on_postgres_works_on_its_first_request() {
    use std::time::{Duration, Instant};
    use worlds_postgres::testing::{database_up, test_url, TestSchema};
    let _ = rustls::crypto::ring::default_provider().install_default();
    if !database_up().await {
        return;
    }
    let schema = TestSchema::fresh();
    let url = test_url();
    let db = ["--database-url", url.as_str(), "--schema", schema.name()];
    let mut args = vec!["--persistence", "postgres"];
    args.extend(db);
    let serving = Serving::start(&args);
    // The server reads its keys at most once a second unless a key is new to it; the last
    // read was before it printed that it serves.
    let mut read_by = Instant::now();
    // The same as the server's 1 s, with a margin for the request's own time.
    let refresh = Duration::from_millis(1_100);
    let mut attempts = 0;
    loop {
        attempts += 1;
        assert!(
            attempts <= 5,
            "`worlds keys create` and a request never fitted in a second: nothing shows whether the server reads a new key at once"
        );
        // A request over a second after the last read: the server reads its keys again now,
        // whether it reads on an unknown key or not.
        tokio::time::sleep(refresh.saturating_sub(read_by.elapsed())).await;
        let read = Instant::now();
        assert_eq!(serving.status(&serving.key).await, reqwest::StatusCode::OK);

        let mut create = vec!["keys", "create", "--scope", "read", "--json"];
        create.extend(db);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_worlds"))
            .args(&create)
            .env_remove("WORLDS_ENGINE_DIR")
            .env_remove("WORLDS_ENGINE_DATABASE_URL")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        let key = json["key"].as_str().unwrap();
        assert_eq!(
            serving.status(key).await,
            reqwest::StatusCode::OK,
            "a new key is refused on its first request"
        );
        read_by = Instant::now();
        // Asked for within the second after the server's last read: only a read for the
        // unknown key let it in.
        if read.elapsed() < Duration::from_millis(900) {
            break;
        }
    }
    let made_up = "wek_nOsUchId_0000000000000000000000000000000000000000";
    assert_eq!(
        serving.status(made_up).await,
        reqwest::StatusCode::UNAUTHORIZED
    );
    assert!(serving.interrupt(), "Ctrl-C stops it cleanly");
}
