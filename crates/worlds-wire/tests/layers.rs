//! The wire crate's modules form no import circle: each body module stands alone, and
//! `openapi` (the engine records' schemas) is named by the bodies, never the reverse. The
//! reading is the engine's (`worlds-engine/tests/layers_lib/mod.rs`), shared by the layer
//! tests of every crate.

#[path = "../../worlds-engine/tests/layers_lib/mod.rs"]
mod layers_lib;

#[test]
fn no_two_modules_use_each_other() {
    layers_lib::assert_no_module_circles(&[]);
}

/// The bodies are plain values of the API: no body module builds on another's, so each can be
/// read (and changed) on its own.
#[test]
fn the_body_modules_use_only_the_schemas() {
    let between: Vec<_> = layers_lib::edges()
        .into_iter()
        .filter(|(_, to)| to != "openapi")
        .collect();
    assert!(
        between.is_empty(),
        "body modules use each other: {between:?}; a shape two bodies share belongs in one module"
    );
}
