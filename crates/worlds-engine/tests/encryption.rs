//! Encryption at rest (`WorldConfig::encryption_keys`): what a world stores holds none of the
//! user data in the clear, reads back whole through the world, survives a key rotation, and a
//! world without the keys neither reads nor damages it.

use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use worlds_engine::prelude::*;
use worlds_engine::store::{EventStore, HybridStore, Reveal, RunStore, Store};
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{Definition, EncryptionKeys, ResolveData, WorkflowState};

/// In every piece of user data the workflow below handles.
const SECRET: &str = "tangerine-4242";

fn key(id: &str, byte: u8) -> String {
    format!("{id}:{}", format!("{byte:02x}").repeat(32))
}

fn keys(spec: &str) -> Option<EncryptionKeys> {
    Some(EncryptionKeys::parse(spec).unwrap())
}

/// The tokens the workflow's hooks handed out.
#[derive(Clone, Default)]
struct Tokens(Arc<Mutex<Vec<String>>>);

/// A workflow touching every kind of user data: its input, a step's output, a failed attempt's
/// error, a hook's payload, a stream chunk, a sleep, and its output.
fn definitions(tokens: &Tokens) -> (Vec<Definition>, Workflow<String, String>) {
    let echo = activity("echo", |_ctx: ActivityContext, s: String| async move {
        Ok::<_, StepError>(format!("{s}-echoed"))
    });
    let flaky = activity("flaky", |ctx: ActivityContext, s: String| async move {
        if ctx.attempt() == 1 {
            return Err(StepError::msg(format!("first try failed on {s}")));
        }
        Ok::<_, StepError>(s.len())
    });
    let handed = tokens.clone();
    let notify = activity("notify", move |_ctx: ActivityContext, token: String| {
        let handed = handed.clone();
        async move {
            handed.0.lock().push(token);
            Ok::<_, StepError>(())
        }
    });
    let (e, f, n) = (echo.clone(), flaky.clone(), notify.clone());
    let flow = workflow("secrets", move |ctx: WorkflowContext, input: String| {
        let (e, f, n) = (e.clone(), f.clone(), n.clone());
        async move {
            let echoed = ctx.run(&e, input.clone()).await?;
            let length = ctx.run(&f, input.clone()).await?;
            ctx.get_writable()
                .write(format!("chunk of {input}"))
                .map_err(|e| WorkflowError::msg(e.to_string()))?;
            let hook = ctx.create_hook::<String>();
            ctx.run(&n, hook.token().to_owned()).await?;
            let answer = hook.wait().await?;
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(format!("{echoed}|{length}|{answer}"))
        }
    });
    (
        vec![
            (&echo).into(),
            (&flaky).into(),
            (&notify).into(),
            (&flow).into(),
        ],
        flow,
    )
}

/// A started world on a hybrid store in `dir`, with these keys.
async fn world_on(dir: &Path, keys: Option<EncryptionKeys>, tokens: &Tokens) -> TestWorld {
    let mut config = WorldConfig::memory();
    config.encryption_keys = keys;
    let store: Arc<dyn Store> = Arc::new(HybridStore::open(dir).unwrap());
    let world = TestWorld::with_options(TestWorldOptions {
        config,
        store: Some(store),
        ..TestWorldOptions::default()
    })
    .await;
    for definition in definitions(tokens).0 {
        world.register(definition).unwrap();
    }
    world
}

async fn close(world: TestWorld) {
    world.shutdown().await.unwrap();
    drop(world);
}

/// Every byte under `dir`, file by file.
fn stored_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push((path.display().to_string(), std::fs::read(&path).unwrap()));
            }
        }
    }
    files
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

/// Starts the workflow and runs it to its sleep, the hook answered with the secret.
async fn run_to_the_sleep(world: &TestWorld, tokens: &Tokens) -> String {
    let (_, flow) = definitions(tokens);
    let run = world
        .execute(&flow, SECRET.to_owned(), WorkflowOptions::default())
        .await
        .unwrap();
    world.advance("10s").await;
    world.settle().await;
    let token = tokens.0.lock().last().cloned().expect("the hook's token");
    world
        .resume_hook(&token, &format!("yes from {SECRET}"))
        .await
        .unwrap();
    world.settle().await;
    let state = run.query().await.unwrap();
    assert_eq!(state.status, RunStatus::Running, "{state:?}");
    run.id
}

fn expected_output() -> String {
    format!("{SECRET}-echoed|{}|yes from {SECRET}", SECRET.len())
}

