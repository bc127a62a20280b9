//! A conformance check for encryption at rest over the store: a world that cannot open a run
//! stored encrypted (no keys, another key, the right key id with other bytes) does not write
//! to it, and what it was asked to write is nowhere in the store.

use super::*;

use crate::config::EncryptionKeys;
use crate::store::{EventStore, SealedStore};
use crate::testing::{TestWorld, TestWorldOptions};
use crate::{Unopened, WorldConfig};

/// What a world that cannot open the run is asked to write into it.
const FORGED: &str = "forged-by-a-world-without-the-key";

/// A test world on `store`, with these keys; `started`, or only taking calls (what starting
/// does with a run its keys do not open is not what this check is about).
async fn world_on(
    store: &Arc<dyn Store>,
    keys: Option<EncryptionKeys>,
    started: bool,
) -> TestWorld {
    let mut config = WorldConfig::memory();
    config.encryption_keys = keys;
    TestWorld::with_options(TestWorldOptions {
        config,
        store: Some(store.clone()),
        autostart: started,
        ..TestWorldOptions::default()
    })
    .await
}

/// The refusal every write of a world that cannot open the run must give.
fn assert_refused<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, WorldError>,
    reason: impl Fn(&Unopened) -> bool,
) {
    match result {
        Err(WorldError::Encrypted {
            what: scope,
            reason: why,
        }) if reason(&why) => {
            assert!(scope.starts_with("run:"), "{what}: {scope}");
            assert_eq!(
                WorldError::Encrypted {
                    what: scope,
                    reason: why
                }
                .http_status(),
                501
            );
        }
        other => panic!("{what}: expected a refusal naming what the world lacks, got {other:?}"),
    }
}

/// A run stored encrypted and waiting on a hook: a world without keys, one with another key
/// and one whose key `k1` has other bytes each refuse to resume the hook, cancel the run or
/// write to its streams ([`WorldError::Encrypted`], 501, naming the key), and the store holds
/// nothing of what they were asked to write. The world with the key then resumes the hook, and
/// the payload it recorded is sealed.
pub async fn a_world_that_cannot_open_a_run_does_not_write_to_it(store: Arc<dyn Store>) {
    let m = Maker::new();
    let k1 = EncryptionKeys::new("k1", [21; 32]).unwrap();
    let token = format!("tok-{}", m.run_id());
    let run_id = m.run_id();
    {
        // Written as a world with k1 writes it.
        let sealed: Arc<dyn Store> = Arc::new(SealedStore::new(store.clone(), k1.clone()));
        let queued = m.queued(
            &run_id,
            Queued {
                input: Some(p(json!("the secret input"))),
                ..Queued::named("sealed-waiter")
            },
        );
        sealed.create_run(queued).await.unwrap();
        let hook_id = m.ids.hook_id();
        m.append(
            &*sealed,
            &run_id,
            vec![
                EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                },
                super::hooks::created(0, &hook_id, &crate::hooks::token_digest(&token)),
            ],
        )
        .await
        .unwrap();
    }
    let events_before = store.history(&run_id, 0).await.unwrap().len();

    let refusers = [
        (
            None,
            &(|r: &Unopened| matches!(r, Unopened::NoKeys { key_id } if key_id == "k1"))
                as &dyn Fn(&Unopened) -> bool,
        ),
        (
            Some(EncryptionKeys::new("k2", [22; 32]).unwrap()),
            &|r: &Unopened| matches!(r, Unopened::MissingKey { key_id, .. } if key_id == "k1"),
        ),
        (
            Some(EncryptionKeys::new("k1", [23; 32]).unwrap()),
            &|r: &Unopened| matches!(r, Unopened::DoesNotOpen { key_id } if key_id == "k1"),
        ),
    ];
    for (keys, reason) in refusers {
        let world = world_on(&store, keys, false).await;
        assert_refused(
            "resume_hook",
            world.resume_hook(&token, &json!(FORGED)).await,
            reason,
        );
        assert_refused(
            "cancel",
            world.cancel_with_reason(&run_id, FORGED).await,
            reason,
        );
        assert_refused(
            "stream write",
            world
                .streams()
                .write(&run_id, "default", FORGED.as_bytes().to_vec())
                .await,
            reason,
        );
        world.shutdown().await.unwrap();
    }

    // Nothing was written.
    let history = store.history(&run_id, 0).await.unwrap();
    assert_eq!(history.len(), events_before, "{history:?}");
    assert!(!format!("{history:?}").contains(FORGED), "{history:?}");
    let (chunks, _) = store
        .stream_chunks(&run_id, "default", 0, 10)
        .await
        .unwrap();
    assert!(chunks.is_empty(), "{chunks:?}");
    let state = store.get_run(&run_id, ResolveData::All).await.unwrap();
    assert_eq!(state.status, RunStatus::Running);

    // The world with the key writes, sealed.
    let world = world_on(&store, Some(k1.clone()), true).await;
    world
        .resume_hook(&token, &json!("the real answer"))
        .await
        .unwrap();
    world.shutdown().await.unwrap();
    let history = store.history(&run_id, 0).await.unwrap();
    let recorded = history
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::HookReceived { payload, .. } => Some(payload.clone()),
            _ => None,
        })
        .expect("the hook's payload recorded");
    assert!(
        recorded.as_json().contains("$sealed") && !recorded.as_json().contains("real answer"),
        "{recorded}"
    );
    let opened = SealedStore::new(store.clone(), k1)
        .history(&run_id, 0)
        .await
        .unwrap();
    assert!(format!("{opened:?}").contains("the real answer"));
}
