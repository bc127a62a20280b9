//! The engine's storage conformance suite, on PostgreSQL (and through encryption at rest on
//! PostgreSQL): each check gets a fresh schema.

mod common;

worlds_engine::store_conformance!(postgres, common::fixture);

worlds_engine::store_conformance!(postgres_sealed, common::sealed_fixture);
