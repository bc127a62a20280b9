//! Stream names of any valid length reach the disk, and a chunk the store does not keep is never
//! reported as written.

use std::path::Path;
use std::sync::Arc;

use worlds_engine::prelude::*;
use worlds_engine::store::{FileStore, HybridStore, NewChunk, Store};
use worlds_engine::streams::MAX_STREAM_NAME;
use worlds_engine::testing::{TestWorld, TestWorldOptions, DEFAULT_START};

const RUN: &str = "wrun_01JLONGSTREAMNAMES000000000";

/// Names at the edges: multi-byte names whose escaped file names would pass 255 bytes, and
/// names of exactly the longest length allowed.
fn names() -> Vec<String> {
    vec![
        "é".repeat(90),
        "é".repeat(MAX_STREAM_NAME / 2),
        "日".repeat(MAX_STREAM_NAME / 3),
        "a".repeat(MAX_STREAM_NAME),
        "%".repeat(MAX_STREAM_NAME),
        format!("v1.2 {}", "é".repeat(95)),
        "short".to_owned(),
    ]
}

fn chunk(n: usize) -> NewChunk {
    NewChunk {
        id: format!("chnk_{n}"),
        created_at: DEFAULT_START,
        key: None,
        data: format!("chunk {n}").into(),
    }
}

async fn round_trip(open: impl Fn() -> Arc<dyn Store>) {
    let mut expected = names();
    expected.sort();
    {
        let store = open();
        for (n, name) in names().iter().enumerate() {
            let stored = store.write_chunk(RUN, name, chunk(n)).await.unwrap();
            assert_eq!(stored.index, 0);
            let (chunks, _) = store.stream_chunks(RUN, name, 0, 10).await.unwrap();
            assert_eq!(chunks.len(), 1, "{name}");
            assert_eq!(chunks[0].text(), Some(format!("chunk {n}").as_str()));
        }
        assert_eq!(store.list_streams(RUN).await.unwrap(), expected);
    }
    // Reopened, every stream is found again under its own name.
    let store = open();
    assert_eq!(store.list_streams(RUN).await.unwrap(), expected);
    for (n, name) in names().iter().enumerate() {
        let (chunks, _) = store.stream_chunks(RUN, name, 0, 10).await.unwrap();
        assert_eq!(chunks[0].text(), Some(format!("chunk {n}").as_str()));
        let next = store.write_chunk(RUN, name, chunk(100 + n)).await.unwrap();
        assert_eq!(next.index, 1, "{name}");
    }
}

#[tokio::test]
async fn long_multibyte_names_round_trip_on_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    round_trip(|| Arc::new(FileStore::open(dir.path()).unwrap())).await;
}

#[tokio::test]
async fn long_multibyte_names_round_trip_on_the_hybrid_store() {
    let dir = tempfile::tempdir().unwrap();
    round_trip(|| Arc::new(HybridStore::open(dir.path()).unwrap())).await;
}

async fn world_on(dir: &Path) -> TestWorld {
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir).unwrap());
    TestWorld::with_options(TestWorldOptions {
        store: Some(store),
        ..TestWorldOptions::default()
    })
    .await
}

#[tokio::test]
async fn a_workflow_write_the_store_refused_is_reported_by_the_next_write() {
    let dir = tempfile::tempdir().unwrap();
    let test = world_on(dir.path()).await;
    // No stream file can be created: `streams` is a file, not a directory.
    std::fs::write(dir.path().join("streams"), b"in the way").unwrap();
    let flow = workflow("refused", |ctx: WorkflowContext, _: ()| async move {
        let out = ctx.get_writable_named("progress");
        out.write("lost")?;
        ctx.sleep("1s").await?;
        Ok::<_, WorkflowError>(match out.write("after") {
            Ok(()) => "stored".to_owned(),
            Err(e) => e.to_string(),
        })
    });
    test.register(&flow).unwrap();
    let run = test
        .execute(&flow, (), WorkflowOptions::default())
        .await
        .unwrap();
    let state = test.run_until_complete(&run.id, "1m").await.unwrap();
    let output: String = state.output.unwrap().decode().unwrap();
    assert!(
        output.contains("progress") && output.contains("not stored"),
        "the next write reports the refusal: {output}"
    );
}
