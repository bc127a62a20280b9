//! What people are shown of values stored encrypted.

use crate::config::EncryptionKeys;
use crate::model::stream::StreamChunk;
use crate::model::{Event, WorkflowState};

use super::cipher::Cipher;
use super::fields::{Fields, Way};

/// What people are shown of stored data that may be encrypted: the CLI and the dashboard pass
/// what they read through it. With the world's keys, sealed values are opened (a store read
/// directly, not through a world, holds them sealed); without them, or with keys that do not
/// open a value, the value is shown as `(encrypted)`. Plain values are left as they are.
///
/// ```
/// use worlds_engine::store::Reveal;
/// use worlds_engine::{Event, EventKind, Payload};
/// let sealed = r#"{"$sealed":1,"key":"k1","nonce":"AAAAAAAAAAAAAAAA","data":"AAAA"}"#;
/// let mut event = Event {
///     id: "evnt_1".into(),
///     run_id: "wrun_1".into(),
///     seq: 2,
///     timestamp: 0,
///     version: worlds_engine::model::EVENT_FORMAT_VERSION,
///     kind: EventKind::WorkflowCompleted { output: Payload::from_json(sealed)? },
/// };
/// Reveal::new(None).event(&mut event);
/// let EventKind::WorkflowCompleted { output } = event.kind else { unreachable!() };
/// assert_eq!(output.as_json(), r#""(encrypted)""#);
/// # Ok::<(), serde_json::Error>(())
/// ```
pub struct Reveal {
    cipher: Option<Cipher>,
}

impl Reveal {
    /// Shows with these keys (`None`: shows every sealed value as `(encrypted)`).
    pub fn new(keys: Option<EncryptionKeys>) -> Reveal {
        Reveal {
            cipher: keys.map(Cipher::new),
        }
    }

    fn fields(&self, run_id: &str) -> Fields<'_> {
        Fields {
            cipher: self.cipher.as_ref(),
            scope: Fields::run_scope(run_id),
            way: Way::Show,
        }
    }

    /// A run's state (its steps, hooks and history included), as people see it.
    pub fn state(&self, state: &mut WorkflowState) {
        let id = state.id.clone();
        // Showing never fails: a value that does not open is shown as encrypted.
        let _ = self.fields(&id).state(state);
    }

    /// An event, as people see it.
    pub fn event(&self, event: &mut Event) {
        let run_id = event.run_id.clone();
        let _ = self.fields(&run_id).event_kind(&mut event.kind);
    }

    /// An error of a run, as people see it.
    pub fn error(&self, run_id: &str, error: &mut crate::error::StructuredError) {
        let _ = self.fields(run_id).error(error);
    }

    /// A stream chunk of a run, as people see it.
    pub fn chunk(&self, run_id: &str, chunk: &mut StreamChunk) {
        let _ = self.fields(run_id).bytes(&mut chunk.data);
    }
}
