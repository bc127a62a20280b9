//! The storage conformance suite (`worlds_engine::testing::conformance`) run against the
//! memory, file and hybrid stores, plus the check that keeps the suite complete
//! (`store_conformance/coverage.rs`).
//!
//! To add a backend, add one line: `worlds_engine::store_conformance!(name, factory);`.

use std::sync::Arc;

use worlds_engine::store::{FileStore, HybridStore, MemoryStore, Store};

#[path = "store_conformance/coverage.rs"]
mod coverage;

worlds_engine::store_conformance!(memory, || async {
    Arc::new(MemoryStore::new()) as Arc<dyn Store>
});

worlds_engine::store_conformance!(file, || async {
    // The directory must outlive the store: keep it for the test process's life.
    let dir = tempfile::tempdir().unwrap().keep();
    Arc::new(FileStore::open(dir).unwrap()) as Arc<dyn Store>
});

worlds_engine::store_conformance!(hybrid, || async {
    // The directory must outlive the store: keep it for the test process's life.
    let dir = tempfile::tempdir().unwrap().keep();
    Arc::new(HybridStore::open(dir).unwrap()) as Arc<dyn Store>
});
