//! The dashboard's retention page over real loopback HTTP, without a browser: with no policy it
//! says every run is kept for ever and how to set one; with one it shows each class in words,
//! the per-workflow rules (escaped), the sweep interval and the next sweep; an admin's preview
//! removes nothing and counts what would go, an admin's sweep opens its run page and its counts
//! then show on the page; a session of less scope sees no buttons and its POST is refused, and
//! a POST that does not come from the dashboard's own page is refused. A schedule whose last
//! run a sweep removed no longer links to it on the schedules page, nor names it as its last
//! run over the API.

#![cfg(feature = "dashboard")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::redirect::Policy;
use reqwest::Client;
use serde_json::json;
use worlds_engine::clock::VirtualClock;
use worlds_engine::duration::Dur;
use worlds_engine::prelude::*;
use worlds_engine::store::{MemoryStore, ScheduleChange, ScheduleStore};
use worlds_engine::{
    ResolveData, RetentionConfig, RetentionRule, WorkflowQueryFilter, PRUNE_WORKFLOW,
};
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions, ApiServer};

/// A workflow name a program may give a rule: it must reach the page as text.
const HOSTILE: &str = "<script>alert(\"x\")</script>";

struct Served {
    world: Arc<World>,
    server: ApiServer,
    base: String,
    http: Client,
    keys: Arc<KeyRing>,
}

impl Served {
    /// A memory world judging by `policy`, with the workflow `done`, served with a key ring.
    async fn start(policy: RetentionConfig) -> Served {
        let mut config = WorldConfig::memory();
        config.retention = policy;
        Served::serving(World::new(config).unwrap()).await
    }

    /// `world`, started with the workflow `done` and served with a key ring.
    async fn serving(world: World) -> Served {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let world = Arc::new(world);
        let done = workflow("done", |_ctx: WorkflowContext, n: u64| async move {
            Ok::<_, WorkflowError>(n)
        });
        world.register(&done).unwrap();
        world.start().await.unwrap();
        let keys = Arc::new(KeyRing::new());
        let server = serve(
            world.clone(),
            "127.0.0.1:0",
            ApiOptions::with_keys(keys.clone()),
        )
        .await
        .unwrap();
        let base = format!("http://{}", server.local_addr());
        let http = Client::builder().redirect(Policy::none()).build().unwrap();
        Served {
            world,
            server,
            base,
            http,
            keys,
        }
    }

