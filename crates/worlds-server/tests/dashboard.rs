//! The dashboard in real headless browsers (Chromium and Firefox), driven over WebDriver: signing in
//! (and being refused), filtering the runs, reading why a compensated saga ended as it did,
//! resuming a waiting hook from its form (a payload of the wrong type refused before it is
//! sent) and watching the run finish without a reload,
//! cancelling a run, pausing a schedule; every control labelled and the forms usable by
//! keyboard. Screenshots of each page go to `target/dashboard/`.
//!
//! Each test runs in Chromium and in Firefox. They need Debian's `chromium` and
//! `chromium-driver`, and `firefox-esr` with `geckodriver` (not packaged by Debian: `cargo
//! install geckodriver`, found on `PATH` or named by `GECKODRIVER`). Without them the tests say
//! so and pass, except under `CI=true`, where a missing browser fails them.

#![cfg(feature = "dashboard")]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use worlds_demo::{Demo, DemoOptions};
use worlds_engine::prelude::*;
use worlds_engine::{HookStatus, ResolveData};
use worlds_server::auth::{KeyRing, Scope};
use worlds_server::{serve, ApiOptions, ApiServer};

/// The longest any wait for the page may take.
const BOUND: Duration = Duration::from_secs(15);

/// The browsers the dashboard is checked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Debian's `chromium` driven by its `chromedriver`.
    Chromium,
    /// Debian's `firefox-esr` driven by `geckodriver` (on `PATH`, or named by `GECKODRIVER`;
    /// Debian does not package it: `cargo install geckodriver`).
    Firefox,
}

/// A WebDriver server with one headless browser session; both end when this is dropped.
struct Browser {
    kind: Kind,
    driver: Child,
    client: Client,
    _profile: tempfile::TempDir,
}

/// The first of `names` that exists, as given or on `PATH`.
fn find_program(names: &[String]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    names.iter().find_map(|name| {
        let given = PathBuf::from(name);
        if given.is_absolute() {
            return given.exists().then_some(given);
        }
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.exists())
    })
}

impl Browser {
    /// A browser, or `None` (with a notice) when it or its driver is not installed.
    async fn start(kind: Kind) -> Option<Browser> {
        let (browser, driver, install) = match kind {
            Kind::Chromium => (
                find_program(&["/usr/bin/chromium".into()]),
                find_program(&["/usr/bin/chromedriver".into()]),
                "apt-get install chromium chromium-driver",
            ),
            Kind::Firefox => (
                find_program(&["/usr/bin/firefox-esr".into(), "/usr/bin/firefox".into()]),
                find_program(
                    &std::env::var("GECKODRIVER")
                        .ok()
                        .into_iter()
                        .chain(["geckodriver".to_owned()])
                        .collect::<Vec<_>>(),
                ),
                "apt-get install firefox-esr; cargo install geckodriver",
            ),
        };
        let (Some(browser), Some(driver)) = (browser, driver) else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "the dashboard tests in {kind:?} need the browser and its WebDriver server: {install}"
            );
            eprintln!("skipped: {kind:?} or its WebDriver server is missing ({install})");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the WebDriver server starts");
        let ready = tokio::time::timeout(BOUND, async {
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(
            ready.is_ok(),
            "the WebDriver server did not listen within {BOUND:?}"
        );
        let profile = tempfile::tempdir().unwrap();
        let mut capabilities = serde_json::Map::new();
        match kind {
            Kind::Chromium => {
                capabilities.insert("browserName".into(), json!("chrome"));
                capabilities.insert(
                    "goog:chromeOptions".into(),
                    json!({
                        "binary": browser,
                        "args": [
                            "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                            "--disable-background-networking", "--disable-component-update",
                            "--no-first-run", "--disable-sync", "--window-size=1280,1000",
                            format!("--user-data-dir={}", profile.path().display()),
                        ]
                    }),
                );
            }
            Kind::Firefox => {
                capabilities.insert("browserName".into(), json!("firefox"));
                capabilities.insert(
                    "moz:firefoxOptions".into(),
                    json!({
                        "binary": browser,
                        "args": ["-headless", "--width=1280", "--height=1000"],
                        "prefs": {
                            "app.update.enabled": false,
                            "datareporting.policy.dataSubmissionEnabled": false,
                            "browser.shell.checkDefaultBrowser": false,
                        },
                    }),
                );
            }
        }
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("a {kind:?} session: {e}"));
        Some(Browser {
            kind,
            driver,
            client,
            _profile: profile,
        })
    }

