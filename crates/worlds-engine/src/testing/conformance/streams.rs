//! Conformance checks for [`StreamStore`](crate::store::StreamStore): dense indexes, pages, write keys, closing, names and
//! the change signal.

use super::*;

fn chunk(m: &Maker, key: Option<&str>, data: impl Into<Bytes>) -> NewChunk {
    NewChunk {
        id: m.ids.next(CHUNK_PREFIX),
        created_at: m.now(),
        key: key.map(str::to_owned),
        data: data.into(),
    }
}

/// Chunks get indexes 0, 1, 2… per stream; pages slice them; unknown streams read as empty.
pub async fn streams_get_dense_indexes_pages_and_names(store: Arc<dyn Store>) {
    let m = Maker::new();
    let run = m.run_id();
    for i in 0..5 {
        let stored = store
            .write_chunk(&run, "default", chunk(&m, None, format!("c{i}")))
            .await
            .unwrap();
        assert_eq!(stored.index, i);
        assert!(stored.id.starts_with(CHUNK_PREFIX));
        assert_eq!(stored.created_at, m.now());
        m.tick(1);
    }
    store
        .write_chunk(&run, "b-side", chunk(&m, None, "x"))
        .await
        .unwrap();
    let (page, info) = store.stream_chunks(&run, "default", 1, 3).await.unwrap();
    let indexes: Vec<u64> = page.iter().map(|c| c.index).collect();
    assert_eq!(indexes, [1, 2, 3]);
    assert_eq!(page[0].data, Bytes::from("c1"));
    assert_eq!(
        info,
        StreamInfo {
            tail_index: 4,
            done: false
        }
    );
    let (rest, _) = store.stream_chunks(&run, "default", 4, 10).await.unwrap();
    assert_eq!(rest.len(), 1);
    let (past, _) = store.stream_chunks(&run, "default", 9, 10).await.unwrap();
    assert!(past.is_empty());
    assert_eq!(
        store.list_streams(&run).await.unwrap(),
        vec!["b-side".to_owned(), "default".to_owned()]
    );
    // Unknown streams and runs read as empty and open.
    let empty = StreamInfo {
        tail_index: -1,
        done: false,
    };
    assert_eq!(store.stream_info(&run, "nope").await.unwrap(), empty);
    assert_eq!(
        store.stream_info(&m.run_id(), "default").await.unwrap(),
        empty
    );
    assert!(store.list_streams(&m.run_id()).await.unwrap().is_empty());
}

/// A write key is stored once; a closed stream refuses new chunks (409) but still finds keyed ones.
pub async fn stream_keys_dedupe_and_closed_streams_refuse_new_chunks(store: Arc<dyn Store>) {
    let m = Maker::new();
    let run = m.run_id();
    let first = store
        .write_chunk(&run, "s", chunk(&m, Some("w1.0"), "a"))
        .await
        .unwrap();
    let again = store
        .write_chunk(&run, "s", chunk(&m, Some("w1.0"), "a"))
        .await
        .unwrap();
    assert_eq!(again, first, "a key already stored adds nothing");
    store
        .write_chunk(&run, "s", chunk(&m, Some("w1.1"), "b"))
        .await
        .unwrap();
    store.close_stream(&run, "s").await.unwrap();
    store.close_stream(&run, "s").await.unwrap();
    assert_eq!(
        store.stream_info(&run, "s").await.unwrap(),
        StreamInfo {
            tail_index: 1,
            done: true
        }
    );
    let refused = store.write_chunk(&run, "s", chunk(&m, None, "c")).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::Conflict);
    // A replayed write of a stored key still finds its chunk once the stream is closed.
    let replayed = store
        .write_chunk(&run, "s", chunk(&m, Some("w1.0"), "a"))
        .await
        .unwrap();
    assert_eq!(replayed, first);

    // Closing the run closes every open stream; closing an unknown stream creates it closed.
    store
        .write_chunk(&run, "t", chunk(&m, None, "x"))
        .await
        .unwrap();
    store.close_stream(&run, "never-written").await.unwrap();
    store.close_run_streams(&run).await.unwrap();
    assert!(store.stream_info(&run, "t").await.unwrap().done);
    assert_eq!(
        store.stream_info(&run, "never-written").await.unwrap(),
        StreamInfo {
            tail_index: -1,
            done: true
        }
    );
    assert_eq!(
        store.list_streams(&run).await.unwrap(),
        ["never-written", "s", "t"]
    );
    store.close_run_streams(&m.run_id()).await.unwrap();
}

/// Any bytes (empty, binary, text with newlines) and any names come back as written.
pub async fn stream_data_and_names_round_trip(store: Arc<dyn Store>) {
    let m = Maker::new();
    let run = m.run_id();
    let payloads: Vec<Bytes> = vec![
        Bytes::new(),
        Bytes::from_static(&[0, 159, 146, 150, 255, b'\n']),
        Bytes::from("line one\nline \"two\" ünï ✓"),
        Bytes::from(serde_json::to_vec(&json!({ "progress": 50 })).unwrap()),
    ];
    let names = ["a/b", ".hidden", "ünï côdé", "50% done", "default"];
    for name in names {
        for data in &payloads {
            store
                .write_chunk(&run, name, chunk(&m, None, data.clone()))
                .await
                .unwrap();
        }
        let (stored, _) = store.stream_chunks(&run, name, 0, 100).await.unwrap();
        let data: Vec<Bytes> = stored.into_iter().map(|c| c.data).collect();
        assert_eq!(data, payloads, "stream {name:?}");
    }
    let mut sorted: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    sorted.sort();
    assert_eq!(store.list_streams(&run).await.unwrap(), sorted);
}

/// The change signal fires once per change to the run's streams, and not for other runs.
pub async fn stream_signal_fires_after_each_change(store: Arc<dyn Store>) {
    use futures::FutureExt;
    let m = Maker::new();
    let run = m.run_id();
    let mut signal = store.watch_streams(&run);
    assert!(
        signal.changed().now_or_never().is_none(),
        "nothing changed yet"
    );
    store
        .write_chunk(&run, "s", chunk(&m, None, "a"))
        .await
        .unwrap();
    assert!(signal.changed().now_or_never().is_some());
    assert!(signal.changed().now_or_never().is_none());
    store.close_run_streams(&run).await.unwrap();
    assert!(signal.changed().now_or_never().is_some());
    // Another run's changes do not fire it.
    store
        .write_chunk(&m.run_id(), "s", chunk(&m, None, "b"))
        .await
        .unwrap();
    assert!(signal.changed().now_or_never().is_none());
}
