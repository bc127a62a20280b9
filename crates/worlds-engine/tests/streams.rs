//! Streams: written by workflows, steps and outside code; read live, by page and by info;
//! closed by hand or when the run ends; never duplicated by replay; durable on the file store.

mod common;

use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use serde_json::json;
use tokio::sync::{oneshot, Mutex as AsyncMutex};
use worlds_engine::clock::Millis;
use worlds_engine::prelude::*;
use worlds_engine::store::{FileStore, NewChunk, Store, StreamStore};
use worlds_engine::streams::{StreamChunk, StreamInfo};
use worlds_engine::testing::{TestWorld, TestWorldOptions, DEFAULT_START};
use worlds_engine::ErrorKind;

use common::{memory_config, test_world, test_world_with, Counter, Mode};

fn texts(chunks: &[StreamChunk]) -> Vec<String> {
    chunks
        .iter()
        .map(|c| c.text().unwrap_or("<binary>").to_owned())
        .collect()
}

fn indexes(chunks: &[StreamChunk]) -> Vec<u64> {
    chunks.iter().map(|c| c.index).collect()
}

/// Everything stored in a stream, through the paged API.
async fn all_chunks(world: &World, run_id: &str, name: &str) -> Vec<StreamChunk> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = world
            .streams()
            .chunks(run_id, name, cursor.as_deref(), 7)
            .await
            .unwrap();
        out.extend(page.data);
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
}

/// A step that writes `n` lines to the default stream and one to `log`.
fn chatty_step() -> Activity<u32, u32> {
    activity("chatty", |ctx: ActivityContext, n: u32| async move {
        let out = ctx.get_writable();
        for i in 0..n {
            let chunk = out.write(format!("step {i}")).await?;
            assert!(chunk.id.starts_with("chnk_"));
        }
        ctx.get_writable_named("log")
            .write_json(&json!({ "lines": n }))
            .await?;
        Ok::<_, StepError>(n)
    })
}

/// Workflow writes around a step and a sleep: in evicting mode every await is a replay, and each
/// replay issues the earlier writes again.
fn chatty_flow(step: &Activity<u32, u32>) -> Workflow<u32, u32> {
    let step = step.clone();
    workflow("chatty-flow", move |ctx: WorkflowContext, n: u32| {
        let step = step.clone();
        async move {
            let out = ctx.get_writable();
            out.write("start")?;
            let wrote = ctx.run(&step, n).await?;
            out.write_json(&json!({ "step_wrote": wrote }))?;
            ctx.sleep("1s").await?;
            out.write("end")?;
            Ok::<_, WorkflowError>(wrote)
        }
    })
}

async fn workflow_and_step_writes_land_once_in_order(mode: Mode) {
    let test = test_world(mode).await;
    let step = chatty_step();
    let flow = chatty_flow(&step);
    test.register(&step).unwrap().register(&flow).unwrap();
    let run = test
        .execute(&flow, 3, WorkflowOptions::default())
        .await
        .unwrap();
    let done = test.run_until_complete(&run.id, "1m").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);

    let chunks = all_chunks(&test, &run.id, "default").await;
    assert_eq!(
        texts(&chunks),
        [
            "start",
            "step 0",
            "step 1",
            "step 2",
            r#"{"step_wrote":3}"#,
            "end"
        ]
    );
    assert_eq!(indexes(&chunks), [0, 1, 2, 3, 4, 5]);
    assert_eq!(
        chunks[4].json::<serde_json::Value>().unwrap()["step_wrote"],
        3
    );
    let log = all_chunks(&test, &run.id, "log").await;
    assert_eq!(
        log[0].json::<serde_json::Value>().unwrap(),
        json!({ "lines": 3 })
    );
    assert_eq!(
        test.streams().list(&run.id).await.unwrap(),
        ["default", "log"]
    );
    // The run finished, so its streams are closed.
    let info = test.streams().info(&run.id, "default").await.unwrap();
    assert_eq!(
        info,
        StreamInfo {
            tail_index: 5,
            done: true
        }
    );
    let late = test.streams().write(&run.id, "default", "late").await;
    assert_eq!(late.unwrap_err().kind(), ErrorKind::Conflict);
    // Workflow ids address streams too.
    let by_workflow_id = test.streams().info(&done.workflow_id, "log").await.unwrap();
    assert!(by_workflow_id.done);
}

