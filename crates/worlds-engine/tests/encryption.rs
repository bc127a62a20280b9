//! Encryption at rest (`WorldConfig::encryption_keys`): what a world stores holds none of the
//! user data in the clear, reads back whole through the world, survives a key rotation, and a
//! world without the keys neither reads nor damages it.

use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use worlds_engine::prelude::*;
use worlds_engine::store::{EventStore, FileStore, HybridStore, Reveal, RunStore, Store};
use worlds_engine::testing::{TestWorld, TestWorldOptions};
use worlds_engine::{Definition, EncryptionKeys, ResolveData, Unopened, WorkflowState};

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
    world_on_disk(Disk::Hybrid, dir, keys, tokens).await
}

/// The durable stores, whose bytes the tests read.
#[derive(Clone, Copy, Debug)]
enum Disk {
    Hybrid,
    File,
}

/// A started world on a store of this kind in `dir`, with these keys.
async fn world_on_disk(
    disk: Disk,
    dir: &Path,
    keys: Option<EncryptionKeys>,
    tokens: &Tokens,
) -> TestWorld {
    let mut config = WorldConfig::memory();
    config.encryption_keys = keys;
    let store: Arc<dyn Store> = match disk {
        Disk::Hybrid => Arc::new(HybridStore::open(dir).unwrap()),
        Disk::File => Arc::new(FileStore::open(dir).unwrap()),
    };
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

/// What a world without the keys is asked to write into an encrypted run.
const FORGED: &str = "forged-answer-7781";

/// The refusal of a world without keys: typed, naming the key, 501.
fn assert_no_keys<T: std::fmt::Debug>(what: &str, result: Result<T, WorldError>) {
    match result {
        Err(e @ WorldError::Encrypted { .. }) => {
            assert!(
                matches!(&e, WorldError::Encrypted { reason: Unopened::NoKeys { key_id }, .. } if key_id == "k1"),
                "{what}: {e:?}"
            );
            assert!(
                e.to_string()
                    .contains("encrypted, and this world has no keys"),
                "{what}: {e}"
            );
            assert_eq!(e.http_status(), 501, "{what}");
        }
        other => panic!("{what}: expected the no-keys refusal, got {other:?}"),
    }
}

/// Starts the workflow with the keys and runs it until its hook waits; returns the run id.
async fn run_to_the_hook(world: &TestWorld, tokens: &Tokens) -> String {
    let (_, flow) = definitions(tokens);
    let run = world
        .execute(&flow, SECRET.to_owned(), WorkflowOptions::default())
        .await
        .unwrap();
    world.advance("10s").await;
    world.settle().await;
    assert!(!tokens.0.lock().is_empty(), "the hook's token handed out");
    run.id
}

/// Regression: a world opened without the keys resumed a waiting encrypted run's hook,
/// recording the payload in plain text in the hybrid segment or the file-mode run log, and the
/// run later completed with it while the real answer was refused. Now every write of such a
/// world is refused, nothing of it reaches the disk, and the real answer goes through.
#[tokio::test]
async fn a_world_without_the_keys_writes_nothing_into_an_encrypted_run_on_disk() {
    for disk in [Disk::Hybrid, Disk::File] {
        let dir = tempfile::tempdir().unwrap();
        let tokens = Tokens::default();
        let world = world_on_disk(disk, dir.path(), keys(&key("k1", 1)), &tokens).await;
        let run_id = run_to_the_hook(&world, &tokens).await;
        let token = tokens.0.lock().last().cloned().unwrap();
        close(world).await;

        let world = world_on_disk(disk, dir.path(), None, &tokens).await;
        assert_no_keys("resume_hook", world.resume_hook(&token, FORGED).await);
        assert_no_keys("cancel", world.cancel_with_reason(&run_id, FORGED).await);
        assert_no_keys(
            "stream write",
            world
                .streams()
                .write(&run_id, "default", FORGED.as_bytes().to_vec())
                .await,
        );
        assert_no_keys(
            "stream close",
            world.streams().close(&run_id, "default").await,
        );
        // Reading: the chunk the run wrote is refused too, not handed out sealed.
        assert_no_keys(
            "stream chunks",
            world.streams().chunks(&run_id, "default", None, 10).await,
        );
        let mut live = world.streams().read(&run_id, "default", 0).await.unwrap();
        assert_no_keys(
            "live stream",
            futures::StreamExt::next(&mut live).await.unwrap(),
        );
        // For people, the same chunk is shown as encrypted.
        let mut shown = world
            .streams()
            .read_shown(&run_id, "default", 0)
            .await
            .unwrap();
        let chunk = futures::StreamExt::next(&mut shown).await.unwrap().unwrap();
        assert_eq!(chunk.text(), Some("(encrypted)"));
        drop((live, shown));
        close(world).await;

        for (path, bytes) in stored_bytes(dir.path()) {
            assert!(
                !contains(&bytes, FORGED),
                "{disk:?}: {path} holds what the world without keys was asked to write"
            );
        }

        // With the keys, the real answer is taken and the run completes with it.
        let world = world_on_disk(disk, dir.path(), keys(&key("k1", 1)), &tokens).await;
        world
            .resume_hook(&token, &format!("yes from {SECRET}"))
            .await
            .unwrap();
        let state = world.run_until_complete(&run_id, "2h").await.unwrap();
        assert_eq!(state.status, RunStatus::Completed, "{disk:?}: {state:?}");
        assert_eq!(
            state.output.unwrap().decode::<String>().unwrap(),
            expected_output()
        );
        close(world).await;
    }
}

/// Regression: without the keys, `result()` answered a serde error ("invalid type: map,
/// expected a string") and schedule inputs came back as sealed envelopes. Both now answer
/// that the data is encrypted and this world has no keys, and the schedule is left alone.
#[tokio::test]
async fn a_world_without_the_keys_reads_results_and_schedules_as_encrypted() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Tokens::default();
    let world = world_on(dir.path(), keys(&key("k1", 1)), &tokens).await;
    let run_id = run_to_the_sleep(&world, &tokens).await;
    world.run_until_complete(&run_id, "2h").await.unwrap();
    world
        .schedules()
        .cron("nightly", "secrets", SECRET, "0 3 * * *")
        .await
        .unwrap();
    close(world).await;

    let world = world_on(dir.path(), None, &tokens).await;
    let handle = world.handle::<String>(&run_id).await.unwrap();
    assert_no_keys("result", handle.result().await);
    assert_no_keys("schedule get", world.schedules().get("nightly").await);
    assert_no_keys("schedule list", world.schedules().list().await);
    assert_no_keys("schedule pause", world.schedules().pause("nightly").await);
    // Not fired here either: a firing would start a run with the sealed input.
    world.advance("30h").await;
    world.settle().await;
    close(world).await;

    let world = world_on(dir.path(), keys(&key("k1", 1)), &tokens).await;
    let schedule = world.schedules().get("nightly").await.unwrap();
    assert!(!schedule.paused);
    assert_eq!(schedule.input.unwrap().decode::<String>().unwrap(), SECRET);
    let runs = world
        .list_runs(worlds_engine::WorkflowQueryFilter::default())
        .await
        .unwrap();
    assert_eq!(
        runs.data.len(),
        1,
        "no run started by the world without keys"
    );
    close(world).await;
}

