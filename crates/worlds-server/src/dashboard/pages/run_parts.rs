//! The parts of a run's page beyond its story: what its outside runtime recorded (a Workflow
//! DevKit app's spec version, execution context and attributes), its steps, hooks and waits
//! one by one, and its streams with their first chunks. Payloads are written by
//! [`shown`]: binary ones as bytes, everything escaped by the template and cut
//! at a bound.

use worlds_engine::model::{ActivityStatus, HookStatus};

use super::shown::{bytes_line, clean, payload_text, ID_TEXT, NAME_TEXT, SHOWN_TEXT};
use super::*;

/// The most steps, hooks or waits listed one by one (the timeline and history have them all).
const LISTED: usize = 200;
/// The most attributes listed.
const ATTRIBUTES_SHOWN: usize = 256;
/// The longest attribute key or value shown, in bytes.
const ATTRIBUTE_TEXT: usize = 1024;
/// The chunks of a stream previewed on the page.
const CHUNKS_SHOWN: usize = 20;
/// The most text the listed steps' and hooks' values take on a page, in bytes (each value is
/// cut at [`SHOWN_TEXT`] too): past it, a value is named by its size only, so that a run of
/// many large values still has a page of bounded size.
const RECORDS_TEXT: usize = 1024 * 1024;

/// Records of a run listed one by one: the first [`LISTED`], and how many more it has.
pub(super) struct Listed<T> {
    /// The records listed, in the order the run made them.
    pub(super) items: Vec<T>,
    /// How many are not listed.
    pub(super) more: usize,
}

impl<T> Listed<T> {
    /// Nothing listed (a run the engine drives has its records in the timeline).
    pub(super) fn none() -> Self {
        Listed {
            items: Vec::new(),
            more: 0,
        }
    }

    /// How many the run has in all.
    pub(super) fn total(&self) -> usize {
        self.items.len() + self.more
    }
}

/// What is left of [`RECORDS_TEXT`] for the values of one page.
pub(super) struct Budget(usize);

impl Budget {
    /// All of [`RECORDS_TEXT`].
    pub(super) fn new() -> Self {
        Budget(RECORDS_TEXT)
    }

    /// `text` if the page has room for it, else a note of its size.
    fn take(&mut self, text: String) -> String {
        if text.len() <= self.0 {
            self.0 -= text.len();
            text
        } else {
            format!(
                "(not shown: {} bytes of text, more than this page has room for; the API has it)",
                shown::grouped(text.len())
            )
        }
    }
}

/// What the run's outside runtime recorded about it.
pub(super) struct RuntimeView {
    /// The runtime's protocol version, said in words.
    pub(super) spec_version: String,
    /// The execution context, as text, or empty.
    pub(super) context: String,
    /// (key, value), sorted by key.
    pub(super) attributes: Vec<(String, String)>,
    /// How many attributes are not listed.
    pub(super) more: usize,
}

impl RuntimeView {
    /// What the run's runtime recorded, or `None` for a run without a runtime's record.
    pub(super) fn of(state: &WorkflowState) -> Option<RuntimeView> {
        let runtime = state.runtime.as_deref()?;
        let spec_version = match runtime.spec_version {
            Some(v) if v >= 2 => format!("{v} (Workflow DevKit, event-sourced World)"),
            Some(v) => format!("{v} (Workflow DevKit)"),
            None => "not given".to_owned(),
        };
        Some(RuntimeView {
            spec_version,
            context: runtime
                .execution_context
                .as_ref()
                .map(payload_text)
                .unwrap_or_default(),
            attributes: runtime
                .attributes
                .iter()
                .take(ATTRIBUTES_SHOWN)
                .map(|(k, v)| (clean(k, ATTRIBUTE_TEXT), clean(v, ATTRIBUTE_TEXT)))
                .collect(),
            more: runtime.attributes.len().saturating_sub(ATTRIBUTES_SHOWN),
        })
    }
}

/// One step of a run.
pub(super) struct StepView {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) status: &'static str,
    pub(super) attempt: u32,
    pub(super) started: String,
    pub(super) duration: String,
    pub(super) input: String,
    pub(super) output: String,
    pub(super) error: String,
    /// The error as the runtime serialized it, or empty.
    pub(super) error_data: String,
}

fn step_status(status: ActivityStatus) -> &'static str {
    match status {
        ActivityStatus::Scheduled => "pending",
        ActivityStatus::Running => "running",
        ActivityStatus::Retrying => "retrying",
        ActivityStatus::Completed => "completed",
        ActivityStatus::Failed => "failed",
    }
}

/// The steps of a run, in the order they were created (the first [`LISTED`]), their values
/// taken from `budget`.
pub(super) fn steps(state: &WorkflowState, now: Millis, budget: &mut Budget) -> Listed<StepView> {
    let items = state
        .activities
        .iter()
        .take(LISTED)
        .map(|a| StepView {
            id: clean(&a.id, ID_TEXT),
            name: clean(&a.name, NAME_TEXT),
            status: step_status(a.status),
            attempt: a.attempt,
            started: a.started_at.map(clock_text).unwrap_or_default(),
            duration: a
                .started_at
                .map(|s| duration_text(a.completed_at.unwrap_or(now) - s))
                .unwrap_or_default(),
            input: budget.take(a.input.as_ref().map(payload_text).unwrap_or_default()),
            output: budget.take(a.output.as_ref().map(payload_text).unwrap_or_default()),
            error: budget.take(
                a.error
                    .as_ref()
                    .map(|e| {
                        let text = match &e.stack {
                            Some(stack) if !stack.is_empty() => format!("{e}\n{stack}"),
                            _ => e.to_string(),
                        };
                        clean(&text, SHOWN_TEXT)
                    })
                    .unwrap_or_default(),
            ),
            error_data: budget.take(
                a.error
                    .as_ref()
                    .and_then(|e| e.data.as_deref())
                    .map(payload_text)
                    .unwrap_or_default(),
            ),
        })
        .collect();
    Listed {
        items,
        more: state.activities.len().saturating_sub(LISTED),
    }
}