async fn a_closed_stream_ends_readers_and_refuses_writes(mode: Mode) {
    let test = test_world(mode).await;
    let flow = workflow("closer", |ctx: WorkflowContext, _: ()| async move {
        let out = ctx.get_writable_named("progress");
        out.write("half")?;
        out.close();
        ctx.sleep("1h").await?;
        // Refused by the store (and logged): the stream is closed.
        out.write("after close")?;
        Ok::<_, WorkflowError>(())
    });
    test.register(&flow).unwrap();
    let run = test
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    test.settle().await;
    // The run still sleeps, but the stream is done: a reader gets its chunk and ends.
    let info = test.streams().info(&run.id, "progress").await.unwrap();
    assert_eq!(
        info,
        StreamInfo {
            tail_index: 0,
            done: true
        }
    );
    let read: Vec<_> = test
        .streams()
        .read(&run.id, "progress", 0)
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].as_ref().unwrap().text(), Some("half"));
    let refused = test.streams().write(&run.id, "progress", "x").await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::Conflict);
    test.run_until_complete(&run.id, "2h").await.unwrap();
    let chunks = all_chunks(&test, &run.id, "progress").await;
    assert_eq!(texts(&chunks), ["half"]);
}

in_both_modes!(
    workflow_and_step_writes_land_once_in_order,
    a_closed_stream_ends_readers_and_refuses_writes,
);

/// A run that waits an hour, so outside code can use its streams meanwhile.
fn sleeper() -> Workflow<(), ()> {
    workflow("sleeper", |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep("1h").await?;
        Ok::<_, WorkflowError>(())
    })
}

#[tokio::test]
async fn negative_start_indexes_count_back_from_the_tail() {
    let test = test_world(Mode::Cached).await;
    let flow = sleeper();
    test.register(&flow).unwrap();
    let run = test
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    for i in 0..5 {
        test.streams()
            .write(&run.id, "default", format!("c{i}"))
            .await
            .unwrap();
    }
    test.streams().close(&run.id, "default").await.unwrap();
    for (start, expected) in [
        (-1, vec!["c4"]),
        (-2, vec!["c3", "c4"]),
        (-5, vec!["c0", "c1", "c2", "c3", "c4"]),
        (-9, vec!["c0", "c1", "c2", "c3", "c4"]),
        (3, vec!["c3", "c4"]),
        (7, vec![]),
    ] {
        let read: Vec<StreamChunk> = test
            .streams()
            .read(&run.id, "default", start)
            .await
            .unwrap()
            .map(Result::unwrap)
            .collect()
            .await;
        assert_eq!(texts(&read), expected, "start index {start}");
    }
}

