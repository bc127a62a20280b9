//! The pauses page: the workflows and task queues paused (who, why, since when), a form to
//! pause one and a button to resume each (admin sessions).

use super::shown::{self, one_line, NAME_TEXT};
use super::*;
use worlds_engine::model::{Pause, PauseTarget};

struct PauseRow {
    kind: &'static str,
    /// `workflow` or `task_queue`, as the resume URL spells it.
    kind_path: &'static str,
    name: String,
    by: String,
    reason: String,
    since: String,
}

#[derive(Template)]
#[template(path = "pauses.html")]
struct Pauses {
    page: Page,
    rows: Vec<PauseRow>,
    /// The session may pause and resume (admin).
    can_change: bool,
}

fn row(pause: &Pause) -> PauseRow {
    let (kind, kind_path) = match pause.target {
        PauseTarget::Workflow(_) => ("workflow", "workflow"),
        PauseTarget::TaskQueue(_) => ("task queue", "task_queue"),
    };
    PauseRow {
        kind,
        kind_path,
        name: one_line(pause.target.name(), NAME_TEXT),
        by: one_line(&pause.by, NAME_TEXT),
        reason: one_line(&pause.reason, shown::SHOWN_TEXT),
        since: clock_text(pause.since),
    }
}

pub(crate) async fn pauses(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Query(notice): Query<Notice>,
) -> Response {
    let list = match api.world.pauses().await {
        Ok(list) => list,
        Err(e) => return failure(&principal, &e),
    };
    let mut page = Page::of(&principal, "pauses");
    page.notice = notice.notice;
    let view = Pauses {
        page,
        rows: list.iter().map(row).collect(),
        can_change: principal.scope.allows(Scope::Admin),
    };
    render(&view, StatusCode::OK)
}

#[derive(Deserialize)]
pub(crate) struct PauseForm {
    kind: String,
    name: String,
    #[serde(default)]
    reason: String,
}

pub(crate) async fn pause(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Form(form): Form<PauseForm>,
) -> Response {
    if !principal.scope.allows(Scope::Admin) {
        return forbidden(&principal, "pause workflows or task queues");
    }
    let target = match PauseTarget::parse(&form.kind, form.name.trim()) {
        Ok(target) => target,
        Err(e) => return failure(&principal, &e),
    };
    match api
        .world
        .pause(target, &principal.subject, form.reason.trim())
        .await
    {
        Ok(pause) => {
            let notice = format!("Paused {}.", pause.target);
            Redirect::to(&format!("/pauses?{}", query(&[("notice", notice)]))).into_response()
        }
        Err(e) => failure(&principal, &e),
    }
}

pub(crate) async fn resume(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path((kind, name)): Path<(String, String)>,
) -> Response {
    if !principal.scope.allows(Scope::Admin) {
        return forbidden(&principal, "resume workflows or task queues");
    }
    let target = match PauseTarget::parse(&kind, &name) {
        Ok(target) => target,
        Err(e) => return failure(&principal, &e),
    };
    let notice = match api.world.resume(&target, &principal.subject).await {
        Ok(Some(_)) => format!("Resumed {target}."),
        Ok(None) => format!("{target} was not paused."),
        Err(e) => return failure(&principal, &e),
    };
    Redirect::to(&format!("/pauses?{}", query(&[("notice", notice)]))).into_response()
}
