//! The storage conformance suite (`worlds_engine::testing::conformance`) run against the
//! memory, file and hybrid stores, and through encryption at rest (`SealedStore`) over memory
//! and hybrid, plus the check that keeps the suite complete
//! (`store_conformance/coverage.rs`).
//!
//! To add a backend, add one line: `worlds_engine::store_conformance!(name, factory);`.

use std::sync::Arc;

use worlds_engine::store::{FileStore, HybridStore, MemoryStore, SealedStore, Store};
use worlds_engine::EncryptionKeys;

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

/// Encryption at rest over `inner`: a sealed store must behave exactly as the store it wraps.
fn sealed(inner: Arc<dyn Store>) -> Arc<dyn Store> {
    let keys = EncryptionKeys::new("k1", [7; 32]).unwrap();
    Arc::new(SealedStore::new(inner, keys))
}

worlds_engine::store_conformance!(sealed_memory, || async {
    sealed(Arc::new(MemoryStore::new()))
});

worlds_engine::store_conformance!(sealed_hybrid, || async {
    let dir = tempfile::tempdir().unwrap().keep();
    sealed(Arc::new(HybridStore::open(dir).unwrap()))
});
