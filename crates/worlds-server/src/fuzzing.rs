//! The entry point of the `http_body` fuzz target (feature `fuzzing`): request bodies sent
//! through the whole router — authentication, extraction, the handlers and the world behind
//! them — must get an answer that is not a server error, whatever their bytes. Not part of the
//! public API.

use std::cell::RefCell;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use serde_json::Value;
use tower::ServiceExt;
use worlds_engine::prelude::*;

use crate::auth::{ApiKeys, Scope};
use crate::{router, ApiOptions};

/// The routes that take a JSON body; the fuzz input's first byte picks one.
const ROUTES: &[&str] = &[
    "/v1/runs",
    "/v1/hooks/resume",
    "/v1/schedules",
    "/v1/bulk",
    "/v1/keys",
    "/v1/runs/wrun_fuzz/retry",
    "/v1/runs/wrun_fuzz/reset",
    "/v1/runs/wrun_fuzz/cancel",
];

struct Target {
    runtime: tokio::runtime::Runtime,
    app: Router,
    key: String,
}

/// A fresh world every this many inputs, so the runs the inputs start do not pile up in
/// memory over millions of executions.
const INPUTS_PER_WORLD: u32 = 20_000;

thread_local! {
    static TARGET: RefCell<Option<(Target, u32)>> = const { RefCell::new(None) };
}

fn new_target() -> Target {
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let (app, key) = runtime.block_on(async {
            let world = Arc::new(World::new(WorldConfig::memory()).expect("a memory world"));
            let echo = workflow("echo", |_ctx: WorkflowContext, input: Value| async move {
                Ok::<_, WorkflowError>(input)
            });
            let wait = workflow("wait", |ctx: WorkflowContext, _: Value| async move {
                let hook = ctx.create_hook_with::<Value>(HookOptions::new().token("fuzz"));
                Ok::<_, WorkflowError>(hook.wait().await?)
            });
            world
                .register(&echo)
                .and_then(|w| w.register(&wait))
                .expect("registered");
            world.start().await.expect("started");
            let keys = ApiKeys::open(world.clone())
                .await
                .expect("the world's keys");
            let key = keys
                .create("fuzz", Scope::Admin, None)
                .await
                .expect("a key")
                .key;
            (router(world, ApiOptions::with_world_keys(keys)), key)
        });
        Target { runtime, app, key }
    }
}

/// The first byte picks a route, the rest is the body. Panics if the answer is a server error
/// (5xx): bad input must be refused with a 4xx that says what was wrong.
pub fn http_body(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let path = ROUTES[pick as usize % ROUTES.len()];
    let response = TARGET.with_borrow_mut(|slot| {
        let (target, used) = match slot {
            Some((_, used)) if *used < INPUTS_PER_WORLD => slot.as_mut().expect("just matched"),
            _ => slot.insert((new_target(), 0)),
        };
        *used += 1;
        let request = Request::post(path)
            .header("authorization", format!("Bearer {}", target.key))
            .header("content-type", "application/json")
            .body(Body::from(body.to_vec()))
            .expect("a request");
        target
            .runtime
            .block_on(target.app.clone().oneshot(request))
            .expect("the router answers")
    });
    let status = response.status();
    assert!(
        !status.is_server_error() || status == StatusCode::SERVICE_UNAVAILABLE,
        "POST {path} answered {status}"
    );
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    /// The kept inputs of the `http_body` target, including any that once found a fault.
    #[test]
    fn the_kept_corpus_replays_without_a_server_error() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/http_body");
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).expect("the http_body corpus") {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| super::http_body(&data));
            assert!(outcome.is_ok(), "http_body failed on {}", path.display());
            count += 1;
        }
        assert!(count > 0, "the http_body corpus is empty");
    }
}