#[tokio::test]
async fn pages_walk_every_stored_chunk_with_cursors() {
    let test = test_world(Mode::Cached).await;
    let flow = sleeper();
    test.register(&flow).unwrap();
    let run = test
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    for i in 0..250u32 {
        test.streams()
            .write(&run.id, "bulk", i.to_be_bytes().to_vec())
            .await
            .unwrap();
    }
    let first = test
        .streams()
        .chunks(&run.id, "bulk", None, 100)
        .await
        .unwrap();
    assert_eq!(first.data.len(), 100);
    assert!(first.has_more);
    let second = test
        .streams()
        .chunks(&run.id, "bulk", first.cursor.as_deref(), 100)
        .await
        .unwrap();
    assert_eq!(second.data[0].index, 100);
    let third = test
        .streams()
        .chunks(&run.id, "bulk", second.cursor.as_deref(), 100)
        .await
        .unwrap();
    assert_eq!(third.data.len(), 50);
    assert!(!third.has_more);
    assert_eq!(third.cursor, None);
    assert_eq!(third.data[49].data.as_ref(), 249u32.to_be_bytes());
    // Limit 0 is the default page size.
    let default = test
        .streams()
        .chunks(&run.id, "bulk", None, 0)
        .await
        .unwrap();
    assert_eq!(default.data.len(), 100);
    let bad = test.streams().chunks(&run.id, "bulk", Some("x1"), 10).await;
    assert_eq!(bad.unwrap_err().kind(), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn unknown_runs_are_not_found_and_unknown_streams_are_empty() {
    let test = test_world(Mode::Cached).await;
    let flow = sleeper();
    test.register(&flow).unwrap();
    let run = test
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();

    let missing = "wrun_01JZZZZZZZZZZZZZZZZZZZZZZZ";
    let not_found = |kind: ErrorKind| assert_eq!(kind, ErrorKind::NotFound);
    not_found(
        test.streams()
            .info(missing, "default")
            .await
            .unwrap_err()
            .kind(),
    );
    not_found(test.streams().list(missing).await.unwrap_err().kind());
    not_found(
        test.streams()
            .read(missing, "default", 0)
            .await
            .unwrap_err()
            .kind(),
    );
    not_found(
        test.streams()
            .chunks(missing, "default", None, 10)
            .await
            .unwrap_err()
            .kind(),
    );
    not_found(
        test.streams()
            .write(missing, "default", "x")
            .await
            .unwrap_err()
            .kind(),
    );
    not_found(
        test.streams()
            .close(missing, "default")
            .await
            .unwrap_err()
            .kind(),
    );
    let bad_name = test.streams().write(&run.id, "", "x").await.unwrap_err();
    assert_eq!(bad_name.kind(), ErrorKind::InvalidInput);

    // A name the run never wrote to is empty and open while the run goes on…
    let info = test.streams().info(&run.id, "nothing").await.unwrap();
    assert_eq!(
        info,
        StreamInfo {
            tail_index: -1,
            done: false
        }
    );
    assert!(test.streams().list(&run.id).await.unwrap().is_empty());
    // …and a reader of it waits until the run finishes, then ends with nothing.
    let reader = test.streams().read(&run.id, "nothing", 0).await.unwrap();
    let collected = tokio::spawn(reader.collect::<Vec<_>>());
    test.run_until_complete(&run.id, "2h").await.unwrap();
    assert!(collected.await.unwrap().is_empty());
    let info = test.streams().info(&run.id, "nothing").await.unwrap();
    assert_eq!(
        info,
        StreamInfo {
            tail_index: -1,
            done: true
        }
    );
}

#[tokio::test]
async fn chunks_over_the_payload_limit_are_refused() {
    let mut config = memory_config();
    config.max_payload_bytes = 64;
    let test = test_world_with(Mode::Cached, config).await;
    let big = vec![b'x'; 65];
    let step_refused = Counter::default();
    let seen = step_refused.clone();
    let step = activity("big-writer", move |ctx: ActivityContext, _: ()| {
        let seen = seen.clone();
        async move {
            let err = ctx.get_writable().write(vec![b'y'; 65]).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::PayloadTooLarge);
            assert_eq!(err.http_status(), 413);
            seen.bump();
            ctx.get_writable().write("fits").await?;
            Ok::<_, StepError>(())
        }
    });
    let s = step.clone();
    let flow = workflow("big", move |ctx: WorkflowContext, _: ()| {
        let s = s.clone();
        async move {
            let refused = ctx.get_writable().write(vec![b'z'; 65]);
            assert!(matches!(refused, Err(ContextError::InvalidArgument { .. })));
            ctx.run(&s, ()).await?;
            ctx.sleep("1h").await?;
            Ok::<_, WorkflowError>(())
        }
    });
    test.register(&step).unwrap().register(&flow).unwrap();
    let run = test
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    test.settle().await;
    let err = test
        .streams()
        .write(&run.id, "default", big)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PayloadTooLarge);
    test.run_until_complete(&run.id, "2h").await.unwrap();
    assert_eq!(step_refused.get(), 1);
    assert_eq!(
        texts(&all_chunks(&test, &run.id, "default").await),
        ["fits"]
    );
}

#[tokio::test]
async fn a_retried_step_writes_its_chunks_again() {
    let test = test_world(Mode::Evicting).await;
    let step = activity("flaky-writer", |ctx: ActivityContext, _: ()| async move {
        ctx.get_writable()
            .write(format!("attempt {}", ctx.attempt()))
            .await?;
        if ctx.attempt() == 1 {
            return Err(StepError::msg("first attempt fails"));
        }
        Ok::<_, StepError>(())
    })
    .with_options(ActivityOptions::new().retry(RetryConfig::new().max_attempts(3)));
    let s = step.clone();
    let flow = workflow("flaky", move |ctx: WorkflowContext, _: ()| {
        let s = s.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&s, ()).await?) }
    });
    test.register(&step).unwrap().register(&flow).unwrap();
    let run = test
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let done = test.run_until_complete(&run.id, "1h").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(
        texts(&all_chunks(&test, &run.id, "default").await),
        ["attempt 1", "attempt 2"]
    );
}

