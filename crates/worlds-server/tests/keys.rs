//! API keys kept by the world's store: they outlive the server, a revocation by another
//! process is honoured, and no raw key is ever written to the storage.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use worlds_engine::clock::{Clock, VirtualClock};
use worlds_engine::prelude::*;
use worlds_engine::Persistence;
use worlds_server::auth::{ApiKeys, Scope};
use worlds_server::{serve, ApiOptions};

fn file_config(dir: &Path) -> WorldConfig {
    let mut config = WorldConfig::default();
    config.persistence = Persistence::File;
    config.persistence_path = dir.to_path_buf();
    config
}

/// Every file under `dir`, read as bytes, searched for `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        } else if let Ok(bytes) = std::fs::read(&path) {
            if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

async fn status(base: &str, key: &str) -> StatusCode {
    reqwest::Client::new()
        .get(format!("{base}/v1/runs"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn keys_outlive_the_server_honour_revocations_and_are_never_stored_raw() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(VirtualClock::new(1_767_225_600_000));
    let world = Arc::new(World::with_clock(file_config(dir.path()), clock.clone()).unwrap());
    world.start().await.unwrap();
    let keys = ApiKeys::open(world.clone()).await.unwrap();
    let kept = keys.create("kept", Scope::Read, None).await.unwrap();
    let doomed = keys.create("doomed", Scope::Read, None).await.unwrap();
    let server = serve(
        world.clone(),
        "127.0.0.1:0",
        ApiOptions::with_world_keys(keys.clone()),
    )
    .await
    .unwrap();
    let base = format!("http://{}", server.local_addr());
    assert_eq!(status(&base, &kept.key).await, StatusCode::OK);
    assert_eq!(status(&base, &doomed.key).await, StatusCode::OK);

    // Only digests reach the disk: neither the keys nor their secret parts.
    for key in [&kept.key, &doomed.key] {
        assert_eq!(files_containing(dir.path(), key), Vec::<String>::new());
        assert_eq!(
            files_containing(dir.path(), &key[13..]),
            Vec::<String>::new()
        );
    }
    assert!(!files_containing(dir.path(), &kept.record.digest).is_empty());

    // Another process on the same directory revokes one and makes a new one.
    let other = Arc::new(World::with_clock(file_config(dir.path()), clock.clone()).unwrap());
    let other_keys = ApiKeys::open(other.clone()).await.unwrap();
    other_keys.revoke(&doomed.record.id).await.unwrap();
    // A revocation is seen once the server's copy of the records is a second old.
    assert_eq!(
        status(&base, &doomed.key).await,
        StatusCode::OK,
        "not yet seen"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(status(&base, &doomed.key).await, StatusCode::UNAUTHORIZED);
    assert_eq!(status(&base, &kept.key).await, StatusCode::OK);
    // A key the server has not seen is looked up before it is refused.
    let fresh = other_keys
        .create("fresh", Scope::Write, None)
        .await
        .unwrap();
    assert_eq!(status(&base, &fresh.key).await, StatusCode::OK);
    let listed = other_keys.list().await.unwrap();
    assert_eq!(listed.len(), 3);
    assert!(listed
        .iter()
        .any(|r| r.id == doomed.record.id && r.revoked_at.is_some()));

    // After a restart, the kept key still opens the API.
    server.shutdown().await;
    world.shutdown().await.unwrap();
    drop(world);
    let world = Arc::new(World::with_clock(file_config(dir.path()), clock.clone()).unwrap());
    world.start().await.unwrap();
    let keys = ApiKeys::open(world.clone()).await.unwrap();
    assert_eq!(keys.verify(&kept.key).await.unwrap().scope, Scope::Read);
    assert!(keys.verify(&doomed.key).await.is_err());
    assert!(keys.revoke("nOsUchId").await.is_err());
    world.shutdown().await.unwrap();
}

/// A key made by `worlds keys create` (its records written to the directory's `keys/` by
/// another process) while the server runs opens the API on its first request, also right
/// after the server read its keys; a flood of made-up keys reads the store a few times at
/// once, then at most every 100 ms.
#[tokio::test]
async fn a_key_made_while_the_server_runs_works_on_its_first_request() {
    use worlds_engine::store::{KeyFiles, KeyStore};
    use worlds_server::auth::KeyRing;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(VirtualClock::new(1_767_225_600_000));
    let mut config = file_config(dir.path());
    config.persistence = Persistence::Hybrid;
    let world = Arc::new(World::with_clock(config, clock.clone()).unwrap());
    world.start().await.unwrap();
    let keys = ApiKeys::open(world.clone()).await.unwrap();
    let first = keys.create("serve", Scope::Admin, None).await.unwrap();
    let server = serve(
        world.clone(),
        "127.0.0.1:0",
        ApiOptions::with_world_keys(keys.clone()),
    )
    .await
    .unwrap();
    let base = format!("http://{}", server.local_addr());
    // The server has just read its keys (an id it did not know).
    let unsaved = KeyRing::generate("never saved", Scope::Read, clock.now_ms(), None);
    assert_eq!(status(&base, &unsaved.key).await, StatusCode::UNAUTHORIZED);
    assert_eq!(status(&base, &first.key).await, StatusCode::OK);

    // What `worlds keys create --dir` does, from another process.
    let cli = KeyFiles::open(dir.path());
    let made = KeyRing::generate("cli", Scope::Write, clock.now_ms(), None);
    cli.save_key(&made.record).await.unwrap();
    assert_eq!(status(&base, &made.key).await, StatusCode::OK);

    // A flood of made-up keys spends the reads allowed at once; then a new key waits for the
    // next one (100 ms), and is taken then.
    for _ in 0..10 {
        let made_up = KeyRing::generate("made up", Scope::Read, clock.now_ms(), None);
        assert_eq!(status(&base, &made_up.key).await, StatusCode::UNAUTHORIZED);
    }
    let late = KeyRing::generate("cli 2", Scope::Read, clock.now_ms(), None);
    cli.save_key(&late.record).await.unwrap();
    assert_eq!(
        status(&base, &late.key).await,
        StatusCode::UNAUTHORIZED,
        "the store is not read for every unknown key"
    );
    clock.advance(Duration::from_millis(100));
    assert_eq!(status(&base, &late.key).await, StatusCode::OK);
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn no_table_of_a_postgres_world_holds_a_raw_key() {
    use sqlx::{Connection, PgConnection};
    use worlds_postgres::testing::{database_up, test_url, TestSchema};
    if !database_up().await {
        return;
    }
    let schema = TestSchema::fresh();
    let mut config = WorldConfig::postgres(test_url());
    config.database.schema = schema.name().to_owned();
    let world = Arc::new(worlds_postgres::open(config).await.unwrap());
    let keys = ApiKeys::open(world.clone()).await.unwrap();
    let new = keys.create("ops", Scope::Admin, None).await.unwrap();
    keys.revoke(&new.record.id).await.unwrap();
    let again = keys.create("ops 2", Scope::Write, None).await.unwrap();
    assert_eq!(keys.verify(&again.key).await.unwrap().scope, Scope::Write);

    // Every row of every table of the world's schema, as text.
    let mut conn = PgConnection::connect(&test_url()).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1",
    )
    .bind(schema.name())
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(tables.iter().any(|t| t == "api_keys"), "{tables:?}");
    let mut seen_digest = false;
    for table in tables {
        let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT t::text FROM \"{}\".\"{table}\" t",
            schema.name()
        )))
        .fetch_all(&mut conn)
        .await
        .unwrap();
        for row in rows {
            for key in [&new.key, &again.key] {
                assert!(
                    !row.contains(&key[13..]),
                    "{table} holds a key's secret: {row}"
                );
            }
            seen_digest |= row.contains(&again.record.digest);
        }
    }
    assert!(seen_digest, "the digest is what is kept");
    conn.close().await.unwrap();
    world.shutdown().await.unwrap();
}

