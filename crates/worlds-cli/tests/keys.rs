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
