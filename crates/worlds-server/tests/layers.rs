//! The server crate's modules in layers, with no import circle between them.
//!
//! From the bottom: plain values (`error`, `openapi`, `auth`, `body_limits`); the state every
//! handler gets (`state`: `Api`, with the DevKit's run locks and callback origins); the
//! handlers (`routes`, `devkit`, and with its feature `dashboard`, which also uses `routes`);
//! and the crate root, whose route list names every handler and builds the router and the
//! OpenAPI document from it. The fuzz targets' entry points (`fuzzing`) call the router.
//!
//! A module "uses" another when its code (not its comments or tests) names `crate::module` or a
//! name the crate root re-exports from it. Inside each folder the same holds file by file. The
//! reading is the engine's (`worlds-engine/tests/layers_lib/mod.rs`), shared by the layer
//! tests of every crate.

#[path = "../../worlds-engine/tests/layers_lib/mod.rs"]
mod layers_lib;

#[test]
fn no_two_modules_use_each_other() {
    layers_lib::assert_no_module_circles(&[]);
}

/// The handlers' shared state is below every handler: it uses none of them.
#[test]
fn the_state_uses_no_handlers() {
    let up: Vec<_> = layers_lib::edges()
        .into_iter()
        .filter(|(from, to)| {
            from == "state" && ["routes", "devkit", "dashboard"].contains(&to.as_str())
        })
        .collect();
    assert!(
        up.is_empty(),
        "state/ uses handlers: {up:?}; what `Api` holds must lie in state/ or below"
    );
}

#[test]
fn no_two_files_of_a_folder_use_each_other() {
    for folder in ["auth", "dashboard", "dashboard/pages", "devkit", "routes"] {
        layers_lib::assert_no_file_circles(folder, &[]);
    }
}
