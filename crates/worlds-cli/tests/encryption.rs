//! `worlds runs show` and `runs list` on a directory whose payloads are encrypted at rest:
//! with the keys in the environment they show the values, without them `(encrypted)`.

mod common;

use common::text;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use serde_json::json;
use worlds_engine::clock::{Clock, VirtualClock};
use worlds_engine::ids::IdGenerator;
use worlds_engine::model::{QueuedRun, EVENT_FORMAT_VERSION};
use worlds_engine::store::{EventStore, FileStore, RunStore, SealedStore, Store};
use worlds_engine::{EncryptionKeys, Event, EventKind, Payload, StructuredError};

const KEY: &str = "k1:0101010101010101010101010101010101010101010101010101010101010101";

/// One failed run, written through encryption at rest: input "secret input", error "secret
/// failure".
fn populate(dir: &Path) -> String {
    let clock = VirtualClock::new(1_700_000_000_000);
    let ids = IdGenerator::new(Arc::new(clock.clone()));
    let event = |run_id: &str, kind: EventKind| Event {
        id: ids.event_id(),
        run_id: run_id.to_owned(),
        seq: 0,
        timestamp: clock.now_ms(),
        version: EVENT_FORMAT_VERSION,
        kind,
    };
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir).unwrap());
    let store = SealedStore::new(store, EncryptionKeys::parse(KEY).unwrap());
    futures::executor::block_on(async {
        let run = ids.run_id();
        let queued = EventKind::WorkflowQueued(Box::new(QueuedRun::new(
            "greet".to_owned(),
            run.clone(),
            Payload::from(json!("secret input")),
        )));
        store.create_run(event(&run, queued)).await.unwrap();
        let rest = vec![
            event(
                &run,
                EventKind::WorkflowStarted {
                    attempt: 1,
                    first_position: 0,
                },
            ),
            event(
                &run,
                EventKind::WorkflowFailed {
                    error: StructuredError::new("secret failure"),
                },
            ),
        ];
        store.append(&run, rest).await.unwrap();
        run
    })
}

fn worlds(args: &[&str], dir: &Path, keys: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_worlds"));
    command.args(args).arg("--dir").arg(dir);
    command.env_remove(worlds_engine::ENCRYPTION_KEYS_ENV);
    if let Some(keys) = keys {
        command.env(worlds_engine::ENCRYPTION_KEYS_ENV, keys);
    }
    command.output().unwrap()
}

#[test]
fn runs_show_opens_encrypted_values_with_the_keys_and_hides_them_without() {
    let dir = tempfile::tempdir().unwrap();
    let run = populate(dir.path());

    let with = worlds(&["runs", "show", &run], dir.path(), Some(KEY));
    assert!(with.status.success(), "{}", text(&with.stderr));
    let shown = text(&with.stdout);
    assert!(shown.contains("secret input"), "{shown}");
    assert!(shown.contains("secret failure"), "{shown}");

    let without = worlds(&["runs", "show", &run], dir.path(), None);
    assert!(without.status.success(), "{}", text(&without.stderr));
    let shown = text(&without.stdout);
    assert!(!shown.contains("secret"), "{shown}");
    assert!(!shown.contains("$sealed"), "{shown}");
    assert!(shown.contains("(encrypted)"), "{shown}");

    let json = worlds(&["runs", "show", &run, "--json"], dir.path(), None);
    let shown = text(&json.stdout);
    assert!(
        !shown.contains("$sealed") && shown.contains("(encrypted)"),
        "{shown}"
    );
}

#[test]
fn runs_list_shows_encrypted_errors_as_encrypted_without_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    let without = worlds(&["runs", "list"], dir.path(), None);
    assert!(without.status.success(), "{}", text(&without.stderr));
    let listed = text(&without.stdout);
    assert!(
        listed.contains("(encrypted)") && !listed.contains("$sealed"),
        "{listed}"
    );
    let with = worlds(&["runs", "list"], dir.path(), Some(KEY));
    assert!(
        text(&with.stdout).contains("secret failure"),
        "{}",
        text(&with.stdout)
    );
}
