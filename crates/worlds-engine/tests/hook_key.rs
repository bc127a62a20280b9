//! Where a durable world's hook key comes from: a configured secret, the environment or a key
//! file keep it out of the data directory, so a copy of the directory cannot derive tokens.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use worlds_engine::hooks::HOOK_SECRET_ENV;
use worlds_engine::prelude::*;
use worlds_engine::HookSecret;

const DIR_VAR: &str = "WORLDS_HOOK_KEY_TEST_DIR";

fn file_config(dir: &Path) -> WorldConfig {
    let mut config = WorldConfig::default();
    config.persistence = Persistence::File;
    config.persistence_path = dir.to_path_buf();
    config.min_workers = 1;
    config.max_workers = 2;
    config
}

/// Runs a workflow that makes a hook on a world with `config`; returns the hook's token.
async fn token_of_a_new_hook(config: WorldConfig) -> String {
    let world = World::new(config).unwrap();
    let flow = workflow("hooked", |ctx: WorkflowContext, _: ()| async move {
        let hook = ctx.create_hook::<u32>();
        Ok::<_, WorkflowError>(hook.token().to_owned())
    });
    world.register(&flow).unwrap();
    world.start().await.unwrap();
    let token = world
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap()
        .result()
        .await
        .unwrap();
    world.shutdown().await.unwrap();
    token
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

fn assert_no_key_in(dir: &Path) {
    for file in files_under(dir) {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.contains("key"), "{} looks like a key", file.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_secret_writes_nothing_key_like_into_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = file_config(dir.path());
    config.hook_secret = Some(HookSecret("configured".into()));
    let token = token_of_a_new_hook(config).await;
    assert_eq!(token.len(), 48);
    assert_no_key_in(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_file_outside_the_directory_is_used_and_nothing_is_written_into_it() {
    let data = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let key_file = outside.path().join("hook.key");
    std::fs::write(&key_file, format!("{}\n", "ab".repeat(32))).unwrap();
    let mut config = file_config(data.path());
    config.hook_key_file = Some(key_file);
    token_of_a_new_hook(config).await;
    assert_no_key_in(data.path());
}

#[test]
fn an_unreadable_key_file_is_refused_when_the_world_opens() {
    let data = tempfile::tempdir().unwrap();
    let mut config = file_config(data.path());
    config.hook_key_file = Some(data.path().join("no-such.key"));
    let error = World::new(config).unwrap_err().to_string();
    assert!(error.contains("hook_key_file"), "{error}");
}

/// The child role: opens a world with only the environment variable set.
#[test]
#[ignore = "child process of `the_environment_secret_keeps_the_key_out_of_the_directory`"]
fn hook_key_env_child_entry() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let token = runtime.block_on(token_of_a_new_hook(file_config(Path::new(&dir))));
    println!("TOKEN {token}");
}

#[test]
fn the_environment_secret_keeps_the_key_out_of_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    // A child process, so that the variable is set for it alone.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hook_key_env_child_entry",
            "--include-ignored",
            "--nocapture",
        ])
        .env(DIR_VAR, dir.path())
        .env(HOOK_SECRET_ENV, "from the environment")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("TOKEN "),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_key_in(dir.path());
}
