//! The tracing layer that turns a world's events into log entries.

use std::fmt;
use std::sync::Weak;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span;
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::{LogCategory, LogLevel, Logs};

/// Name of the span that marks work done for one world.
pub(crate) const WORLD_SPAN: &str = "world";
/// Target of that span.
pub(crate) const WORLD_TARGET: &str = "worlds_engine::world";

/// Which world a `world` span belongs to, kept in the span's extensions.
struct WorldTag(u64);

/// A [`Layer`] that writes the events of one world to its log files.
///
/// Made by `WorldLogs::layer`, which wraps it in the world's minimum-level filter. An event
/// belongs to the world if it happens inside the world's span (`WorldLogs::span`; the engine
/// runs its workers and background loops inside it). Events inside another world's span are
/// left to that world's layer; events inside no world's span (the application's own, or the
/// engine's where it runs on a caller's task) are taken when the world's
/// [`capture_unattributed`](super::LogsConfig::capture_unattributed) is on.
pub struct WorldLogLayer {
    logs: Weak<Logs>,
    world: u64,
    capture_unattributed: bool,
}

impl fmt::Debug for WorldLogLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorldLogLayer")
            .field("world", &self.world)
            .finish()
    }
}

impl WorldLogLayer {
    pub(crate) fn new(logs: Weak<Logs>, world: u64, capture_unattributed: bool) -> Self {
        Self {
            logs,
            world,
            capture_unattributed,
        }
    }
}

impl<S> Layer<S> for WorldLogLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let meta = attrs.metadata();
        if meta.name() != WORLD_SPAN || meta.target() != WORLD_TARGET {
            return;
        }
        let mut visitor = WorldIdVisitor(None);
        attrs.record(&mut visitor);
        if let (Some(world), Some(span)) = (visitor.0, ctx.span(id)) {
            // Several worlds' layers see the same span; they all tag it alike.
            span.extensions_mut().replace(WorldTag(world));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if super::direct::is_already_written() {
            // Its entry went to the world's files directly.
            return;
        }
        let world = ctx.event_scope(event).and_then(|scope| {
            scope
                .into_iter()
                .find_map(|span| span.extensions().get::<WorldTag>().map(|tag| tag.0))
        });
        match world {
            Some(world) if world != self.world => return,
            None if !self.capture_unattributed => return,
            _ => {}
        }
        let Some(logs) = self.logs.upgrade() else {
            return;
        };
        let meta = event.metadata();
        let mut fields = FieldsVisitor::default();
        event.record(&mut fields);
        let category = fields
            .category
            .or_else(|| LogCategory::of_target(meta.target()))
            .unwrap_or_else(logs.ambient);
        logs.record(
            LogLevel::from_tracing(*meta.level()),
            category,
            fields.message,
            fields.metadata,
        );
    }
}

struct WorldIdVisitor(Option<u64>);

impl Visit for WorldIdVisitor {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "id" {
            self.0 = Some(value);
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn fmt::Debug) {}
}

/// Collects an event's message, its `category` field and its other fields.
#[derive(Default)]
struct FieldsVisitor {
    message: String,
    category: Option<LogCategory>,
    metadata: Map<String, Value>,
}

impl FieldsVisitor {
    fn put(&mut self, field: &Field, value: Value) {
        match field.name() {
            "message" => {
                self.message = match value {
                    Value::String(text) => text,
                    other => other.to_string(),
                }
            }
            "category" => match value.as_str().map(str::parse::<LogCategory>) {
                Some(Ok(category)) => self.category = Some(category),
                // Not a category: keep it as data.
                _ => {
                    self.metadata.insert("category".to_owned(), value);
                }
            },
            name => {
                self.metadata.insert(name.to_owned(), value);
            }
        }
    }
}

impl Visit for FieldsVisitor {
    fn record_f64(&mut self, field: &Field, value: f64) {
        let value = serde_json::Number::from_f64(value)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(value.to_string()));
        self.put(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
}
