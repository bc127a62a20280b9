//! The retention page: how long finished runs are kept (for the world and per workflow), when
//! the world sweeps next and what its last sweep did; for an admin key, a sweep now and a
//! preview of what one would remove.

use std::collections::BTreeMap;

use worlds_engine::duration::Dur;
use worlds_engine::{PruneReport, RetentionRule};

use super::shown::grouped;
use super::*;

// ---- retention ----

/// One class of finished runs and how long it is kept, in words.
struct KeptView {
    class: &'static str,
    kept: String,
}

/// A workflow's own rule: its name and each class in words (or what it takes from the
/// world's policy).
struct RuleView {
    workflow: String,
    completed: String,
    failed: String,
    cancelled: String,
    quarantined: String,
}

/// What a sweep did, or a preview would do, as the page writes it.
struct ReportView {
    /// The sweep's run id; empty for a preview.
    id: String,
    /// The sweep's run status; empty for a preview.
    status: String,
    /// When the policy judged (the sweep's start, or the preview's time).
    at: String,
    at_iso: String,
    done: bool,
    looked_at: u64,
    removed: u64,
    events: u64,
    /// A preview only: the bytes the removed events take, in words; empty otherwise.
    bytes: String,
    kept_by_policy: u64,
    kept_in_use: u64,
    kept_for_bulk: u64,
    already_gone: u64,
    /// When the first run kept for a time may go; empty if none was.
    next_due: String,
}

#[derive(Template)]
#[template(path = "retention.html")]
struct Retention {
    page: Page,
    enabled: bool,
    classes: Vec<KeptView>,
    rules: Vec<RuleView>,
    interval: String,
    next_sweep: String,
    next_sweep_iso: String,
    last: Option<ReportView>,
    preview: Option<ReportView>,
    /// Whether the session's key may sweep (admin scope): the buttons show only then.
    admin: bool,
}

/// The retention page (`?notice=` shows a notice at its top).
pub(crate) async fn retention(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Query(notice): Query<Notice>,
) -> Response {
    retention_page(&api, &principal, notice.notice, None).await
}

async fn retention_page(
    api: &Api,
    principal: &Principal,
    notice: String,
    preview: Option<PruneReport>,
) -> Response {
    let status = match api.world.retention().await {
        Ok(status) => status,
        Err(e) => return failure(principal, &e),
    };
    let mut page = Page::of(principal, "retention");
    page.notice = notice;
    let policy = &status.policy;
    let classes = vec![
        KeptView {
            class: "completed",
            kept: kept_words(policy.completed),
        },
        KeptView {
            class: "failed",
            kept: kept_words(policy.failed),
        },
        KeptView {
            class: "cancelled",
            kept: kept_words(policy.cancelled),
        },
        KeptView {
            class: "quarantined",
            kept: kept_words(policy.quarantined),
        },
    ];
    let world = RetentionRule {
        completed: Some(policy.completed),
        failed: Some(policy.failed),
        cancelled: Some(policy.cancelled),
        quarantined: Some(policy.quarantined),
    };
    let view = Retention {
        page,
        enabled: status.enabled,
        classes,
        rules: rule_views(&policy.workflows, &world),
        interval: span_words(policy.sweep_interval),
        next_sweep: status.next_sweep_at.map(clock_text).unwrap_or_default(),
        next_sweep_iso: status.next_sweep_at.map(iso).unwrap_or_default(),
        last: status.last_sweep.as_ref().map(report_view),
        preview: preview.as_ref().map(report_view),
        admin: principal.scope.allows(Scope::Admin),
    };
    render(&view, StatusCode::OK)
}

/// Starts a sweep now (admin scope) and sends the browser to its run page.
pub(crate) async fn sweep(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
) -> Response {
    if !principal.scope.allows(Scope::Admin) {
        return forbidden(&principal, "start a retention sweep");
    }
    match api.world.prune().await {
        Ok(id) => Redirect::to(&format!(
            "/runs/{}?{}",
            segment(&id),
            query(&[("notice", "Retention sweep started.")])
        ))
        .into_response(),
        Err(e) => failure(&principal, &e),
    }
}

/// What a sweep would remove now (admin scope: it reads every history it would remove),
/// shown on the retention page; nothing is removed.
pub(crate) async fn preview(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
) -> Response {
    if !principal.scope.allows(Scope::Admin) {
        return forbidden(&principal, "preview a retention sweep");
    }
    match api.world.prune_preview().await {
        Ok(report) => retention_page(&api, &principal, String::new(), Some(report)).await,
        Err(e) => failure(&principal, &e),
    }
}

