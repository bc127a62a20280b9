//! Misuse of the attributes fails to compile with an error that says what to change.

#[test]
fn misuse_is_a_readable_compile_error() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