/// Reading mid-stream while a step writes: every index once, in order, for a reader from the
/// start and one from the tail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_joining_mid_stream_sees_every_chunk_once_in_order() {
    const TOTAL: u64 = 300;
    const BEFORE: u64 = 40;
    let test = test_world(Mode::Cached).await;
    let (halfway_tx, halfway_rx) = oneshot::channel::<()>();
    let (go_tx, go_rx) = oneshot::channel::<()>();
    let gates = Arc::new(AsyncMutex::new(Some((halfway_tx, go_rx))));
    let step = activity("streamer", move |ctx: ActivityContext, _: ()| {
        let gates = gates.clone();
        async move {
            let out = ctx.get_writable();
            for i in 0..TOTAL {
                if i == BEFORE {
                    if let Some((halfway, go)) = gates.lock().await.take() {
                        let _ = halfway.send(());
                        let _ = go.await;
                    }
                }
                out.write(i.to_string()).await?;
                tokio::task::yield_now().await;
            }
            Ok::<_, StepError>(())
        }
    });
    let s = step.clone();
    let flow = workflow("streaming", move |ctx: WorkflowContext, _: ()| {
        let s = s.clone();
        async move { Ok::<_, WorkflowError>(ctx.run(&s, ()).await?) }
    });
    test.register(&step).unwrap().register(&flow).unwrap();
    let run = test
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    halfway_rx.await.unwrap();

    let from_start = test.streams().read(&run.id, "default", 0).await.unwrap();
    let from_tail = test.streams().read(&run.id, "default", -3).await.unwrap();
    let from_start = tokio::spawn(from_start.map(Result::unwrap).collect::<Vec<_>>());
    let from_tail = tokio::spawn(from_tail.map(Result::unwrap).collect::<Vec<_>>());
    go_tx.send(()).unwrap();
    // The step runs on real time: wait for the result rather than drive the virtual clock.
    run.result().await.unwrap();

    let all = from_start.await.unwrap();
    assert_eq!(indexes(&all), (0..TOTAL).collect::<Vec<_>>());
    let expected: Vec<String> = (0..TOTAL).map(|i| i.to_string()).collect();
    assert_eq!(texts(&all), expected);
    let tail = from_tail.await.unwrap();
    assert_eq!(indexes(&tail), (BEFORE - 3..TOTAL).collect::<Vec<_>>());
}

/// A test world on a file store in `dir`, not started yet.
async fn world_on(dir: &Path, start: Millis) -> TestWorld {
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir).unwrap());
    TestWorld::with_options(TestWorldOptions {
        store: Some(store),
        initial_time: start,
        autostart: false,
        ..TestWorldOptions::default()
    })
    .await
}

#[tokio::test]
async fn streams_survive_a_restart_and_replay_adds_no_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let first = world_on(dir.path(), DEFAULT_START).await;
    let step = chatty_step();
    let flow = chatty_flow(&step);
    first.register(&step).unwrap().register(&flow).unwrap();
    first.world().start().await.unwrap();
    let run = first
        .execute(&flow, 2, WorkflowOptions::default())
        .await
        .unwrap();
    first.settle().await;
    // Asleep after the step: four chunks so far.
    let before = all_chunks(&first, &run.id, "default").await;
    assert_eq!(before.len(), 4);
    let asleep_at = first.now();
    first.shutdown().await.unwrap();
    let run_id = run.id.clone();
    drop(run);
    drop(first);

    let second = world_on(dir.path(), asleep_at).await;
    let step = chatty_step();
    let flow = chatty_flow(&step);
    second.register(&step).unwrap().register(&flow).unwrap();
    assert_eq!(all_chunks(&second, &run_id, "default").await, before);
    second.world().start().await.unwrap();
    // The resumed run replays its two earlier writes: the store keeps one chunk of each.
    second.run_until_complete(&run_id, "1h").await.unwrap();
    let after = all_chunks(&second, &run_id, "default").await;
    assert_eq!(after[..4], before[..]);
    assert_eq!(texts(&after[4..]), ["end"]);
    let info = second.streams().info(&run_id, "default").await.unwrap();
    assert_eq!(
        info,
        StreamInfo {
            tail_index: 4,
            done: true
        }
    );
    let file = dir
        .path()
        .join("streams")
        .join(&run_id)
        .join("default.ndjson");
    let text = std::fs::read_to_string(file).unwrap();
    assert_eq!(text.lines().count(), 6, "five chunks and the close");
}

#[tokio::test]
async fn two_file_stores_on_one_directory_share_a_stream() {
    let dir = tempfile::tempdir().unwrap();
    let a = FileStore::open(dir.path()).unwrap();
    let b = FileStore::open(dir.path()).unwrap();
    let run = "wrun_01JSHAREDSTREAM0000000000";
    let chunk = |id: &str, data: &'static str| NewChunk {
        id: id.to_owned(),
        created_at: DEFAULT_START,
        key: None,
        data: data.into(),
    };
    a.write_chunk(run, "s", chunk("chnk_a", "from a"))
        .await
        .unwrap();
    let (seen, _) = b.stream_chunks(run, "s", 0, 10).await.unwrap();
    assert_eq!(texts(&seen), ["from a"]);
    let from_b = b
        .write_chunk(run, "s", chunk("chnk_b", "from b"))
        .await
        .unwrap();
    assert_eq!(from_b.index, 1);
    let from_a = a
        .write_chunk(run, "s", chunk("chnk_c", "a again"))
        .await
        .unwrap();
    assert_eq!(from_a.index, 2, "a picked up b's chunk before writing");
    b.close_stream(run, "s").await.unwrap();
    assert_eq!(
        a.stream_info(run, "s").await.unwrap(),
        StreamInfo {
            tail_index: 2,
            done: true
        }
    );
    let refused = a.write_chunk(run, "s", chunk("chnk_d", "late")).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(b.list_streams(run).await.unwrap(), ["s"]);
}