#[tokio::test]
async fn nothing_of_the_user_data_is_stored_in_the_clear_and_all_of_it_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Tokens::default();
    let world = world_on(dir.path(), keys(&key("k1", 1)), &tokens).await;
    let run_id = run_to_the_sleep(&world, &tokens).await;
    let state = world.run_until_complete(&run_id, "2h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(
        state.output.unwrap().decode::<String>().unwrap(),
        expected_output()
    );
    // Read through the world, everything is plain: the failed attempt's error included.
    let state = world.query(&run_id).await.unwrap();
    assert_eq!(state.input.unwrap().decode::<String>().unwrap(), SECRET);
    let failure = state
        .history
        .iter()
        .find_map(|e| match &e.kind {
            worlds_engine::EventKind::ActivityFailed { error, .. } => Some(error.message.clone()),
            _ => None,
        })
        .expect("the flaky step's first attempt");
    assert!(failure.contains(SECRET), "{failure}");
    let chunks = world
        .streams()
        .chunks(&run_id, "default", None, 10)
        .await
        .unwrap();
    assert_eq!(
        chunks.data[0].text(),
        Some(format!("chunk of {SECRET}").as_str())
    );
    close(world).await;

    // On disk: no trace of the secret, and the sealed values name their key.
    let files = stored_bytes(dir.path());
    assert!(!files.is_empty());
    for (path, bytes) in &files {
        assert!(
            !contains(bytes, SECRET),
            "{path} holds the secret in the clear"
        );
    }
    assert!(
        files
            .iter()
            .any(|(_, bytes)| contains(bytes, "\"key\":\"k1\"")),
        "sealed payloads name their key"
    );

    // Reopened with the key, the run reads back whole.
    let world = world_on(dir.path(), keys(&key("k1", 1)), &tokens).await;
    let state = world.query(&run_id).await.unwrap();
    assert_eq!(state.input.unwrap().decode::<String>().unwrap(), SECRET);
    assert_eq!(
        state.output.unwrap().decode::<String>().unwrap(),
        expected_output()
    );
    close(world).await;
}

#[tokio::test]
async fn after_a_key_rotation_old_runs_read_and_new_records_use_the_new_key() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Tokens::default();
    let world = world_on(dir.path(), keys(&key("k1", 1)), &tokens).await;
    let old_run = run_to_the_sleep(&world, &tokens).await;
    close(world).await;

    // k2 in front, k1 kept: the run sealed under k1 goes on, and what it records now is
    // sealed under k2.
    let rotated = format!("{},{}", key("k2", 2), key("k1", 1));
    let world = world_on(dir.path(), keys(&rotated), &tokens).await;
    let state = world.run_until_complete(&old_run, "2h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(
        state.output.unwrap().decode::<String>().unwrap(),
        expected_output()
    );
    close(world).await;
    let files = stored_bytes(dir.path());
    assert!(files.iter().any(|(_, b)| contains(b, "\"key\":\"k1\"")));
    assert!(files.iter().any(|(_, b)| contains(b, "\"key\":\"k2\"")));

    // Without k1, the run's old records do not open, and the store says which key is missing.
    let store = HybridStore::open(dir.path()).unwrap();
    let sealed = worlds_engine::store::SealedStore::new(
        Arc::new(store),
        EncryptionKeys::parse(&key("k2", 2)).unwrap(),
    );
    let error = sealed
        .get_run(&old_run, ResolveData::All)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("'k1'"), "{error}");
}

#[tokio::test]
async fn a_world_without_the_keys_leaves_encrypted_runs_alone_and_shows_them_as_encrypted() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Tokens::default();
    let world = world_on(dir.path(), keys(&key("k1", 1)), &tokens).await;
    let run_id = run_to_the_sleep(&world, &tokens).await;
    close(world).await;

    // No keys: the sleep ends, but the run is not driven, so it neither completes nor fails
    // on payloads its code cannot read.
    let world = world_on(dir.path(), None, &tokens).await;
    world.advance("2h").await;
    world.settle().await;
    let mut state = world.query(&run_id).await.unwrap();
    assert_eq!(state.status, RunStatus::Running, "{state:?}");
    // What people are shown.
    Reveal::new(None).state(&mut state);
    assert_eq!(state.input.as_ref().unwrap().as_json(), "\"(encrypted)\"");
    assert!(!format!("{state:?}").contains("$sealed"), "{state:?}");
    close(world).await;

    // The keys back: the run completes as if nothing happened.
    let world = world_on(dir.path(), keys(&key("k1", 1)), &tokens).await;
    let state: WorkflowState = world.run_until_complete(&run_id, "2h").await.unwrap();
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(
        state.output.unwrap().decode::<String>().unwrap(),
        expected_output()
    );
    close(world).await;
}

#[tokio::test]
async fn the_cli_and_dashboard_view_opens_a_store_read_directly_with_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Tokens::default();
    let world = world_on(dir.path(), keys(&key("k1", 1)), &tokens).await;
    let run_id = run_to_the_sleep(&world, &tokens).await;
    close(world).await;

    // Read as the CLI reads a directory: the store itself, no world in between.
    let store = HybridStore::open(dir.path()).unwrap();
    let mut state = store.get_run(&run_id, ResolveData::All).await.unwrap();
    assert!(state.input.as_ref().unwrap().as_json().contains("$sealed"));
    let mut history: Vec<worlds_engine::Event> = store
        .history(&run_id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| (**e).clone())
        .collect();
    let reveal = Reveal::new(keys(&key("k1", 1)));
    reveal.state(&mut state);
    for event in &mut history {
        reveal.event(event);
    }
    assert_eq!(state.input.unwrap().decode::<String>().unwrap(), SECRET);
    assert!(format!("{history:?}").contains(&format!("first try failed on {SECRET}")));
}
