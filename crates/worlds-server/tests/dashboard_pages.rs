//! Without a browser: what the dashboard's pages say, read as HTML over real HTTP — a page or
//! a run that is not there, the runs list's columns and times, a run's timeline axis and
//! history rows, the hook form, and the workers page's count of finished runs.

#![cfg(feature = "dashboard")]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use worlds_demo::{Demo, DemoOptions};
use worlds_engine::prelude::*;
use worlds_engine::{ResolveData, WorkflowState};
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions, ApiServer};

const BOUND: Duration = Duration::from_secs(15);

#[derive(serde::Serialize, serde::Deserialize)]
struct Approval {
    approved: bool,
}

struct Served {
    world: Arc<World>,
    server: ApiServer,
    base: String,
    http: reqwest::Client,
    cookie: String,
}

impl Served {
    /// A memory world with the demo workflows and one that waits on a hook, served, and a
    /// session signed in with an admin key.
    async fn start() -> Served {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let world = Arc::new(World::new(WorldConfig::memory()).unwrap());
        let options = DemoOptions::new()
            .pause(Duration::from_millis(20))
            .work(Duration::from_millis(5));
        Demo::new(&options).register(&world).unwrap();
        let approval = workflow("approval", |ctx: WorkflowContext, _: ()| async move {
            let decision = ctx.create_hook::<Approval>().wait().await?;
            Ok::<_, WorkflowError>(decision.approved)
        });
        world.register(&approval).unwrap();
        world.start().await.unwrap();
        let keys = Arc::new(KeyRing::new());
        let key = keys
            .create("operator", Scope::Admin, world.clock().now_ms(), None)
            .key;
        let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
            .await
            .unwrap();
        let base = format!("http://{}", server.local_addr());
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let login = http
            .post(format!("{base}/login"))
            .header("origin", &base)
            .form(&[("key", key.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(login.status().as_u16(), 303);
        let cookie = login.headers()["set-cookie"].to_str().unwrap();
        let cookie = cookie.split(';').next().unwrap().to_owned();
        Served {
            world,
            server,
            base,
            http,
            cookie,
        }
    }

    /// `path` as a browser asks for it, signed in: (status, content type, body).
    async fn page(&self, path: &str) -> (u16, String, String) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let kind = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, kind, response.text().await.unwrap())
    }

    async fn start_run(&self, name: &str, input: Value, workflow_id: &str) -> String {
        self.world
            .execute_by_name::<Value, Value>(
                name,
                input,
                WorkflowOptions::new().workflow_id(workflow_id),
            )
            .await
            .unwrap()
            .id
    }

    async fn until(&self, id: &str, done: impl Fn(&WorkflowState) -> bool) {
        tokio::time::timeout(BOUND, async {
            while !done(&self.world.get_run(id, ResolveData::None).await.unwrap()) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{id} never got there"));
    }

    async fn stop(self) {
        self.server.shutdown().await;
        self.world.shutdown().await.unwrap();
    }
}

fn order(n: usize) -> Value {
    serde_json::to_value(worlds_demo::shop::Order::sample(n)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_or_a_run_that_is_not_there_gets_an_html_page_saying_so() {
    let s = Served::start().await;

    let (status, kind, body) = s.page("/no/such/page").await;
    assert_eq!(status, 404);
    assert!(kind.starts_with("text/html"), "{kind}");
    assert!(
        body.contains("<h1>Not found</h1>") && body.contains("no page at /no/such/page"),
        "{body}"
    );
    assert!(body.contains("href=\"/\""), "a way back: {body}");

    let (status, kind, body) = s.page("/runs/wrun_nothing_here").await;
    assert_eq!(status, 404);
    assert!(kind.starts_with("text/html"), "{kind}");
    assert!(
        body.contains("<h1>Not found</h1>") && body.contains("wrun_nothing_here"),
        "{body}"
    );

    // The API keeps its JSON answer, for browsers too.
    let (status, kind, body) = s.page("/v1/no-such-route").await;
    assert_eq!(status, 404);
    assert!(kind.starts_with("application/json"), "{kind}: {body}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_name_the_workflow_id_the_time_zone_the_steps_and_the_time_axis() {
    let s = Served::start().await;
    let run = s.start_run("checkout", order(1), "order-A-1").await;
    s.until(&run, |r| r.status == RunStatus::Completed).await;

    let (status, _, list) = s.page("/").await;
    assert_eq!(status, 200);
    assert!(
        list.contains("<th scope=\"col\">Workflow id</th>"),
        "{list}"
    );
    let row = &list[list
        .find(&format!("data-run=\"{run}\""))
        .expect("the run's row")..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains(">order-A-1</a>"), "{row}");
    assert!(row.contains(" UTC</time>"), "the zone of the time: {row}");
    assert!(list.contains("Started after (UTC)"), "{list}");

    let (status, _, page) = s.page(&format!("/runs/{run}")).await;
    assert_eq!(status, 200);
    assert!(page.contains(" UTC"), "the zone of the run's start: {page}");
    // A time axis under the timeline, from 0.
    let axis = &page[page.find("class=\"tl-row tl-axis\"").expect("a time axis")..];
    let axis = &axis[..axis.find("</svg>").unwrap()];
    assert!(axis.contains(">0</text>"), "{axis}");
    assert!(axis.matches("<text").count() >= 2, "{axis}");
    // Each step's start names the step.
    let history = &page[page.find("class=\"history\"").unwrap()..];
    let started: Vec<&str> = history
        .split("<li ")
        .filter(|row| row.contains("<b>activity_started</b>"))
        .collect();
    assert_eq!(started.len(), 2, "{history}");
    assert!(
        started[0].contains("charge-card, attempt 1"),
        "{}",
        started[0]
    );
    assert!(started[1].contains("ship, attempt 1"), "{}", started[1]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_form_starts_empty_and_says_what_it_takes() {
    let s = Served::start().await;
    let run = s.start_run("approval", json!(null), "approval-1").await;
    s.until(&run, |r| !r.hooks.is_empty()).await;
    let (status, _, page) = s.page(&format!("/runs/{run}")).await;
    assert_eq!(status, 200);
    let form = &page[page.find("<form method=\"post\"").expect("a hook form")..];
    let area = &form[form.find("<textarea").unwrap()..];
    let area = &area[..area.find("</textarea>").unwrap()];
    assert!(area.ends_with('>'), "no payload filled in: {area}");
    assert!(area.contains("placeholder=\""), "{area}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_page_counts_compensated_runs_as_finished() {
    let s = Served::start().await;
    let saga = s.start_run("order-saga", order(1), "saga-1").await;
    let checkout = s.start_run("checkout", order(2), "checkout-2").await;
    s.until(&saga, |r| r.status == RunStatus::Compensated).await;
    s.until(&checkout, |r| r.status == RunStatus::Completed)
        .await;

    let (status, _, page) = s.page("/workers").await;
    assert_eq!(status, 200);
    let finished = &page[page.find("<dt>Runs finished</dt>").expect("runs finished")..];
    let finished = &finished[..finished.find("</dd>").unwrap()];
    assert!(
        finished.contains(">2 (1 completed, 1 failed of which 1 compensated, 0 cancelled)"),
        "{finished}"
    );
    s.stop().await;
}
