//! Conformance checks for [`KeyStore`](crate::store::KeyStore): API key records round-trip,
//! are listed by id, and a saved change (a revocation) replaces the record.

use super::*;
use crate::model::keys::{ApiKeyRecord, Scope};

fn key_record(id: &str, scope: Scope) -> ApiKeyRecord {
    ApiKeyRecord {
        id: id.into(),
        name: format!("key {id} — für Tests \"quoted\""),
        scope,
        digest: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        created_at: T0,
        expires_at: Some(T0 + 86_400_000),
        revoked_at: None,
    }
}

/// Records come back as saved, ordered by id; saving one again under its id replaces it (a
/// revocation); an id that is not a key id is refused with nothing saved.
pub async fn api_keys_round_trip_list_by_id_and_are_replaced(store: Arc<dyn Store>) {
    assert!(store.list_keys().await.unwrap().is_empty());
    let b = key_record("bbbbbbb2", Scope::Read);
    let a = key_record("AAAAAAA1", Scope::Admin);
    let mut c = key_record("ccccccc3", Scope::Write);
    c.expires_at = None;
    for record in [&b, &a, &c] {
        store.save_key(record).await.unwrap();
    }
    assert_eq!(
        store.list_keys().await.unwrap(),
        vec![a.clone(), b.clone(), c.clone()]
    );

    let mut revoked = b.clone();
    revoked.revoked_at = Some(T0 + 5);
    store.save_key(&revoked).await.unwrap();
    let listed = store.list_keys().await.unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[1], revoked);

    let mut bad = key_record("../escape", Scope::Admin);
    assert!(store.save_key(&bad).await.is_err());
    bad.id = "short".into();
    assert!(store.save_key(&bad).await.is_err());
    assert_eq!(store.list_keys().await.unwrap().len(), 3);
}
