//! The PostgreSQL crate's top-level modules form no import circle, nor do the files of
//! `batch/`.
//!
//! A module "uses" another when its code (not its comments or tests) names `crate::module` or a
//! name the crate root re-exports from it. The crate root (`lib.rs`, the store itself) is no
//! module: it uses them all. The reading is the engine's
//! (`worlds-engine/tests/layers_lib/mod.rs`), shared by the layer tests of every crate.

#[path = "../../worlds-engine/tests/layers_lib/mod.rs"]
mod layers_lib;

#[test]
fn no_two_modules_use_each_other() {
    assert!(
        !layers_lib::edges().is_empty(),
        "no uses found between the modules of src/, the reading is wrong"
    );
    layers_lib::assert_no_module_circles(&[]);
}

#[test]
fn no_two_files_of_batch_use_each_other() {
    layers_lib::assert_no_file_circles("batch", &[]);
}
