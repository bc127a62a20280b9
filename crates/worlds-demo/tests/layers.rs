//! This crate's top-level modules form no import circle. A module "uses" another when its code
//! (not its comments or tests) names `crate::module` or a name the crate root re-exports from
//! it. The reading is the engine's (`worlds-engine/tests/layers_lib/mod.rs`), shared by the
//! layer tests of every crate.

#[path = "../../worlds-engine/tests/layers_lib/mod.rs"]
mod layers_lib;

#[test]
fn no_two_modules_use_each_other() {
    layers_lib::assert_no_module_circles(&[]);
}