/// The per-workflow rules, by name; a class a rule leaves out reads as the world's.
fn rule_views(rules: &BTreeMap<String, RetentionRule>, world: &RetentionRule) -> Vec<RuleView> {
    let cell = |own: Option<Dur>, world: Option<Dur>| match own {
        Some(own) => kept_words(own),
        None => format!("as the world: {}", kept_words(world.unwrap_or_default())),
    };
    rules
        .iter()
        .map(|(name, rule)| RuleView {
            workflow: shown::clean(name, shown::NAME_TEXT),
            completed: cell(rule.completed, world.completed),
            failed: cell(rule.failed, world.failed),
            cancelled: cell(rule.cancelled, world.cancelled),
            quarantined: cell(rule.quarantined, world.quarantined),
        })
        .collect()
}

fn report_view(report: &PruneReport) -> ReportView {
    ReportView {
        id: report.id.clone().unwrap_or_default(),
        status: report
            .status
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default(),
        at: clock_text(report.at),
        at_iso: iso(report.at),
        done: report.done,
        looked_at: report.looked_at,
        removed: report.removed,
        events: report.events,
        bytes: report.bytes.map(bytes_words).unwrap_or_default(),
        kept_by_policy: report.kept_by_policy,
        kept_in_use: report.kept_in_use,
        kept_for_bulk: report.kept_for_bulk,
        already_gone: report.already_gone,
        next_due: report.next_due.map(clock_text).unwrap_or_default(),
    }
}

/// How long a class is kept: its duration in words, or "kept for ever" for zero.
fn kept_words(keep: Dur) -> String {
    if keep.0.is_zero() {
        "kept for ever".to_owned()
    } else {
        span_words(keep)
    }
}

/// A duration in words, largest unit first: `7 days`, `1 day 12 hours`, `1 hour 30 minutes`.
fn span_words(span: Dur) -> String {
    let ms = span.as_millis();
    if ms == 0 {
        return "0 seconds".to_owned();
    }
    let units: [(u64, &str); 5] = [
        (86_400_000, "day"),
        (3_600_000, "hour"),
        (60_000, "minute"),
        (1_000, "second"),
        (1, "millisecond"),
    ];
    let mut rest = ms;
    let mut parts = Vec::new();
    for (size, name) in units {
        let count = rest / size;
        rest %= size;
        if count > 0 {
            parts.push(format!(
                "{} {name}{}",
                grouped(usize::try_from(count).unwrap_or(usize::MAX)),
                if count == 1 { "" } else { "s" }
            ));
        }
    }
    parts.join(" ")
}

/// `1 234 567 bytes (1.2 MiB)`.
fn bytes_words(bytes: u64) -> String {
    let exact = format!(
        "{} byte{}",
        grouped(usize::try_from(bytes).unwrap_or(usize::MAX)),
        if bytes == 1 { "" } else { "s" }
    );
    let units = [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    match units.iter().find(|(size, _)| bytes >= *size) {
        Some((size, unit)) => format!("{exact} ({:.1} {unit})", bytes as f64 / *size as f64),
        None => exact,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn dur(secs: u64) -> Dur {
        Dur(Duration::from_secs(secs))
    }

    #[test]
    fn durations_read_in_words() {
        assert_eq!(kept_words(dur(0)), "kept for ever");
        assert_eq!(kept_words(dur(7 * 86_400)), "7 days");
        assert_eq!(span_words(dur(86_400 + 12 * 3600)), "1 day 12 hours");
        assert_eq!(span_words(dur(5400)), "1 hour 30 minutes");
        assert_eq!(span_words(dur(1)), "1 second");
        assert_eq!(
            span_words(Dur(Duration::from_millis(1500))),
            "1 second 500 milliseconds"
        );
    }

    #[test]
    fn sizes_read_in_words() {
        assert_eq!(bytes_words(1), "1 byte");
        assert_eq!(bytes_words(999), "999 bytes");
        assert_eq!(bytes_words(1_572_864), "1 572 864 bytes (1.5 MiB)");
    }

    #[test]
    fn a_rule_takes_what_it_leaves_out_from_the_world() {
        let world = RetentionRule {
            completed: Some(dur(7 * 86_400)),
            failed: Some(dur(0)),
            cancelled: Some(dur(0)),
            quarantined: Some(dur(0)),
        };
        let mut rules = BTreeMap::new();
        rules.insert(
            "audit".to_owned(),
            RetentionRule {
                completed: Some(dur(0)),
                failed: Some(dur(3600)),
                ..RetentionRule::default()
            },
        );
        let rows = rule_views(&rules, &world);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].workflow, "audit");
        assert_eq!(rows[0].completed, "kept for ever");
        assert_eq!(rows[0].failed, "1 hour");
        assert_eq!(rows[0].cancelled, "as the world: kept for ever");
    }
}
