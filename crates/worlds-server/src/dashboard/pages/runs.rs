//! The runs page: counts by status, filters kept in the URL, cursor pages.

use super::shown::{clean, NAME_TEXT};
use super::*;

// ---- runs ----

/// The list's filters, as the form sends them.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RunsQuery {
    #[serde(default)]
    status: String,
    #[serde(default)]
    workflow: String,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    after: String,
    #[serde(default)]
    before: String,
    #[serde(default)]
    order: String,
    /// `true`: quarantined runs only, with their reasons.
    #[serde(default)]
    quarantined: String,
    #[serde(default)]
    cursor: String,
}

/// The filters shown back in the form.
struct FilterView {
    status: String,
    workflow: String,
    prefix: String,
    after: String,
    before: String,
    order: String,
    quarantined: bool,
}

struct CountView {
    status: &'static str,
    shown: String,
}

struct RunRow {
    id: String,
    workflow_id: String,
    name: String,
    status: &'static str,
    created: String,
    created_iso: String,
    duration: String,
    /// Why it is quarantined, if it is.
    quarantine: String,
}

#[derive(Template)]
#[template(path = "runs.html")]
struct Runs {
    page: Page,
    counts: Vec<CountView>,
    statuses: Vec<&'static str>,
    workflow_names: Vec<String>,
    filter: FilterView,
    rows: Vec<RunRow>,
    next: String,
}

pub(crate) async fn runs(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Query(q): Query<RunsQuery>,
) -> Response {
    let mut filter = WorkflowQueryFilter::new().limit(PAGE);
    let mut bad = Vec::new();
    if !q.status.is_empty() {
        match q.status.parse::<RunStatus>() {
            Ok(status) => filter.status = Some(StatusFilter::Any(vec![status])),
            Err(e) => bad.push(e.to_string()),
        }
    }
    if !q.workflow.trim().is_empty() {
        filter.workflow_name = Some(q.workflow.trim().to_owned());
    }
    if !q.prefix.trim().is_empty() {
        filter.workflow_id_prefix = Some(q.prefix.trim().to_owned());
    }
    for (field, text, slot) in [
        ("started after", &q.after, &mut filter.started_after),
        ("started before", &q.before, &mut filter.started_before),
    ] {
        if !text.is_empty() {
            match local_time_ms(text) {
                Some(ms) => *slot = Some(ms),
                None => bad.push(format!("{field}: {text:?} is not a date and time")),
            }
        }
    }
    filter.oldest_first = q.order == "oldest";
    let quarantined = q.quarantined == "true";
    if quarantined {
        filter.quarantined = Some(true);
    }
    if !q.cursor.is_empty() {
        filter.cursor = Some(q.cursor.clone());
    }
    let page_of_runs = match api.world.list_runs(filter).await {
        Ok(page) => page,
        Err(e) => return failure(&principal, &e),
    };
    let mut counts = Vec::new();
    for status in RunStatus::ALL {
        // One more than the cap tells "1000" from "more than 1000".
        let count = api
            .world
            .count_runs(WorkflowQueryFilter::new().status(status), COUNT_CAP + 1)
            .await
            .unwrap_or(0);
        counts.push(CountView {
            status: status.as_str(),
            shown: if count > COUNT_CAP {
                format!("{COUNT_CAP}+")
            } else {
                count.to_string()
            },
        });
    }
    let next = match (&page_of_runs.cursor, page_of_runs.has_more) {
        (Some(cursor), true) => {
            let mut pairs = form_urlencoded_pairs(&q);
            pairs.push(("cursor", cursor.clone()));
            format!("/?{}", query(&pairs))
        }
        _ => String::new(),
    };
    let mut page = Page::of(&principal, if quarantined { "quarantine" } else { "runs" });
    page.live = "runs".into();
    if !bad.is_empty() {
        page.notice = format!("Some filters were left out: {}", bad.join("; "));
    }
    let now = api.world.clock().now_ms();
    let view = Runs {
        page,
        counts,
        statuses: RunStatus::ALL.iter().map(|s| s.as_str()).collect(),
        workflow_names: api.world.workflow_names(),
        filter: FilterView {
            status: q.status.clone(),
            workflow: q.workflow.clone(),
            prefix: q.prefix.clone(),
            after: q.after.clone(),
            before: q.before.clone(),
            order: if q.order == "oldest" {
                "oldest"
            } else {
                "newest"
            }
            .into(),
            quarantined,
        },
        rows: page_of_runs
            .data
            .iter()
            .map(|run| RunRow {
                id: run.id.clone(),
                workflow_id: clean(&run.workflow_id, NAME_TEXT),
                name: clean(&run.name, NAME_TEXT),
                status: run.status.as_str(),
                created: clock_text(run.created_at),
                created_iso: iso(run.created_at),
                duration: duration_text(run.completed_at.unwrap_or(now) - run.created_at),
                quarantine: run.quarantine.clone().unwrap_or_default(),
            })
            .collect(),
        next,
    };
    render(&view, StatusCode::OK)
}

fn form_urlencoded_pairs(q: &RunsQuery) -> Vec<(&'static str, String)> {
    [
        ("status", &q.status),
        ("workflow", &q.workflow),
        ("prefix", &q.prefix),
        ("after", &q.after),
        ("before", &q.before),
        ("order", &q.order),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| (k, v.clone()))
    .collect()
}