/// Regression: with the right key id but other key bytes, every call answered 500 "a sealed
/// value does not open" with no word of the key. Now the answer is the same status as for a
/// missing key (501) and says the key may be wrong.
#[tokio::test]
async fn a_key_with_the_right_id_and_other_bytes_is_named_as_possibly_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Tokens::default();
    let world = world_on(dir.path(), keys(&key("k1", 1)), &tokens).await;
    let run_id = run_to_the_hook(&world, &tokens).await;
    let token = tokens.0.lock().last().cloned().unwrap();
    close(world).await;

    // Not started: what it answers does not hang on what starting does with the run.
    let mut config = WorldConfig::memory();
    config.encryption_keys = keys(&key("k1", 9));
    let store: Arc<dyn Store> = Arc::new(HybridStore::open(dir.path()).unwrap());
    let world = TestWorld::with_options(TestWorldOptions {
        config,
        store: Some(store),
        autostart: false,
        ..TestWorldOptions::default()
    })
    .await;
    for (what, result) in [
        ("query", world.query(&run_id).await.map(|_| ())),
        (
            "resume_hook",
            world.resume_hook(&token, FORGED).await.map(|_| ()),
        ),
    ] {
        let e = result.unwrap_err();
        assert!(
            matches!(&e, WorldError::Encrypted { reason: Unopened::DoesNotOpen { key_id }, .. } if key_id == "k1"),
            "{what}: {e:?}"
        );
        assert!(e.to_string().contains("'k1'"), "{what}: {e}");
        assert!(e.to_string().contains("may not be the ones"), "{what}: {e}");
        assert_eq!(e.http_status(), 501, "{what}");
    }
    close(world).await;
    for (path, bytes) in stored_bytes(dir.path()) {
        assert!(!contains(&bytes, FORGED), "{path}");
    }
}