    /// Writes a screenshot of the page to `target/dashboard/{name}.png`.
    async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let dir = screenshots();
        std::fs::create_dir_all(&dir).unwrap();
        let name = match self.kind {
            Kind::Chromium => name.to_owned(),
            Kind::Firefox => format!("firefox-{name}"),
        };
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    async fn text(&self, css: &str) -> String {
        let element = self
            .client
            .wait()
            .at_most(BOUND)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page: {e}"));
        element.text().await.unwrap()
    }

    /// Waits until the text of `css` contains `wanted`.
    async fn until_text(&self, css: &str, wanted: &str) -> String {
        let mut last = String::new();
        let found = tokio::time::timeout(BOUND, async {
            loop {
                if let Ok(element) = self.client.find(Locator::Css(css)).await {
                    if let Ok(text) = element.text().await {
                        if text.contains(wanted) {
                            return text;
                        }
                        last = text;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("{css} never showed {wanted:?}; last: {last:?}"))
    }

    async fn click(&self, css: &str) {
        self.client
            .wait()
            .at_most(BOUND)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} to click: {e}"))
            .click()
            .await
            .unwrap();
    }

    async fn fill(&self, css: &str, text: &str) {
        let field = self.client.find(Locator::Css(css)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    async fn sign_in(&self, base: &str, key: &str) {
        self.client.goto(&format!("{base}/login")).await.unwrap();
        self.fill("#key", key).await;
        // By keyboard: Enter in the field submits the form.
        self.client
            .find(Locator::Css("#key"))
            .await
            .unwrap()
            .send_keys("\u{E007}")
            .await
            .unwrap();
    }

    /// Every form control of the page has a label, and every button a name.
    async fn assert_labelled(&self, page: &str) {
        let unlabelled = self
            .client
            .execute(
                r#"return [...document.querySelectorAll("input:not([type=hidden]), select, textarea")]
                     .filter(e => e.labels.length === 0 && !e.getAttribute("aria-label"))
                     .map(e => e.outerHTML)
                   .concat([...document.querySelectorAll("button, a")]
                     .filter(e => !((e.textContent || "").trim() || e.getAttribute("aria-label")))
                     .map(e => e.outerHTML));"#,
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(unlabelled, json!([]), "{page}: controls without a label");
    }

    async fn end(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}

fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("dashboard")
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Approval {
    approved: bool,
}

/// A served world with the demo workflows, an approval that waits on a hook, and a nap.
struct Served {
    world: Arc<World>,
    server: ApiServer,
    base: String,
    read: String,
    admin: String,
}

async fn served() -> Served {
    let mut config = WorldConfig::memory();
    config.failure_strategy = FailureStrategy::Ignore;
    let world = Arc::new(World::new(config).unwrap());
    let options = DemoOptions::new()
        .pause(Duration::from_millis(20))
        .work(Duration::from_millis(5));
    Demo::new(&options).register(&world).unwrap();
    let approval = workflow("approval", |ctx: WorkflowContext, _: ()| async move {
        let progress = ctx.get_writable();
        progress.write("waiting for the approver")?;
        let hook = ctx.create_hook::<Approval>();
        let decision = hook.wait().await?;
        progress.write("decided")?;
        progress.close();
        // Held open until the test lets it go, so the page shows the run still going after
        // the resume and then follows it to its end.
        ctx.create_hook_with::<()>(HookOptions::new().token("release"))
            .wait()
            .await?;
        Ok::<_, WorkflowError>(decision.approved)
    });
    let nap = workflow("nap", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    });
    world.register(&approval).unwrap().register(&nap).unwrap();
    world.start().await.unwrap();
    let now = world.clock().now_ms();
    let keys = Arc::new(KeyRing::new());
    let read = keys.create("viewer", Scope::Read, now, None).key;
    let admin = keys.create("operator", Scope::Admin, now, None).key;
    let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    Served {
        world,
        server,
        base,
        read,
        admin,
    }
}

async fn start(world: &World, name: &str, input: Value) -> String {
    world
        .execute_by_name::<Value, Value>(name, input, WorkflowOptions::default())
        .await
        .unwrap()
        .id
}

async fn until_status(world: &World, id: &str, status: RunStatus) {
    tokio::time::timeout(BOUND, async {
        while world.get_run(id, ResolveData::None).await.unwrap().status != status {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{id} never became {status:?}"));
}

fn order(n: usize) -> Value {
    serde_json::to_value(worlds_demo::shop::Order::sample(n)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_filter_and_read_why_a_saga_was_compensated() {
    if let Some(browser) = Browser::start(Kind::Chromium).await {
        sign_in_filter_and_read_why(browser).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_filter_and_read_why_a_saga_was_compensated_in_firefox() {
    if let Some(browser) = Browser::start(Kind::Firefox).await {
        sign_in_filter_and_read_why(browser).await;
    }
}

async fn sign_in_filter_and_read_why(browser: Browser) {
    let s = served().await;
    let saga = start(&s.world, "order-saga", order(1)).await;
    let checkout = start(&s.world, "checkout", order(2)).await;
    until_status(&s.world, &saga, RunStatus::Compensated).await;
    until_status(&s.world, &checkout, RunStatus::Completed).await;

    // Refused with a wrong key; the sign-in page says why.
    browser.sign_in(&s.base, "wek_wrong").await;
    let refusal = browser.text("#login-error").await;
    assert!(refusal.contains("Not signed in"), "{refusal}");
    browser.assert_labelled("sign-in").await;
    browser.screenshot("sign-in").await;
    // Pages need a session.
    browser
        .client
        .goto(&format!("{}/runs/{saga}", s.base))
        .await
        .unwrap();
    assert!(browser.client.current_url().await.unwrap().path() == "/login");

    browser.sign_in(&s.base, &s.read).await;
    let table = browser.text("table.runs").await;
    assert!(
        table.contains(&saga) || table.contains("order-saga"),
        "{table}"
    );
    assert!(browser.text(".counts").await.contains("compensated 1"));
    browser.assert_labelled("runs").await;
    browser.screenshot("runs").await;
    // By keyboard: Tab reaches the filters, the filter button and the runs' links, in order.
    let mut reached = Vec::new();
    for _ in 0..40 {
        let active = browser.client.active_element().await.unwrap();
        active.send_keys("\u{E004}").await.unwrap();
        let now = browser
            .client
            .execute(
                "const e = document.activeElement; return e.id || e.textContent.trim() || e.tagName;",
                vec![],
            )
            .await
            .unwrap();
        reached.push(now.as_str().unwrap_or_default().to_owned());
    }
    let at = |wanted: &str| reached.iter().position(|r| r.contains(wanted));
    let (workflow, filter, run) = (at("f-workflow"), at("Filter"), at("wrun_"));
    assert!(
        workflow.is_some()
            && filter.is_some()
            && run.is_some()
            && workflow < filter
            && filter < run,
        "Tab order: {reached:?}"
    );

    // Filter by workflow: only the checkout is left.
    browser.fill("#f-workflow", "checkout").await;
    browser.click(".filters button[type=submit]").await;
    browser.until_text("table.runs tbody", "checkout").await;
    let rows = browser
        .client
        .find_all(Locator::Css("table.runs tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].attr("data-run").await.unwrap().as_deref(),
        Some(checkout.as_str())
    );
    let url = browser.client.current_url().await.unwrap();
    assert!(
        url.query()
            .unwrap_or_default()
            .contains("workflow=checkout"),
        "filters live in the URL: {url}"
    );

    // The saga's page: the summary names the failing step and the compensations, and the
    // timeline draws them.
    browser
        .client
        .goto(&format!("{}/runs/{saga}", s.base))
        .await
        .unwrap();
    let why = browser.text("#why").await;
    assert!(why.contains("create-shipment"), "{why}");
    assert!(
        why.contains("undid release-inventory") && why.contains("undid refund-card"),
        "{why}"
    );
    let labels = browser.text(".timeline").await;
    assert!(
        labels.contains("charge-card") && labels.contains("undo release-inventory"),
        "{labels}"
    );
    let failed_bars = browser
        .client
        .find_all(Locator::Css(".tl-row.step .tl-bar.failed"))
        .await
        .unwrap();
    assert!(!failed_bars.is_empty(), "the failed attempts are drawn");
    // Bars sit where their time is: the compensations to the right of the first step.
    let lefts = browser
        .client
        .execute(
            r#"const x = s => document.querySelector(s).getBoundingClientRect().left;
               return [x(".tl-row.step .tl-bar"), x(".tl-row.compensation .tl-bar")];"#,
            vec![],
        )
        .await
        .unwrap();
    let (first, undo) = (lefts[0].as_f64().unwrap(), lefts[1].as_f64().unwrap());
    assert!(
        undo > first + 100.0,
        "bars are laid out on a time axis: {lefts}"
    );
    // A read key sees no actions.
    assert!(browser
        .client
        .find(Locator::Css("form.cancel"))
        .await
        .is_err());
    browser.assert_labelled("run").await;
    browser.screenshot("run-compensated").await;

    browser.end().await;
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_a_hook_cancel_a_run_and_pause_a_schedule() {
    if let Some(browser) = Browser::start(Kind::Chromium).await {
        resume_cancel_and_pause(browser).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_a_hook_cancel_a_run_and_pause_a_schedule_in_firefox() {
    if let Some(browser) = Browser::start(Kind::Firefox).await {
        resume_cancel_and_pause(browser).await;
    }
}

async fn resume_cancel_and_pause(browser: Browser) {
    let s = served().await;
    let approval = start(&s.world, "approval", Value::Null).await;
    let nap = start(&s.world, "nap", Value::Null).await;
    s.world
        .schedules()
        .cron("nightly", "nap", Value::Null, "0 3 * * *")
        .await
        .unwrap();
    tokio::time::timeout(BOUND, async {
        while s
            .world
            .get_run(&approval, ResolveData::None)
            .await
            .unwrap()
            .hooks
            .is_empty()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    browser.sign_in(&s.base, &s.admin).await;
    browser.text("table.runs").await;

    // Resume the waiting hook from its form. Not JSON first: the browser refuses to send it.
    browser
        .client
        .goto(&format!("{}/runs/{approval}", s.base))
        .await
        .unwrap();
    browser.assert_labelled("run with a hook").await;
    // Its stream, read live.
    browser.click("details.stream-view summary").await;
    browser
        .until_text(
            "details.stream-view .stream-text",
            "waiting for the approver",
        )
        .await;
    let waiting = browser.text("#waiting").await;
    assert!(
        waiting.contains("hook hook_") && waiting.contains(", for "),
        "what the run waits on, and since when: {waiting}"
    );
    browser.screenshot("run-waiting").await;
    browser.fill("form.resume textarea", "{approved: yes").await;
    browser.click("form.resume button").await;
    browser.until_text("form.resume .check", "Not JSON").await;
    // JSON of the wrong type: the server's check says which field, before anything is sent.
    browser
        .fill("form.resume textarea", r#"{"approved": "yes"}"#)
        .await;
    browser.click("form.resume button").await;
    let said = browser
        .until_text("form.resume .check", "does not match the payload type")
        .await;
    assert!(said.contains("approved"), "{said}");
    let waiting = s.world.get_run(&approval, ResolveData::None).await.unwrap();
    assert_eq!(waiting.status, RunStatus::Running);
    assert!(
        waiting
            .hooks
            .iter()
            .all(|h| h.status == HookStatus::Waiting),
        "nothing was delivered"
    );
    browser.screenshot("run-hook-refused").await;
    assert!(browser
        .client
        .current_url()
        .await
        .unwrap()
        .path()
        .ends_with(&approval));
    browser
        .fill("form.resume textarea", r#"{"approved": true}"#)
        .await;
    browser.click("form.resume button").await;
    browser.until_text("#notice", "Hook resumed").await;
    // The stream again on the new page: it keeps reading while the page updates itself.
    browser.click("details.stream-view summary").await;
    // The run waits once more; let go, it completes, and the page follows it live.
    browser
        .client
        .execute("window.stillTheSamePage = true;", vec![])
        .await
        .unwrap();
    assert_eq!(browser.text("#run-status").await, "running");
    s.world.resume_hook("release", &()).await.unwrap();
    browser.until_text("#run-status", "completed").await;
    browser
        .until_text("details.stream-view .stream-text", "end of stream")
        .await;
    assert!(browser
        .text("details.stream-view .stream-text")
        .await
        .contains("decided"));
    let same = browser
        .client
        .execute("return window.stillTheSamePage === true;", vec![])
        .await
        .unwrap();
    assert_eq!(same, json!(true), "the page updated without a reload");
    browser.screenshot("run-completed-live").await;

    // Cancel the napping run.
    browser
        .client
        .goto(&format!("{}/runs/{nap}", s.base))
        .await
        .unwrap();
    browser.click("form.cancel button").await;
    browser.until_text("#run-status", "cancelled").await;
    until_status(&s.world, &nap, RunStatus::Cancelled).await;
    browser.screenshot("run-cancelled").await;

    // Pause the schedule.
    browser
        .client
        .goto(&format!("{}/schedules", s.base))
        .await
        .unwrap();
    browser.assert_labelled("schedules").await;
    browser.click("tr[data-schedule=nightly] button").await;
    browser
        .until_text("tr[data-schedule=nightly] .state", "paused")
        .await;
    assert!(s.world.schedules().get("nightly").await.unwrap().paused);
    let row = browser.text("tr[data-schedule=nightly]").await;
    assert!(row.contains("0 3 * * *") && row.contains("nap"), "{row}");
    browser.screenshot("schedules").await;

    browser
        .client
        .goto(&format!("{}/workers", s.base))
        .await
        .unwrap();
    browser.text("table.workers").await;
    let lines = browser
        .client
        .find_all(Locator::Css("figure.chart polyline"))
        .await
        .unwrap();
    assert_eq!(
        lines.len(),
        7,
        "finished; latency mean and p95; queued and running; workers and busy"
    );
    browser.assert_labelled("workers").await;
    browser.screenshot("workers").await;

    browser.end().await;
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

/// Without a browser: a cross-site form cannot act with a session cookie, and every page
/// answers with the content security policy.
#[tokio::test]
async fn actions_from_other_sites_are_refused_and_pages_carry_a_csp() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let s = served().await;
    let nap = start(&s.world, "nap", Value::Null).await;
    let signed_in = Session::sign_in(&s.base, &s.admin).await;
    let (http, cookie, session) = (&signed_in.http, &signed_in.set_cookie, &signed_in.cookie);
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(
        !cookie.contains(s.admin.as_str()),
        "the cookie never holds the key"
    );

    let page = http
        .get(format!("{}/runs/{nap}", s.base))
        .header("cookie", session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    // The quarantine view lists quarantined runs only.
    let all = signed_in.text(&format!("{}/", s.base)).await;
    assert!(all.contains(&nap), "the list shows the run");
    let quarantined = signed_in
        .text(&format!("{}/?quarantined=true", s.base))
        .await;
    assert!(quarantined.contains("Quarantined runs"), "{quarantined}");
    assert!(
        !quarantined.contains(&nap),
        "a healthy run is not quarantined"
    );

    for (site, origin) in [
        ("cross-site", "http://evil.test"),
        ("", "http://evil.test"),
        ("", ""),
    ] {
        let mut forged = http
            .post(format!("{}/runs/{nap}/cancel", s.base))
            .header("cookie", session)
            .form(&[("reason", "forged")]);
        if !site.is_empty() {
            forged = forged.header("sec-fetch-site", site);
        }
        if !origin.is_empty() {
            forged = forged.header("origin", origin);
        }
        let refused = forged.send().await.unwrap();
        assert_eq!(refused.status().as_u16(), 403, "{site} {origin}");
    }
    assert_eq!(
        s.world
            .get_run(&nap, ResolveData::None)
            .await
            .unwrap()
            .status,
        RunStatus::Running
    );
    let own = http
        .post(format!("{}/runs/{nap}/cancel", s.base))
        .header("cookie", session)
        .header("origin", s.base.as_str())
        .form(&[("reason", "from the page")])
        .send()
        .await
        .unwrap();
    assert_eq!(own.status().as_u16(), 303);
    until_status(&s.world, &nap, RunStatus::Cancelled).await;

    let out = http
        .post(format!("{}/logout", s.base))
        .header("cookie", session)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status().as_u16(), 303);
    let after = http
        .get(format!("{}/", s.base))
        .header("cookie", session)
        .send()
        .await
        .unwrap();
    assert_eq!(after.headers()["location"], "/login", "signed out");
    let _: SocketAddr = s.server.local_addr();
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

/// Without a browser: a run whose code changed under it is quarantined, and its page says
/// where history and code parted and what each holds; the quarantine view lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_run_says_where_code_and_history_part() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = WorldConfig::memory();
    // Every wake-up replays the history against the code registered now, as after a deploy.
    config.evict_after_every_task = true;
    let world = Arc::new(World::new(config).unwrap());
    let deployed_v2 = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ship = activity("ship", |_ctx: ActivityContext, _: ()| async move {
        Ok::<_, StepError>(())
    });
    let (v2, step) = (deployed_v2.clone(), ship.clone());
    let flip = workflow("flip", move |ctx: WorkflowContext, _: ()| {
        let (v2, step) = (v2.clone(), step.clone());
        async move {
            if v2.load(std::sync::atomic::Ordering::SeqCst) {
                ctx.run(&step, ()).await?;
            }
            ctx.create_hook_with::<()>(HookOptions::new().token("flip-go"))
                .wait()
                .await?;
            ctx.run(&step, ()).await?;
            Ok::<_, WorkflowError>(())
        }
    });
    world.register(&ship).unwrap().register(&flip).unwrap();
    world.start().await.unwrap();
    let run = world
        .execute(&flip, (), WorkflowOptions::default())
        .await
        .unwrap();
    tokio::time::timeout(BOUND, async {
        while run.query().await.unwrap().hooks.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    deployed_v2.store(true, std::sync::atomic::Ordering::SeqCst);
    world.resume_hook("flip-go", &()).await.unwrap();
    tokio::time::timeout(BOUND, async {
        while run.query().await.unwrap().quarantine.is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the run is quarantined");

    let keys = Arc::new(KeyRing::new());
    let key = keys
        .create("viewer", Scope::Read, world.clock().now_ms(), None)
        .key;
    let operator = keys.create("operator", Scope::Write, world.clock().now_ms(), None);
    let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(keys))
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let session = Session::sign_in(&base, &key).await;
    let page = session.text(&format!("{base}/runs/{}", run.id)).await;
    let state = run.query().await.unwrap();
    let reason = state.error.unwrap().message;
    let why = page
        .split("id=\"why\"")
        .nth(1)
        .and_then(|rest| rest.split("</section>").next())
        .unwrap_or_else(|| panic!("no summary: {page}"));
    assert!(
        why.contains("The run is quarantined: its code no longer matches its history"),
        "the summary says so first: {why}"
    );
    assert!(
        reason.contains("command #0") && reason.contains("hook") && reason.contains("'ship'"),
        "the position and both commands: {reason}"
    );
    assert!(
        why.contains(&askama_escape(&reason)),
        "the summary shows them: {why}"
    );
    let listed = session.text(&format!("{base}/?quarantined=true")).await;
    assert!(listed.contains(&run.id), "the quarantine view lists it");
    assert!(
        !page.contains("id=\"recover\""),
        "a read key is not offered recovery"
    );

    // Recovery: resuming under the code that broke it is refused with where it parts; once
    // the code is fixed, resuming lets it finish, recorded with the operator's key.
    let acting = Session::sign_in(&base, &operator.key).await;
    let page = acting.text(&format!("{base}/runs/{}", run.id)).await;
    let recover = page
        .split("id=\"recover\"")
        .nth(1)
        .and_then(|rest| rest.split("</section>").next())
        .unwrap_or_else(|| panic!("no recovery controls: {page}"));
    assert!(recover.contains("Resume where it stopped"), "{recover}");
    assert!(recover.contains("#0 hook (done)"), "{recover}");
    let post = |action: &'static str| {
        let (acting, base, id) = (&acting, base.clone(), run.id.clone());
        async move {
            acting
                .http
                .post(format!("{base}/runs/{id}/recover/{action}"))
                .header("cookie", &acting.cookie)
                .header("origin", &base)
                .form(&[("reason", "fixed the flip"), ("position", "0")])
                .send()
                .await
                .unwrap()
        }
    };
    let refused = post("resume").await;
    assert_eq!(refused.status().as_u16(), 409);
    let text = refused.text().await.unwrap();
    assert!(text.contains("would diverge again"), "{text}");
    deployed_v2.store(false, std::sync::atomic::Ordering::SeqCst);
    let resumed = post("resume").await;
    assert_eq!(resumed.status().as_u16(), 303);
    let to = resumed.headers()["location"].to_str().unwrap();
    assert!(to.contains("notice=Reopened"), "{to}");
    let state = tokio::time::timeout(BOUND, async {
        loop {
            let state = run.query().await.unwrap();
            if state.status == RunStatus::Completed {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the resumed run completes");
    let recorded = state.history.iter().find_map(|e| match &e.kind {
        worlds_engine::EventKind::RunReopened { by, reason, .. } => {
            Some((by.clone(), reason.clone()))
        }
        _ => None,
    });
    assert_eq!(
        recorded,
        Some((
            Some(format!("key:{}", operator.record.id)),
            Some("fixed the flip".to_owned())
        ))
    );
    server.shutdown().await;
    world.shutdown().await.unwrap();
}

/// A dashboard session over plain HTTP (no browser): a client that does not follow redirects
/// and the session cookie that signing in set.
struct Session {
    http: reqwest::Client,
    /// The whole `Set-Cookie` header of the sign-in.
    set_cookie: String,
    /// `name=value`, as a `Cookie` header sends it back.
    cookie: String,
}

impl Session {
    /// Signs in with `key`; the sign-in answers 303 with the cookie.
    async fn sign_in(base: &str, key: &str) -> Session {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let login = http
            .post(format!("{base}/login"))
            .header("origin", base)
            .form(&[("key", key)])
            .send()
            .await
            .unwrap();
        assert_eq!(login.status().as_u16(), 303);
        let set_cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
        let cookie = set_cookie.split(';').next().unwrap().to_owned();
        Session {
            http,
            set_cookie,
            cookie,
        }
    }

    /// The page at `url`, as text.
    async fn text(&self, url: &str) -> String {
        self.http
            .get(url)
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// `text` as the templates escape it into HTML.
fn askama_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

/// Without a browser: a Workflow DevKit run — written by its app as events through
/// `POST /v1/devkit/events`, as a 5.x runtime does — has a
/// page like any run: where it runs, its steps, its hook, its stream, and no recovery controls
/// once it failed (the engine cannot run its code).
#[tokio::test]
async fn a_devkit_run_has_a_page_with_its_steps_hooks_and_streams() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let s = served().await;
    let http = reqwest::Client::new();
    let event = |run_id: Option<&str>, event: Value| {
        http.post(format!("{}/v1/devkit/events", s.base))
            .bearer_auth(&s.admin)
            .json(&json!({"runId": run_id, "event": event, "params": {}}))
            .send()
    };
    let created = event(
        None,
        json!({"eventType": "run_created", "specVersion": 5, "eventData": {
            "workflowName": "workflow//app.ts//order", "deploymentId": "dpl_shop", "input": ["A-1"]}}),
    )
    .await
    .unwrap();
    assert!(created.status().is_success(), "{}", created.status());
    let created: Value = created.json().await.unwrap();
    let id = created["run"]["runId"].as_str().unwrap().to_owned();
    for body in [
        json!({"eventType": "run_started", "specVersion": 5}),
        json!({"eventType": "step_created", "specVersion": 5, "correlationId": "step_charge_1",
            "eventData": {"stepName": "step//app.ts//charge", "input": [1200]}}),
        json!({"eventType": "step_started", "specVersion": 5, "correlationId": "step_charge_1"}),
        json!({"eventType": "step_completed", "specVersion": 5, "correlationId": "step_charge_1",
            "eventData": {"result": ["ch_1"]}}),
        json!({"eventType": "hook_created", "specVersion": 5, "correlationId": "hook_approve_1",
            "eventData": {"token": "approve-A-1"}}),
    ] {
        let answer = event(Some(&id), body.clone()).await.unwrap();
        assert!(answer.status().is_success(), "{body}: {}", answer.status());
    }
    let written = http
        .post(format!(
            "{}/v1/runs/{id}/streams/strm_progress_user",
            s.base
        ))
        .bearer_auth(&s.admin)
        .body("charged")
        .send()
        .await
        .unwrap();
    assert_eq!(written.status().as_u16(), 201);
    let failed = event(
        Some(&id),
        json!({"eventType": "run_failed", "specVersion": 5,
            "eventData": {"error": {"message": "card declined"}}}),
    )
    .await
    .unwrap();
    assert!(failed.status().is_success(), "{}", failed.status());

    let signed_in = Session::sign_in(&s.base, &s.admin).await;
    let page = signed_in.text(&format!("{}/runs/{id}", s.base)).await;
    for expected in [
        "workflow//app.ts//order",
        "deployment dpl_shop",
        "step//app.ts//charge",
        "hook_approve_1",
        "strm_progress_user",
        "card declined",
    ] {
        assert!(page.contains(expected), "the page shows {expected}: {page}");
    }
    assert!(
        !page.contains("/retry"),
        "no retry offered for a run the engine cannot run"
    );
    let list = signed_in.text(&format!("{}/", s.base)).await;
    assert!(list.contains(&id), "the runs list shows it");
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}

/// Without a browser: a run whose payloads are encrypted at rest. Served by a world with the
/// keys, its page shows the values; by a world without them, "(encrypted)", and never the
/// sealed text.
#[tokio::test]
async fn an_encrypted_run_shows_its_values_with_the_keys_and_encrypted_without() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let nap = || {
        workflow("nap", |ctx: WorkflowContext, input: String| async move {
            ctx.get_writable().write(format!("chunk of {input}"))?;
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(())
        })
    };
    let config = |keys: Option<worlds_engine::EncryptionKeys>| {
        let mut config = WorldConfig::memory();
        config.persistence = Persistence::Hybrid;
        config.persistence_path = dir.path().to_path_buf();
        config.encryption_keys = keys;
        config
    };
    let keys = worlds_engine::EncryptionKeys::new("k1", [3; 32]).unwrap();
    let run = {
        let world = World::new(config(Some(keys.clone()))).unwrap();
        world.register(nap()).unwrap();
        world.start().await.unwrap();
        let run = world
            .execute(
                &nap(),
                "the secret input".to_owned(),
                WorkflowOptions::default(),
            )
            .await
            .unwrap()
            .id;
        // Until the run has written its chunk and sleeps.
        tokio::time::timeout(Duration::from_secs(10), async {
            while world
                .streams()
                .chunks(&run, "default", None, 10)
                .await
                .map_or(true, |page| page.data.is_empty())
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the run writes its chunk");
        world.shutdown().await.unwrap();
        run
    };
    for (keys, shows) in [(Some(keys), "the secret input"), (None, "(encrypted)")] {
        let world = Arc::new(World::new(config(keys)).unwrap());
        let ring = Arc::new(KeyRing::new());
        let read = ring
            .create("viewer", Scope::Read, world.clock().now_ms(), None)
            .key;
        let server = serve(world.clone(), "127.0.0.1:0", ApiOptions::with_keys(ring))
            .await
            .unwrap();
        let base = format!("http://{}", server.local_addr());
        let session = Session::sign_in(&base, &read).await;
        let page = session.text(&format!("{base}/runs/{run}")).await;
        assert!(page.contains(&askama_escape(shows)), "{page}");
        assert!(!page.contains("$sealed"), "{page}");
        // The run's stream, live: its chunk, then nothing more while the run sleeps.
        let mut live = session
            .http
            .get(format!("{base}/live/stream?run={run}&name=default"))
            .header("cookie", &session.cookie)
            .send()
            .await
            .unwrap();
        let mut events = String::new();
        while !events.contains("event: chunk") || !events.contains("\n\n") {
            let more = tokio::time::timeout(Duration::from_secs(10), live.chunk())
                .await
                .unwrap_or_else(|_| panic!("the chunk did not arrive: {events}"))
                .unwrap()
                .expect("the stream stays open");
            events.push_str(&String::from_utf8_lossy(&more));
        }
        let chunk = if shows == "(encrypted)" {
            "(encrypted)".to_owned()
        } else {
            format!("chunk of {shows}")
        };
        assert!(events.contains(&chunk), "{events}");
        assert!(!events.contains("$sealed"), "{events}");
        // The live stream's connection closed first: the server waits for open ones.
        drop(live);
        drop(session);
        server.shutdown().await;
        world.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_hook_id_cannot_steer_the_resume_form() {
    if let Some(browser) = Browser::start(Kind::Chromium).await {
        hostile_hook_id(browser).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_hook_id_cannot_steer_the_resume_form_in_firefox() {
    if let Some(browser) = Browser::start(Kind::Firefox).await {
        hostile_hook_id(browser).await;
    }
}

/// A DevKit app chooses its hook ids: one shaped as a path to another run's cancel, opened by
/// an admin, is checked and resumed as itself (the script's check and the form both), and the
/// other run keeps running.
async fn hostile_hook_id(browser: Browser) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let s = served().await;
    let victim = start(&s.world, "nap", Value::Null).await;
    let http = reqwest::Client::new();
    let event = |run_id: Option<&str>, event: Value| {
        http.post(format!("{}/v1/devkit/events", s.base))
            .bearer_auth(&s.admin)
            .json(&json!({"runId": run_id, "event": event, "params": {}}))
            .send()
    };
    let run: Value = event(
        None,
        json!({"eventType": "run_created", "specVersion": 5, "eventData": {
            "workflowName": "workflow//app.ts//approve", "deploymentId": "dpl_1", "input": []}}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let id = run["run"]["runId"].as_str().unwrap().to_owned();
    let hostile = format!("../../{victim}/cancel?");
    for body in [
        json!({"eventType": "run_started", "specVersion": 5}),
        json!({"eventType": "hook_created", "specVersion": 5, "correlationId": hostile,
            "eventData": {"token": "approve-hostile"}}),
    ] {
        let answer = event(Some(&id), body.clone()).await.unwrap();
        assert!(answer.status().is_success(), "{body}: {}", answer.status());
    }
    browser.sign_in(&s.base, &s.admin).await;
    browser.text("table.runs").await;
    {
        let path = format!("/runs/{id}");
        browser
            .client
            .goto(&format!("{}{path}", s.base))
            .await
            .unwrap();
        // Every link and form of the page, as the browser resolved it, stays off the victim's
        // paths.
        let targets = browser
            .client
            .execute(
                r#"return [...document.querySelectorAll("a[href], form[action], button[formaction], form[data-check]")]
                     .flatMap(e => [e.href, e.action, e.formAction, e.dataset && e.dataset.check
                       ? new URL(e.dataset.check, location.href).href : undefined])
                     .filter(u => typeof u === "string" && u !== "");"#,
                vec![],
            )
            .await
            .unwrap();
        for target in targets.as_array().unwrap() {
            let target = target.as_str().unwrap();
            let url = reqwest::Url::parse(target).unwrap();
            assert!(
                url.path_segments()
                    .unwrap()
                    .all(|segment| segment != victim),
                "{path}: {target} leads to the victim"
            );
        }
    }
    browser
        .client
        .goto(&format!("{}/runs/{id}", s.base))
        .await
        .unwrap();
    browser.fill("form.resume textarea", "true").await;
    browser.click("form.resume button").await;
    browser.until_text("#notice", "Hook resumed").await;
    let state = s.world.get_run(&id, ResolveData::All).await.unwrap();
    let hook = state.hooks.iter().find(|h| h.id == hostile).unwrap();
    assert!(hook.received_at.is_some(), "the hook got the payload");
    assert_eq!(
        s.world
            .get_run(&victim, ResolveData::None)
            .await
            .unwrap()
            .status,
        RunStatus::Running,
        "the victim keeps running"
    );
    browser.screenshot("run-hostile-hook-id").await;
    browser.end().await;
    s.server.shutdown().await;
    s.world.shutdown().await.unwrap();
}