    /// Signs in from the dashboard's own page with a new key of `scope`: the `Cookie` header.
    async fn sign_in(&self, scope: Scope) -> String {
        let key = self
            .keys
            .create("operator", scope, self.world.clock().now_ms(), None)
            .key;
        let login = self
            .http
            .post(format!("{}/login", self.base))
            .header("origin", &self.base)
            .header("sec-fetch-site", "same-origin")
            .form(&[("key", key.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(login.status().as_u16(), 303, "signed in");
        let set_cookie = login.headers()["set-cookie"].to_str().unwrap();
        set_cookie.split(';').next().unwrap().to_owned()
    }

    /// `GET path` signed in with `cookie`: (status, body).
    async fn page(&self, cookie: &str, path: &str) -> (u16, String) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", cookie)
            .header("accept", "text/html")
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }

    /// `POST path` from the dashboard's own page, signed in with `cookie`.
    async fn act(&self, cookie: &str, path: &str) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.base))
            .header("cookie", cookie)
            .header("origin", &self.base)
            .header("sec-fetch-site", "same-origin")
            .form(&[("from", "the page")])
            .send()
            .await
            .unwrap()
    }

    /// Runs `done` `n` times, each to its end: their ids.
    async fn finished_runs(&self, n: u64) -> Vec<String> {
        let mut ids = Vec::new();
        for i in 0..n {
            let handle = self
                .world
                .execute_by_name::<u64, u64>("done", i, WorkflowOptions::default())
                .await
                .unwrap();
            handle.result().await.unwrap();
            ids.push(handle.id);
        }
        ids
    }

    /// The sweeps started on this world (a world with a policy starts one as it starts),
    /// once each has ended.
    async fn sweeps(&self) -> Vec<String> {
        let sweeps: Vec<String> = self
            .world
            .list_runs(WorkflowQueryFilter::new().workflow_name(PRUNE_WORKFLOW))
            .await
            .unwrap()
            .data
            .into_iter()
            .map(|run| run.id)
            .collect();
        for id in &sweeps {
            self.world.prune_report_when_done(id).await.unwrap();
        }
        sweeps
    }

    /// The sweep a world with a policy starts as it starts, once it has ended (alone: no
    /// other sweep was started yet).
    async fn first_sweep(&self) -> Vec<String> {
        let first = tokio::time::timeout(Duration::from_secs(15), async {
            loop {
                let sweeps = self.sweeps().await;
                if !sweeps.is_empty() {
                    return sweeps;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the world's first sweep");
        assert_eq!(first.len(), 1, "{first:?}");
        first
    }

    async fn stop(self) {
        self.server.shutdown().await;
        self.world.shutdown().await.unwrap();
    }
}

fn days(n: u64) -> Dur {
    Dur(Duration::from_secs(n * 86_400))
}

/// Completed runs 7 days, failed 30 days, the rest for ever; `done` completed for 1 ms (so its
/// runs can go at once), and a rule under a name made of markup.
fn policy() -> RetentionConfig {
    let mut workflows = BTreeMap::new();
    workflows.insert(
        "done".to_owned(),
        RetentionRule {
            completed: Some(Dur(Duration::from_millis(1))),
            ..RetentionRule::default()
        },
    );
    workflows.insert(
        HOSTILE.to_owned(),
        RetentionRule {
            failed: Some(Dur::ZERO),
            ..RetentionRule::default()
        },
    );
    RetentionConfig {
        completed: days(7),
        failed: days(30),
        workflows,
        sweep_interval: days(1),
        ..RetentionConfig::default()
    }
}

/// The text of the `<dd data-count="{name}">` inside the section with id `section`.
fn count(page: &str, section: &str, name: &str) -> u64 {
    let from = page
        .find(&format!("id=\"{section}\""))
        .unwrap_or_else(|| panic!("no section {section}: {page}"));
    let part = &page[from..];
    let at = part
        .find(&format!("data-count=\"{name}\">"))
        .unwrap_or_else(|| panic!("no count {name} in {section}: {part}"));
    let text = &part[at + name.len() + 14..];
    text[..text.find('<').unwrap()]
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_policy_the_page_says_every_run_is_kept_and_how_to_set_a_policy() {
    let s = Served::start(RetentionConfig::default()).await;
    let admin = s.sign_in(Scope::Admin).await;

    let (status, page) = s.page(&admin, "/").await;
    assert_eq!(status, 200);
    let nav = &page[page.find("<nav").unwrap()..page.find("</nav>").unwrap()];
    assert!(nav.contains("href=\"/retention\""), "{nav}");

    let (status, page) = s.page(&admin, "/retention").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("href=\"/retention\" aria-current=\"page\""),
        "the section is marked: {page}"
    );
    assert!(
        page.contains("No retention policy is set: every run is kept for ever."),
        "{page}"
    );
    assert!(
        page.contains("<code>WorldConfig::retention</code>"),
        "{page}"
    );
    assert!(page.contains("worlds serve --keep-completed 7d"), "{page}");
    assert!(page.contains("none by itself"), "{page}");
    assert!(
        !page.contains("id=\"next-sweep\""),
        "no sweep comes: {page}"
    );
    assert!(
        page.contains("No sweep has run on this store yet."),
        "{page}"
    );
    // An admin may still sweep (it removes nothing) or preview.
    assert!(page.contains("action=\"/retention/sweep\""), "{page}");
    assert!(page.contains("formaction=\"/retention/preview\""), "{page}");

    let preview = s.act(&admin, "/retention/preview").await;
    assert_eq!(preview.status().as_u16(), 200);
    let preview = preview.text().await.unwrap();
    assert_eq!(count(&preview, "preview", "removed"), 0, "{preview}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_policy_a_preview_and_an_admins_sweep_with_its_counts() {
    let s = Served::start(policy()).await;
    let admin = s.sign_in(Scope::Admin).await;
    // The sweep the world starts as it starts, before any run ended: it removes nothing.
    let first = s.first_sweep().await;
    let ids = s.finished_runs(3).await;
    // Past the 1 ms `done`'s rule keeps completed runs.
    tokio::time::sleep(Duration::from_millis(5)).await;

    let (status, page) = s.page(&admin, "/retention").await;
    assert_eq!(status, 200, "{page}");
    assert!(!page.contains("No retention policy"), "{page}");
    for line in [
        "completed: 7 days",
        "failed: 30 days",
        "cancelled: kept for ever",
        "quarantined: kept for ever",
    ] {
        assert!(page.contains(&format!(">{line}</li>")), "{line}: {page}");
    }
    let rule = &page[page.find("data-workflow=\"done\"").expect("done's rule")..];
    let rule = &rule[..rule.find("</tr>").unwrap()];
    assert!(rule.contains("<td>1 millisecond</td>"), "{rule}");
    assert!(rule.contains("<td>as the world: 30 days</td>"), "{rule}");
    assert!(
        rule.contains("<td>as the world: kept for ever</td>"),
        "{rule}"
    );
    // The rule named with markup is text.
    assert!(!page.contains("<script>alert"), "{page}");
    assert!(page.contains("&#60;script&#62;alert("), "{page}");
    assert!(page.contains("every 1 day"), "{page}");
    assert!(
        page.contains("id=\"next-sweep\"><time datetime=\""),
        "{page}"
    );
    let last = &page[page.find("id=\"last-sweep\"").unwrap()..];
    assert!(
        last.contains(&format!("<a href=\"/runs/{0}\">{0}</a>", first[0])),
        "the world's own first sweep: {last}"
    );
    assert_eq!(count(&page, "last-sweep", "removed"), 0, "{page}");

    // The preview counts what would go and removes nothing.
    let preview = s.act(&admin, "/retention/preview").await;
    assert_eq!(preview.status().as_u16(), 200);
    let preview = preview.text().await.unwrap();
    assert_eq!(count(&preview, "preview", "removed"), 3, "{preview}");
    assert!(count(&preview, "preview", "events") > 0, "{preview}");
    let bytes = &preview[preview.find("data-count=\"bytes\">").expect("bytes")..];
    assert!(
        bytes[..bytes.find("</dd>").unwrap()].contains(" bytes"),
        "{bytes}"
    );
    for id in &ids {
        assert!(s.world.get_run(id, ResolveData::None).await.is_ok(), "{id}");
    }
    assert_eq!(s.sweeps().await, first, "a preview starts no sweep");

    // Sweep now: the browser goes to the sweep's run page.
    let started = s.act(&admin, "/retention/sweep").await;
    assert_eq!(started.status().as_u16(), 303);
    let location = started.headers()["location"].to_str().unwrap().to_owned();
    let sweep = location
        .strip_prefix("/runs/")
        .and_then(|rest| rest.split('?').next())
        .unwrap_or_else(|| panic!("{location}"))
        .to_owned();
    assert!(
        location.contains("notice=Retention+sweep+started"),
        "{location}"
    );
    let report = s.world.prune_report_when_done(&sweep).await.unwrap();
    assert_eq!(report.removed, 3, "{report:?}");
    for id in &ids {
        assert!(
            s.world.get_run(id, ResolveData::None).await.is_err(),
            "{id}"
        );
    }

    // The sweep's run page: a normal run, its steps `page N` with their counts.
    let (status, run) = s.page(&admin, &location).await;
    assert_eq!(status, 200, "{run}");
    assert!(run.contains("Retention sweep started."), "{run}");
    assert!(run.contains(PRUNE_WORKFLOW), "{run}");
    assert!(run.contains("page 0"), "{run}");
    assert!(
        run.contains("&#34;removed&#34;: 3"),
        "the step's output: {run}"
    );

    // The page now shows the last sweep.
    let (status, page) = s.page(&admin, "/retention").await;
    assert_eq!(status, 200);
    let last = &page[page.find("id=\"last-sweep\"").unwrap()..];
    assert!(
        last.contains(&format!("<a href=\"/runs/{sweep}\">{sweep}</a>")),
        "{last}"
    );
    assert!(
        last.contains("<span class=\"status completed\">completed</span>"),
        "{last}"
    );
    assert!(!last.contains("(in progress)"), "{last}");
    assert!(
        last.contains("<dt>Ran at</dt><dd><time datetime=\""),
        "{last}"
    );
    assert_eq!(count(&page, "last-sweep", "removed"), 3, "{page}");
    assert_eq!(count(&page, "last-sweep", "events"), report.events);
    assert!(report.events > 0);
    assert_eq!(
        count(&page, "last-sweep", "kept-by-policy"),
        report.kept_by_policy
    );
    assert_eq!(count(&page, "last-sweep", "kept-in-use"), 0);
    assert_eq!(count(&page, "last-sweep", "kept-for-bulk"), 0);
    assert_eq!(count(&page, "last-sweep", "already-gone"), 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_the_admin_scope_sees_no_buttons_and_cannot_sweep() {
    let s = Served::start(policy()).await;
    s.finished_runs(1).await;
    let before = s.first_sweep().await;
    for scope in [Scope::Write, Scope::Read] {
        let cookie = s.sign_in(scope).await;
        let (status, page) = s.page(&cookie, "/retention").await;
        assert_eq!(status, 200, "{scope:?}: {page}");
        assert!(
            page.contains("completed: 7 days"),
            "{scope:?} sees the policy"
        );
        assert!(!page.contains("Sweep now"), "{scope:?}: {page}");
        assert!(!page.contains("/retention/sweep"), "{scope:?}: {page}");
        assert!(!page.contains("/retention/preview"), "{scope:?}: {page}");

        for path in ["/retention/sweep", "/retention/preview"] {
            let refused = s.act(&cookie, path).await;
            assert_eq!(refused.status().as_u16(), 403, "{scope:?} {path}");
            let body = refused.text().await.unwrap();
            assert!(body.contains("sign in with a key of more scope"), "{body}");
        }
    }
    assert_eq!(s.sweeps().await, before, "no sweep started");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_not_asked_for_from_the_dashboards_own_page_is_refused() {
    let s = Served::start(policy()).await;
    let admin = s.sign_in(Scope::Admin).await;
    let before = s.first_sweep().await;
    let forged = [
        // No evidence of where the form came from.
        (None, None),
        // Another site's page.
        (Some("cross-site"), Some("http://evil.test")),
        (None, Some("http://evil.test")),
    ];
    for path in ["/retention/sweep", "/retention/preview"] {
        for (site, origin) in forged {
            let mut request = s
                .http
                .post(format!("{}{path}", s.base))
                .header("cookie", &admin)
                .form(&[("from", "elsewhere")]);
            if let Some(site) = site {
                request = request.header("sec-fetch-site", site);
            }
            if let Some(origin) = origin {
                request = request.header("origin", origin);
            }
            let refused = request.send().await.unwrap();
            assert_eq!(refused.status().as_u16(), 403, "{path} {site:?} {origin:?}");
        }
        // Without a session at all.
        let refused = s
            .http
            .post(format!("{}{path}", s.base))
            .header("origin", &s.base)
            .header("sec-fetch-site", "same-origin")
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status().as_u16(), 401, "{path}");
    }
    assert_eq!(s.sweeps().await, before, "no sweep started");
    s.stop().await;
}

/// Waits (in real time, bounded) until `check` holds.
async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    tokio::time::timeout(Duration::from_secs(15), async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("gave up waiting for {what}"));
}

/// The `<tr>` of schedule `id` on the schedules page.
fn schedule_row<'p>(page: &'p str, id: &str) -> &'p str {
    let row = &page[page
        .find(&format!("data-schedule=\"{id}\""))
        .unwrap_or_else(|| panic!("no row for {id}: {page}"))..];
    &row[..row.find("</tr>").unwrap()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_does_not_link_to_a_last_run_the_sweep_removed() {
    // 2026-01-01T00:00:00Z, moved by the test.
    let clock = VirtualClock::new(1_767_225_600_000);
    let store = Arc::new(MemoryStore::new());
    let mut config = WorldConfig::memory();
    config.retention = RetentionConfig {
        completed: days(1),
        sweep_interval: days(1000),
        ..RetentionConfig::default()
    };
    let world = World::with_store(config, Arc::new(clock.clone()), store.clone());
    let s = Served::serving(world).await;
    s.first_sweep().await;
    s.world
        .schedules()
        .cron("hourly", "done", json!(1), "0 * * * *")
        .await
        .unwrap();
    clock.advance(Duration::from_secs(3600));
    let world = s.world.clone();
    until("the 01:00 firing", || async {
        let schedule = world.schedules().get("hourly").await.unwrap();
        match schedule.last_run_id {
            Some(id) => world
                .get_run(&id, ResolveData::None)
                .await
                .is_ok_and(|run| run.status == RunStatus::Completed),
            None => false,
        }
    })
    .await;
    let fired = s.world.schedules().pause("hourly").await.unwrap();
    let run = fired.last_run_id.clone().unwrap();
    let link = format!("href=\"/runs/{run}\"");
    let reader = s.sign_in(Scope::Read).await;
    let (status, page) = s.page(&reader, "/schedules").await;
    assert_eq!(status, 200, "{page}");
    let row = schedule_row(&page, "hourly");
    assert!(row.contains(&link), "{row}");
    assert!(!row.contains("removed by retention"), "{row}");

    // Two days on, a sweep removes the run, and the page names it without a link.
    clock.advance(Duration::from_secs(2 * 86_400));
    let sweep = s.world.prune().await.unwrap();
    let report = s.world.prune_report_when_done(&sweep).await.unwrap();
    assert!(report.removed >= 1, "{report:?}");
    assert!(s.world.get_run(&run, ResolveData::None).await.is_err());
    let reader = s.sign_in(Scope::Read).await;
    let (status, gone) = s.page(&reader, &format!("/runs/{run}")).await;
    assert_eq!(status, 404, "{gone}");
    let (status, page) = s.page(&reader, "/schedules").await;
    assert_eq!(status, 200, "{page}");
    let row = schedule_row(&page, "hourly");
    assert!(
        !row.contains(&link),
        "no link to a page that is gone: {row}"
    );
    assert!(
        row.contains(&format!(
            "{run} <span class=\"removed\">(removed by retention)</span>"
        )),
        "{row}"
    );
    assert!(row.contains("<td class=\"state\">paused</td>"), "{row}");
    // The API names it as removed, not as the last run.
    let key = s
        .keys
        .create("reader", Scope::Read, s.world.clock().now_ms(), None)
        .key;
    let listed: serde_json::Value = s
        .http
        .get(format!("{}/v1/schedules/hourly", s.base))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["last_run_id"], serde_json::Value::Null, "{listed}");
    assert_eq!(listed["removed_last_run_id"], json!(run), "{listed}");
    assert_eq!(listed["total_executions"], json!(1), "{listed}");

    // A schedule still naming the removed run (a sweep stopped before it changed the
    // schedule) is shown the same way: the page finds the run gone.
    store
        .update_schedule("hourly", &mut |_| Ok(ScheduleChange::Put(fired.clone())))
        .await
        .unwrap();
    let (_, page) = s.page(&reader, "/schedules").await;
    let row = schedule_row(&page, "hourly");
    assert!(!row.contains(&link), "{row}");
    assert!(row.contains("(removed by retention)"), "{row}");
    s.stop().await;
}
