//! The engine's storage conformance suite, on PostgreSQL: each check gets a fresh schema.

mod common;

worlds_engine::store_conformance!(postgres, common::fixture);
