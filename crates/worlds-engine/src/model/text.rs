//! The one rule for text a caller chooses as an identifier or a name: it may not hold NUL.

use crate::error::WorldError;

use super::EventKind;

/// Refuses NUL (U+0000) in the identifiers and names an event carries: workflow ids and names,
/// idempotency keys, code versions, task queues, step ids and names, hook ids, wait ids, child
/// run ids, patch and compensation ids. A caller may choose each of them (over the API, or as
/// a DevKit app choosing its step, hook and wait ids), and PostgreSQL cannot keep NUL in text,
/// so the engine refuses it before any store sees it, naming the field: the answer is the
/// same 400 on every backend. Payloads may hold NUL (`"\u0000"` in JSON) and are kept byte for
/// byte; a hook token may too (only its digest is stored).
///
/// The engine checks every record it writes with this (`Journal`); stores do not, so a
/// history written before the rule is read back as it is.
pub(crate) fn check_text(kind: &EventKind) -> Result<(), WorldError> {
    match kind {
        EventKind::WorkflowQueued(run) => {
            refuse_nul("workflow id", &run.workflow_id)?;
            refuse_nul("workflow name", &run.name)?;
            for (field, value) in [
                ("idempotency key", &run.idempotency_key),
                ("code version", &run.code_version),
                ("task queue", &run.task_queue),
                ("parent run id", &run.parent_id),
            ] {
                if let Some(value) = value {
                    refuse_nul(field, value)?;
                }
            }
            Ok(())
        }
        EventKind::ActivityScheduled {
            activity_id, name, ..
        } => {
            refuse_nul("step id", activity_id)?;
            refuse_nul("step name", name)
        }
        EventKind::HookCreated { hook_id, .. } => refuse_nul("hook id", hook_id),
        EventKind::TimerScheduled {
            timer_id: Some(timer_id),
            ..
        } => refuse_nul("wait id", timer_id),
        EventKind::ChildWorkflowStarted { child_id, name, .. } => {
            refuse_nul("child run id", child_id)?;
            refuse_nul("workflow name", name)
        }
        EventKind::PatchRecorded { patch_id, .. } => refuse_nul("patch id", patch_id),
        EventKind::CompensationAdded {
            compensation_id, ..
        } => refuse_nul("compensation id", compensation_id),
        _ => Ok(()),
    }
}

/// Refuses `value` of `field` if it holds NUL.
fn refuse_nul(field: &str, value: &str) -> Result<(), WorldError> {
    if value.contains('\0') {
        return Err(WorldError::invalid(
            field,
            format!(
                "{value:?} holds a NUL character (U+0000), which identifiers and names may not hold; leave it out (payloads may hold it)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::QueuedRun;
    use crate::Payload;

    #[test]
    fn nul_in_an_identifier_is_refused_naming_the_field() {
        let mut run = QueuedRun::new("w", "order-1", Payload::null());
        assert!(check_text(&EventKind::WorkflowQueued(Box::new(run.clone()))).is_ok());
        run.idempotency_key = Some("key\0".into());
        let err = check_text(&EventKind::WorkflowQueued(Box::new(run))).unwrap_err();
        assert_eq!(err.http_status(), 400);
        assert!(
            matches!(&err, WorldError::InvalidInput { field, .. } if field == "idempotency key"),
            "{err}"
        );
        assert!(err.to_string().contains("NUL"), "{err}");
        let step = EventKind::ActivityScheduled {
            position: 0,
            activity_id: "step\0".into(),
            name: "s".into(),
            input: Payload::null(),
            options: None,
            inline: false,
        };
        assert!(check_text(&step).is_err());
        // Payloads are not identifiers.
        let done = EventKind::WorkflowCompleted {
            output: Payload::from(serde_json::json!("a\u{0}b")),
        };
        assert!(check_text(&done).is_ok());
    }
}