#[tokio::test]
async fn keys_are_managed_over_the_api_with_an_admin_key() {
    use serde_json::{json, Value};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let world = Arc::new(World::new(WorldConfig::memory()).unwrap());
    world.start().await.unwrap();
    let keys = ApiKeys::open(world.clone()).await.unwrap();
    let admin = keys.create("root", Scope::Admin, None).await.unwrap().key;
    let write = keys.create("svc", Scope::Write, None).await.unwrap().key;
    let server = serve(
        world.clone(),
        "127.0.0.1:0",
        ApiOptions::with_world_keys(keys),
    )
    .await
    .unwrap();
    let base = format!("http://{}", server.local_addr());
    let http = reqwest::Client::new();

    let refused = http
        .get(format!("{base}/v1/keys"))
        .bearer_auth(&write)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);

    let made = http
        .post(format!("{base}/v1/keys"))
        .bearer_auth(&admin)
        .json(&json!({ "scope": "read", "name": "dashboard", "expires_in_ms": 86_400_000 }))
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), StatusCode::CREATED);
    let made: Value = made.json().await.unwrap();
    let key = made["key"].as_str().unwrap().to_owned();
    let id = made["record"]["id"].as_str().unwrap().to_owned();
    assert!(made["record"]["expires_at"].is_i64());
    assert_eq!(status(&base, &key).await, StatusCode::OK);

    let listed: Value = http
        .get(format!("{base}/v1/keys"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 3);
    assert!(!listed.to_string().contains(&key[13..]), "records only");

    let revoked = http
        .post(format!("{base}/v1/keys/{id}/revoke"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::OK);
    assert_eq!(status(&base, &key).await, StatusCode::UNAUTHORIZED);
    let missing = http
        .post(format!("{base}/v1/keys/nOsUchId/revoke"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    server.shutdown().await;

    // A server whose keys the program holds has no key routes.
    let ring = Arc::new(worlds_server::auth::KeyRing::new());
    let root = ring
        .create("root", Scope::Admin, world.clock().now_ms(), None)
        .key;
    let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(ring))
        .await
        .unwrap();
    let answer = http
        .get(format!("http://{}/v1/keys", server.local_addr()))
        .bearer_auth(&root)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::NOT_IMPLEMENTED);
    server.shutdown().await;
    world.shutdown().await.unwrap();
}