/// One hook of a run, whatever its state.
pub(super) struct HookLine {
    pub(super) id: String,
    pub(super) status: &'static str,
    pub(super) created: String,
    /// How many payloads it received and when the last came, or empty.
    pub(super) received: String,
    pub(super) metadata: String,
    /// The last payload it received, or empty.
    pub(super) payload: String,
}

fn hook_status(status: HookStatus) -> &'static str {
    match status {
        HookStatus::Waiting => "waiting",
        HookStatus::Received => "received",
        HookStatus::Expired => "expired",
        HookStatus::Conflict => "conflict (its token was held by another hook)",
        HookStatus::Disposed => "disposed",
    }
}

/// The hooks of a run (the first [`LISTED`]), with the last payload each received (a hook
/// of a run driven from outside takes payloads until it is disposed), their values taken from
/// `budget`. Tokens are not shown (only their digests are kept, and a token resumes its hook).
pub(super) fn hooks(
    state: &WorkflowState,
    history: &[Event],
    budget: &mut Budget,
) -> Listed<HookLine> {
    let items = state
        .hooks
        .iter()
        .take(LISTED)
        .map(|h| {
            let mut received = 0usize;
            let mut last = None;
            for event in history {
                if let EventKind::HookReceived {
                    hook_id, payload, ..
                } = &event.kind
                {
                    if *hook_id == h.id {
                        received += 1;
                        last = Some(payload);
                    }
                }
            }
            let received = match (received, h.received_at) {
                (0, _) | (_, None) => String::new(),
                (1, Some(at)) => format!("a payload received {}", clock_text(at)),
                (n, Some(at)) => format!(
                    "{} payloads received, the last {}",
                    shown::grouped(n),
                    clock_text(at)
                ),
            };
            HookLine {
                id: clean(&h.id, ID_TEXT),
                status: hook_status(h.status),
                created: clock_text(h.created_at),
                received,
                metadata: budget.take(h.metadata.as_ref().map(payload_text).unwrap_or_default()),
                payload: budget.take(last.map(payload_text).unwrap_or_default()),
            }
        })
        .collect();
    Listed {
        items,
        more: state.hooks.len().saturating_sub(LISTED),
    }
}

/// One wait (a durable timer) of a run.
pub(super) struct WaitView {
    /// The runtime's id for it (a DevKit `wait_…`), else its command position.
    pub(super) id: String,
    pub(super) resume_at: String,
    /// When it completed, or empty while it waits.
    pub(super) completed: String,
}

/// The waits of a run (the first [`LISTED`]), from its history.
pub(super) fn waits(history: &[Event]) -> Listed<WaitView> {
    let mut waits: Vec<(u32, WaitView)> = Vec::new();
    let mut more = 0;
    for event in history {
        match &event.kind {
            EventKind::TimerScheduled { .. } if waits.len() >= LISTED => more += 1,
            EventKind::TimerScheduled {
                position,
                fire_at,
                timer_id,
            } => waits.push((
                *position,
                WaitView {
                    id: timer_id
                        .as_deref()
                        .map_or_else(|| format!("command #{position}"), |id| clean(id, ID_TEXT)),
                    resume_at: clock_text(*fire_at),
                    completed: String::new(),
                },
            )),
            EventKind::TimerFired { position } => {
                if let Some((_, wait)) = waits.iter_mut().rev().find(|(p, _)| p == position) {
                    wait.completed = clock_text(event.timestamp);
                }
            }
            _ => {}
        }
    }
    Listed {
        items: waits.into_iter().map(|(_, wait)| wait).collect(),
        more,
    }
}

/// One stream of a run, with its first chunks.
pub(super) struct StreamView {
    pub(super) name: String,
    /// `3 chunks, done`, or why the chunks are not shown.
    pub(super) summary: String,
    /// (index, the chunk on one line), the first [`CHUNKS_SHOWN`].
    pub(super) chunks: Vec<(u64, String)>,
}

/// The run's streams, each with its length and first chunks.
pub(super) async fn streams(api: &Api, run_id: &str) -> Vec<StreamView> {
    let streams = api.world.streams();
    let names = streams.list(run_id).await.unwrap_or_default();
    let mut views = Vec::with_capacity(names.len());
    for name in names {
        let info = streams.info(run_id, &name).await;
        let page = streams.chunks(run_id, &name, None, CHUNKS_SHOWN).await;
        let summary = match (&info, &page) {
            (Ok(info), Ok(_)) => format!(
                "{} chunk{}, {}",
                shown::grouped(info.len() as usize),
                if info.len() == 1 { "" } else { "s" },
                if info.done { "done" } else { "open" }
            ),
            (Err(e), _) | (_, Err(e)) => format!("its chunks cannot be shown: {e}"),
        };
        let chunks = page
            .map(|page| {
                page.data
                    .iter()
                    .map(|c| (c.index, bytes_line(&c.data)))
                    .collect()
            })
            .unwrap_or_default();
        views.push(StreamView {
            name,
            summary,
            chunks,
        });
    }
    views
}
